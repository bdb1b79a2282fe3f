package controller_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// orderRecorder records the keys its handler runs, in order, and moves
// each object to "done".
type orderRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (h *orderRecorder) Handle(_ context.Context, o controller.Object) (controller.Result, error) {
	if o.State == "done" {
		return controller.NoChange(), nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys = append(h.keys, o.Key)
	return controller.Transition("done"), nil
}

// TestReplicaRunsHigherPriorityFirst adds objects of several priorities,
// by AddMany, AddObject and SetPriority, and checks that a replica with
// one worker runs them highest first, and that the priority is stored
// with the object.
func TestReplicaRunsHigherPriorityFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		h := &orderRecorder{}
		c, err := controller.New(controller.Config{Kind: "vm", Store: store, Owner: "replica-1", Handler: h, Workers: 1})
		require.NoError(t, err)
		require.NoError(t, c.AddMany(ctx, []controller.NewObject{
			{Key: "low", State: "new"},
			{Key: "high", State: "new", Priority: 50},
			{Key: "raised", State: "new"},
		}))
		require.NoError(t, c.AddObject(ctx, controller.NewObject{Key: "mid", State: "new", Priority: 20}))
		require.NoError(t, controller.SetPriority(ctx, store, "vm", "raised", 30))
		require.NoError(t, c.SetPriority(ctx, "raised", 30), "the priority it has: nothing to write")

		assert.Equal(t, 50, storedObject(t, store, "vm/high").Priority)
		assert.Equal(t, 30, storedObject(t, store, "vm/raised").Priority)
		assert.Zero(t, storedObject(t, store, "vm/low").Priority)
		p, err := store.Priority(ctx, "vm/raised")
		require.NoError(t, err)
		assert.Equal(t, 30, p, "the store orders by it")

		stop := startController(t, c)
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, stop())
		h.mu.Lock()
		defer h.mu.Unlock()
		assert.Equal(t, []string{"high", "raised", "mid", "low"}, h.keys)
		assert.Equal(t, 30, storedObject(t, store, "vm/raised").Priority, "a handler's write keeps the priority")
	})
}

// noPriorities is a converge.Store that keeps no priorities.
type noPriorities struct{ converge.Store }

func TestPriorityRefused(t *testing.T) {
	ctx := context.Background()
	mem := converge.NewMemStore()
	tests := []struct {
		name string
		run  func() error
	}{
		{"negative at add", func() error {
			return controller.AddObjects(ctx, mem, "vm", []controller.NewObject{{Key: "a", State: "new", Priority: -1}})
		}},
		{"above the most at add", func() error {
			c, err := controller.New(controller.Config{Kind: "vm", Store: mem, Handler: &orderRecorder{}})
			require.NoError(t, err)
			return c.AddObject(ctx, controller.NewObject{Key: "a", State: "new", Priority: converge.MaxPriority + 1})
		}},
		{"a store without priorities", func() error {
			return controller.AddObjects(ctx, noPriorities{mem}, "vm", []controller.NewObject{{Key: "a", State: "new", Priority: 1}})
		}},
		{"set on a store without priorities", func() error {
			return controller.SetPriority(ctx, noPriorities{mem}, "vm", "a", 1)
		}},
		{"set out of range", func() error {
			require.NoError(t, controller.AddObject(ctx, mem, "vm", "b", "new", nil))
			return controller.SetPriority(ctx, mem, "vm", "b", -3)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			require.ErrorIs(t, err, controller.ErrObjectInvalid)
			var oe *controller.ObjectError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, "vm", oe.Kind)
		})
	}
	_, err := mem.Get(ctx, "vm/a")
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "nothing written")
	require.ErrorIs(t, controller.SetPriority(ctx, mem, "vm", "nobody", 1), controller.ErrObjectNotFound)
}

// An object stored before priorities were kept reads with priority 0.
func TestObjectWithoutPriorityDecodes(t *testing.T) {
	ctx := context.Background()
	mem := converge.NewMemStore()
	_, err := mem.Put(ctx, converge.StoreRecord{Key: "vm/old", Value: json.RawMessage(`{"state":"new","since":"2026-11-01T00:00:00Z"}`)})
	require.NoError(t, err)
	assert.Zero(t, storedObject(t, mem, "vm/old").Priority)
	require.NoError(t, controller.SetPriority(ctx, mem, "vm", "old", 7))
	o := storedObject(t, mem, "vm/old")
	assert.Equal(t, 7, o.Priority)
	assert.Equal(t, controller.State("new"), o.State, "the rest kept")
}
