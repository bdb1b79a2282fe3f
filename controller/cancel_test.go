package controller_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// blocker is a handler that blocks until its context ends, and records
// the cause, per key.
type blocker struct {
	mu      sync.Mutex
	started map[string]int
	causes  map[string][]error
	block   atomic.Bool
}

func newBlocker() *blocker {
	b := &blocker{started: map[string]int{}, causes: map[string][]error{}}
	b.block.Store(true)
	return b
}

func (b *blocker) Handle(ctx context.Context, o controller.Object) (controller.Result, error) {
	b.mu.Lock()
	b.started[o.Key]++
	b.mu.Unlock()
	if !b.block.Load() {
		return controller.NoChange(), nil
	}
	<-ctx.Done()
	b.mu.Lock()
	b.causes[o.Key] = append(b.causes[o.Key], context.Cause(ctx))
	b.mu.Unlock()
	return controller.Result{}, ctx.Err()
}

func (b *blocker) runs(key string) (int, []error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started[key], append([]error(nil), b.causes[key]...)
}

// TestCancelStopsARunningHandler cancels an object whose handler runs:
// the handler's context ends with ErrCancelled, the object is halted and
// its history names who asked, it is not run again until woken, and
// Enqueue wakes it.
func TestCancelStopsARunningHandler(t *testing.T) {
	for _, via := range []string{"controller", "store"} {
		t.Run(via, func(t *testing.T) {
			inEachMode(t, func(t *testing.T, owner string) {
				ctx := context.Background()
				store := converge.NewMemStore()
				h := newBlocker()
				c, err := controller.New(controller.Config{Kind: "vm", Store: store, Owner: owner, Handler: h,
					Resync: time.Minute, LeaseTTL: time.Hour})
				require.NoError(t, err)
				require.NoError(t, c.AddMany(ctx, []controller.NewObject{{Key: "a", State: "flashing"}, {Key: "b", State: "flashing"}}))
				stop := startController(t, c)
				synctest.Wait()
				n, _ := h.runs("a")
				require.Equal(t, 1, n, "running")

				if via == "controller" {
					require.NoError(t, c.Cancel(ctx, "a", "alice"))
				} else {
					if owner == "" {
						t.Skip("a controller on its own hears of a cancel in its store at its next pass")
					}
					require.NoError(t, controller.Cancel(ctx, store, "vm", "a", "alice"))
				}
				synctest.Wait()
				n, causes := h.runs("a")
				require.Len(t, causes, 1, "the handler's context ended")
				assert.ErrorIs(t, causes[0], controller.ErrCancelled)
				assert.Equal(t, 1, n)
				_, causesB := h.runs("b")
				assert.Empty(t, causesB, "the other object runs on")

				o := storedObject(t, store, "vm/a")
				assert.Equal(t, controller.HaltCancelled, o.Halted)
				assert.Equal(t, controller.State("flashing"), o.State)
				assert.Empty(t, o.RecentFailures, "a cancel is not a failure")
				hist, err := store.History(ctx, "vm/a")
				require.NoError(t, err)
				last := hist[len(hist)-1]
				assert.Equal(t, converge.HistoryEntry{At: last.At, From: "flashing", To: "flashing", Reason: controller.ReasonCancelled, By: "alice"}, last)

				time.Sleep(2 * time.Hour)
				synctest.Wait()
				n, _ = h.runs("a")
				assert.Equal(t, 1, n, "not run again")

				h.block.Store(false)
				require.NoError(t, c.Enqueue(ctx, "a"))
				time.Sleep(time.Second)
				synctest.Wait()
				n, _ = h.runs("a")
				assert.Equal(t, 2, n, "woken by Enqueue")
				assert.Empty(t, storedObject(t, store, "vm/a").Halted)
				require.NoError(t, c.Cancel(ctx, "b", "alice"))
				synctest.Wait()
				require.NoError(t, stop())
			})
		})
	}
}

// TestCancelAcrossReplicas runs two replicas of one worker on one store,
// which claim two objects each: one runs, one waits for the worker. A
// cancel made without a controller reaches the replica that holds the
// object, whether its handler runs (its context ends) or waits to start
// (it never starts, or its context ends as it starts, when another
// object's cancel freed the worker before this one was heard).
func TestCancelAcrossReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		h := newBlocker()
		for _, owner := range []string{"r1", "r2"} {
			c, err := controller.New(controller.Config{Kind: "vm", Store: store, Owner: owner, Handler: h, Workers: 1, LeaseTTL: time.Hour})
			require.NoError(t, err)
			startController(t, c)
		}
		objs := newObjects(4)
		require.NoError(t, controller.AddObjects(ctx, store, "vm", objs))
		synctest.Wait()
		var running, waiting []string
		for _, o := range objs {
			if n, _ := h.runs(o.Key); n == 1 {
				running = append(running, o.Key)
			} else {
				waiting = append(waiting, o.Key)
			}
		}
		require.Len(t, running, 2, "one handler per replica")
		for _, key := range append(waiting, running...) {
			require.NoError(t, controller.Cancel(ctx, store, "vm", key, "bob"))
		}
		synctest.Wait()
		for _, key := range running {
			_, causes := h.runs(key)
			require.Len(t, causes, 1, "%s cancelled on whichever replica ran it", key)
			assert.ErrorIs(t, causes[0], controller.ErrCancelled)
		}
		for _, key := range waiting {
			// Its cancel may be heard before or after another object's
			// cancel frees the worker: it never starts, or its context
			// ends as it starts.
			n, causes := h.runs(key)
			require.Len(t, causes, n, "%s: a handler that started was cancelled", key)
			for _, cause := range causes {
				assert.ErrorIs(t, cause, controller.ErrCancelled)
			}
		}
		for _, o := range objs {
			assert.Equal(t, controller.HaltCancelled, storedObject(t, store, "vm/"+o.Key).Halted)
		}
	})
}

func TestCancelErrors(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	require.NoError(t, controller.AddObject(ctx, store, "vm", "a", "new", nil))
	tests := []struct {
		name      string
		store     converge.Store
		kind, key string
		want      error
	}{
		{"missing", store, "vm", "nope", controller.ErrObjectNotFound},
		{"empty key", store, "vm", "", controller.ErrObjectInvalid},
		{"bad kind", store, "v/m", "a", controller.ErrObjectInvalid},
		{"nil store", nil, "vm", "a", controller.ErrObjectInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := controller.Cancel(ctx, tt.store, tt.kind, tt.key, "alice")
			require.ErrorIs(t, err, tt.want)
			var oe *controller.ObjectError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, tt.key, oe.Key)
		})
	}
	require.NoError(t, controller.Cancel(ctx, store, "vm", "a", "alice"))
	require.NoError(t, controller.Cancel(ctx, store, "vm", "a", "carol"), "twice: nothing more")
	hist, err := store.History(ctx, "vm/a")
	require.NoError(t, err)
	require.Len(t, hist, 2, "added, cancelled once")
	assert.Equal(t, "alice", hist[1].By)
}
