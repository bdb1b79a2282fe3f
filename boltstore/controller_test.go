package boltstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
)

// TestControllerReplicasOnStore runs two controllers with owners on one
// store (the Queue path: ClaimDue, renewals, fenced writes, Finish, Watch)
// with transient handler faults, then reopens the file: every object
// reached its last state, and its stored history says so.
func TestControllerReplicasOnStore(t *testing.T) {
	path := tempPath(t)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, err := boltstore.Open(path, boltstore.Options{})
		require.NoError(t, err)
		var busy sync.Map // key -> owner handling it
		var overlaps, faults atomic.Int32
		replica := func(owner string) *controller.Controller {
			var n atomic.Int32
			c, err := controller.New(controller.Config{
				Kind: "host", Store: st, Owner: owner, LeaseTTL: 10 * time.Second, Workers: 3,
				Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
					if other, dup := busy.LoadOrStore(o.Key, owner); dup {
						overlaps.Add(1)
						t.Errorf("%s handled by %s and %s at once", o.Key, owner, other)
					}
					defer busy.Delete(o.Key)
					time.Sleep(50 * time.Millisecond)
					if n.Add(1)%4 == 0 {
						faults.Add(1)
						return controller.Result{}, errors.New("transient")
					}
					switch o.State {
					case "new":
						return controller.Transition("installing"), nil
					case "installing":
						return controller.Transition("ready"), nil
					}
					return controller.NoChange(), nil
				}),
			})
			require.NoError(t, err)
			return c
		}
		a, b := replica("replica-a"), replica("replica-b")
		for i := range 30 {
			require.NoError(t, a.Add(ctx, fmt.Sprintf("h%02d", i), "new", nil))
		}
		var wg sync.WaitGroup
		runCtx, cancel := context.WithCancel(ctx)
		for _, c := range []*controller.Controller{a, b} {
			wg.Go(func() { assert.NoError(t, c.Run(runCtx)) })
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		cancel()
		wg.Wait()
		require.NoError(t, st.Close())
		assert.Zero(t, overlaps.Load())
		assert.Positive(t, faults.Load())

		st, err = boltstore.Open(path, boltstore.Options{})
		require.NoError(t, err)
		defer st.Close()
		recs, err := st.List(ctx, "host/")
		require.NoError(t, err)
		require.Len(t, recs, 30)
		for _, rec := range recs {
			var o controller.Object
			require.NoError(t, json.Unmarshal(rec.Value, &o))
			assert.Equal(t, controller.State("ready"), o.State, rec.Key)
			hist, err := st.History(ctx, rec.Key)
			require.NoError(t, err)
			assert.Equal(t, []string{"new", "installing", "ready"}, tos(hist), rec.Key)
		}
	})
}
