package controller_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// noLeaseReader hides the MemStore's Holder.
type noLeaseReader struct{ converge.Queue }

// TestLimitsStatus: Controller.Limits and ReadLimits say, for each
// limited state, its limit, the slots in use across the replicas, the
// objects put off for want of a slot and those waiting to enter it; a
// store that cannot read leases says so with -1.
func TestLimitsStatus(t *testing.T) {
	for _, owners := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", owners), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				store := converge.NewMemStore()
				limits := map[controller.State]controller.Limit{
					"updating":  {Concurrent: 2},
					"rebooting": {Every: 10 * time.Second},
				}
				var ctrls []*controller.Controller
				for r := range owners {
					owner := ""
					if owners > 1 {
						owner = fmt.Sprintf("r%d", r)
					}
					c, err := controller.New(controller.Config{
						Kind: "fw", Store: store, Owner: owner, Workers: 4, Limits: limits,
						Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
							switch o.State {
							case "updating":
								select {
								case <-time.After(time.Minute):
								case <-ctx.Done():
									return controller.Result{}, ctx.Err()
								}
								return controller.Transition("done"), nil
							case "new":
								return controller.Transition("rebooting"), nil
							}
							return controller.NoChange().After(time.Hour), nil
						})})
					require.NoError(t, err)
					ctrls = append(ctrls, c)
				}
				for i := range 5 {
					require.NoError(t, ctrls[0].Add(ctx, fmt.Sprintf("u%d", i), "updating", nil))
					require.NoError(t, ctrls[0].Add(ctx, fmt.Sprintf("n%d", i), "new", nil))
				}
				for _, c := range ctrls {
					startController(t, c)
				}
				time.Sleep(3 * time.Second)

				forSlot := 0
				for _, c := range ctrls {
					got, err := c.Limits(ctx)
					require.NoError(t, err)
					require.Len(t, got, 2)
					assert.Equal(t, controller.State("rebooting"), got[0].State, "sorted by state")
					assert.Equal(t, limits["rebooting"], got[0].Limit)
					assert.Zero(t, got[0].InUse, "no slots without a concurrency limit")
					assert.Equal(t, 4, got[0].WaitingToEnter, "one entered, four wait for a token")
					assert.Equal(t, controller.State("updating"), got[1].State)
					assert.Equal(t, 2, got[1].InUse, "both slots held, across the replicas")
					assert.Zero(t, got[1].WaitingToEnter)
					forSlot += got[1].WaitingForSlot
				}
				assert.Equal(t, 3, forSlot, "two run, three wait for a slot, counted by the replicas that put them off")

				if owners > 1 {
					read, err := controller.ReadLimits(ctx, store, "fw", limits)
					require.NoError(t, err)
					require.Len(t, read, 2)
					assert.Equal(t, 4, read[0].WaitingToEnter)
					assert.Equal(t, 2, read[1].InUse)
					assert.Zero(t, read[1].WaitingForSlot, "ReadLimits has no controller to ask")

					blind, err := controller.ReadLimits(ctx, noLeaseReader{store}, "fw", limits)
					require.NoError(t, err)
					assert.Equal(t, -1, blind[1].InUse, "a store that cannot read leases")
					assert.Zero(t, blind[0].InUse)
				}
			})
		})
	}
}

func TestLimitString(t *testing.T) {
	for _, tt := range []struct {
		lim  controller.Limit
		want string
	}{
		{controller.Limit{Concurrent: 5}, "5 at once"},
		{controller.Limit{Every: time.Minute}, "1 per 1m0s"},
		{controller.Limit{Every: 5 * time.Second, Burst: 3}, "3 per 15s"},
		{controller.Limit{Concurrent: 2, Every: time.Second, Burst: 2}, "2 at once, 2 per 2s"},
		{controller.Limit{}, "none"},
	} {
		assert.Equal(t, tt.want, tt.lim.String())
	}
}
