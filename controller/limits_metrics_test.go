package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/convergetest"
)

// TestLimitedObjectsGauge: MetricLimitedObjects says how many objects
// wait on each limit now, summed across the replicas: those put off for
// want of a slot of their state, and those whose transition into a state
// waits for a token; it falls as they get through, and is zero once Run
// returns.
func TestLimitedObjectsGauge(t *testing.T) {
	for _, owners := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", owners), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				store := converge.NewMemStore()
				var ms []*convergetest.Metrics
				var ctrls []*controller.Controller
				for r := range owners {
					m := &convergetest.Metrics{}
					ms = append(ms, m)
					owner := ""
					if owners > 1 {
						owner = fmt.Sprintf("r%d", r)
					}
					c, err := controller.New(controller.Config{
						Kind: "fw", Store: store, Owner: owner, Workers: 4, Metrics: m,
						Limits: map[controller.State]controller.Limit{
							"updating":  {Concurrent: 1},
							"rebooting": {Every: 10 * time.Second},
						},
						Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
							switch o.State {
							case "updating":
								select {
								case <-time.After(10 * time.Second):
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
				var stops []func() error
				for _, c := range ctrls {
					stops = append(stops, startController(t, c))
				}
				// Each replica counts the objects it put off: the sum is
				// the fleet's.
				waiting := func(state controller.State, limit string) float64 {
					var n float64
					for _, m := range ms {
						n += m.Value(controller.MetricLimitedObjects.Name, "fw", string(state), limit)
					}
					return n
				}
				time.Sleep(3 * time.Second)
				assert.Equal(t, 4.0, waiting("updating", controller.LimitConcurrent), "one runs, four wait for its slot")
				assert.Equal(t, 4.0, waiting("rebooting", controller.LimitRate), "one entered, four wait for a token")
				// Every object gets through: 5 runs of 10 s, 5 entries
				// 10 s apart (each deferred one looks again every 10 to
				// 15 s).
				time.Sleep(100 * time.Second)
				recs, err := store.List(ctx, "fw/")
				require.NoError(t, err)
				require.Len(t, recs, 10)
				for _, r := range recs {
					var o controller.Object
					require.NoError(t, json.Unmarshal(r.Value, &o))
					want := controller.State("done")
					if strings.HasPrefix(r.Key, "fw/n") {
						want = "rebooting"
					}
					assert.Equal(t, want, o.State, r.Key)
				}
				assert.Zero(t, waiting("updating", controller.LimitConcurrent), "none waits any more")
				assert.Zero(t, waiting("rebooting", controller.LimitRate))
				for _, stop := range stops {
					require.NoError(t, stop())
				}
				assert.Zero(t, waiting("updating", controller.LimitConcurrent))
			})
		})
	}
}
