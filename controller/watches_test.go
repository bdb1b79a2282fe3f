package controller_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// runCounter counts the handler runs per key and says which replica ran
// them; its objects stay in their state.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (h *runCounter) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[key]
}

func (h *runCounter) handler() controller.Handler {
	return controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.runs == nil {
			h.runs = map[string]int{}
		}
		h.runs[o.Key]++
		return controller.NoChange(), nil
	})
}

// TestWatchedTransitionRunsWatchers runs two replicas of machines and one
// of racks on one store: the machines watching rack r1 run again as soon
// as r1 is added and as it makes a transition, whichever replica holds
// them, long before the periodic pass; a machine watching nothing does
// not, nor do the watchers of a rack that only waited.
func TestWatchedTransitionRunsWatchers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		machines := &runCounter{}
		for _, owner := range []string{"replica-a", "replica-b"} {
			c, err := controller.New(controller.Config{Kind: "machine", Store: store, Owner: owner, Handler: machines.handler(), Workers: 2})
			require.NoError(t, err)
			startController(t, c)
		}
		rackSteps := make(chan controller.Result, 4)
		racks, err := controller.New(controller.Config{Kind: "rack", Store: store, Owner: "replica-a", Workers: 1,
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				select {
				case r := <-rackSteps:
					return r, nil
				default:
					return controller.NoChange(), nil
				}
			})})
		require.NoError(t, err)
		startController(t, racks)

		require.NoError(t, controller.AddObjects(ctx, store, "machine", []controller.NewObject{
			{Key: "m1", State: "up"}, {Key: "m2", State: "up"}, {Key: "m3", State: "up"},
		}))
		rack := controller.Ref{Kind: "rack", Key: "r1"}
		for _, m := range []string{"m1", "m2"} {
			require.NoError(t, controller.SetWatches(ctx, store, "machine", m, []controller.Ref{rack}))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		runs := func() [3]int { return [3]int{machines.count("m1"), machines.count("m2"), machines.count("m3")} }
		require.Equal(t, [3]int{1, 1, 1}, runs(), "each ran once, and SetWatches made none due")
		o := storedObject(t, store, "machine/m1")
		assert.Equal(t, []controller.Ref{rack}, o.Watches)

		// The rack's addition is a transition of it; a wait is not.
		rackSteps <- controller.Wait("cabling")
		require.NoError(t, controller.AddObject(ctx, store, "rack", "r1", "new", nil))
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, [3]int{2, 2, 1}, runs(), "the watchers ran again, within a second")

		// A transition of the rack, made by its handler.
		rackSteps <- controller.Transition("ready")
		require.NoError(t, racks.Enqueue(ctx, "r1"))
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, [3]int{3, 3, 1}, runs(), "the watchers ran again, long before the periodic pass")
		assert.Equal(t, []controller.Ref{rack}, storedObject(t, store, "machine/m1").Watches, "the handler's writes keep the watches")
	})
}

func TestSetWatchesRefused(t *testing.T) {
	ctx := context.Background()
	mem := converge.NewMemStore()
	require.NoError(t, controller.AddObject(ctx, mem, "machine", "m1", "up", nil))
	tests := []struct {
		name    string
		store   converge.Store
		key     string
		watched []controller.Ref
		want    error
	}{
		{"itself", mem, "m1", []controller.Ref{{Kind: "machine", Key: "m1"}}, controller.ErrObjectInvalid},
		{"empty kind", mem, "m1", []controller.Ref{{Key: "r1"}}, controller.ErrObjectInvalid},
		{"kind with a slash", mem, "m1", []controller.Ref{{Kind: "a/b", Key: "r1"}}, controller.ErrObjectInvalid},
		{"empty key", mem, "m1", []controller.Ref{{Kind: "rack"}}, controller.ErrObjectInvalid},
		{"a store without links", noPriorities{mem}, "m1", []controller.Ref{{Kind: "rack", Key: "r1"}}, controller.ErrObjectInvalid},
		{"missing object", mem, "m9", []controller.Ref{{Kind: "rack", Key: "r1"}}, controller.ErrObjectNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := controller.SetWatches(ctx, tc.store, "machine", tc.key, tc.watched)
			require.ErrorIs(t, err, tc.want)
			var oe *controller.ObjectError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, tc.key, oe.Key)
		})
	}
	got, err := mem.Watching(ctx, "machine/m1")
	require.NoError(t, err)
	assert.Empty(t, got, "nothing written")
}
