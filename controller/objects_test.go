package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/convergetest"
)

// toReady moves every object to "ready" and counts the runs per key.
type toReady struct {
	mu   sync.Mutex
	runs map[string]int
}

func (h *toReady) Handle(_ context.Context, o controller.Object) (controller.Result, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runs == nil {
		h.runs = map[string]int{}
	}
	h.runs[o.Key]++
	if o.State == "ready" {
		return controller.NoChange(), nil
	}
	return controller.Transition("ready"), nil
}

func TestAddObjectStoresWhatAddStores(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	require.NoError(t, controller.AddObject(ctx, store, "vm", "a", "new", json.RawMessage(`{"cpu":2}`)))

	c, err := controller.New(controller.Config{Kind: "vm", Store: store, Handler: &toReady{}})
	require.NoError(t, err)
	require.NoError(t, c.Add(ctx, "b", "new", json.RawMessage(`{"cpu":2}`)))
	ra, err := store.Get(ctx, "vm/a")
	require.NoError(t, err)
	rb, err := store.Get(ctx, "vm/b")
	require.NoError(t, err)
	var oa, ob map[string]any
	require.NoError(t, json.Unmarshal(ra.Value, &oa))
	require.NoError(t, json.Unmarshal(rb.Value, &ob))
	delete(oa, "since")
	delete(ob, "since")
	assert.Equal(t, ob, oa, "the same document as Controller.Add")
	ha, err := store.History(ctx, "vm/a")
	require.NoError(t, err)
	require.Len(t, ha, 1)
	assert.Equal(t, "new", ha[0].To)
	assert.Equal(t, "added", ha[0].Reason)

	err = controller.AddObject(ctx, store, "vm", "b", "new", nil)
	require.ErrorIs(t, err, controller.ErrObjectExists, "the key Controller.Add stored")
	var oe *controller.ObjectError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "vm", oe.Kind)
	assert.Equal(t, "b", oe.Key)
	require.ErrorIs(t, c.Add(ctx, "a", "new", nil), controller.ErrObjectExists, "the key AddObject stored")
}

func TestAddObjectRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	for _, tc := range []struct {
		name      string
		store     converge.Store
		kind, key string
		state     controller.State
		data      string
	}{
		{"empty kind", store, "", "a", "new", ""},
		{"kind with a slash", store, "vm/x", "a", "new", ""},
		{"nil store", nil, "vm", "a", "new", ""},
		{"empty key", store, "vm", "", "new", ""},
		{"empty state", store, "vm", "a", "", ""},
		{"data not JSON", store, "vm", "a", "new", "{"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var data json.RawMessage
			if tc.data != "" {
				data = json.RawMessage(tc.data)
			}
			err := controller.AddObject(ctx, tc.store, tc.kind, tc.key, tc.state, data)
			require.ErrorIs(t, err, controller.ErrObjectInvalid)
			var oe *controller.ObjectError
			require.ErrorAs(t, err, &oe)
		})
	}
	recs, err := store.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, recs, "nothing stored")

	failing := (&convergetest.Store{}).FailNext(convergetest.OpPut, 1, nil)
	err = controller.AddObject(ctx, failing, "vm", "a", "new", nil)
	require.ErrorIs(t, err, convergetest.ErrInjected)
	assert.Contains(t, err.Error(), `vm "a"`)
}

// TestAddObjectReachesARunningController checks both ways a controller
// sees an object AddObject stored: a replica on a shared queue claims it
// at once; a controller on its own at its next periodic pass. Objects
// lags until then; StoredObjects does not.
func TestAddObjectReachesARunningController(t *testing.T) {
	t.Run("alone, at the next resync", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			store := converge.NewMemStore()
			h := &toReady{}
			c, err := controller.New(controller.Config{Kind: "vm", Store: store, Handler: h, Resync: time.Minute, ResyncJitter: -1})
			require.NoError(t, err)
			startController(t, c)
			synctest.Wait()

			require.NoError(t, controller.AddObject(ctx, store, "vm", "a", "new", nil))
			synctest.Wait()
			assert.Empty(t, c.Objects(), "Objects is the controller's view: not listed yet")
			stored, err := c.StoredObjects(ctx)
			require.NoError(t, err)
			require.Len(t, stored, 1)
			assert.Equal(t, controller.State("new"), stored[0].State)

			time.Sleep(time.Minute + time.Second)
			synctest.Wait()
			o, ok := c.Get("a")
			require.True(t, ok)
			assert.Equal(t, controller.State("ready"), o.State)
			stored, err = c.StoredObjects(ctx)
			require.NoError(t, err)
			require.Len(t, stored, 1)
			assert.Equal(t, controller.State("ready"), stored[0].State)
		})
	})
	t.Run("replica, at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			store := converge.NewMemStore()
			h := &toReady{}
			c, err := controller.New(controller.Config{Kind: "vm", Store: store, Owner: "r1", Handler: h, Resync: time.Hour})
			require.NoError(t, err)
			startController(t, c)
			synctest.Wait()

			require.NoError(t, controller.AddObject(ctx, store, "vm", "a", "new", nil))
			synctest.Wait()
			stored, err := c.StoredObjects(ctx)
			require.NoError(t, err)
			require.Len(t, stored, 1)
			assert.Equal(t, controller.State("ready"), stored[0].State, "claimed and handled without waiting for a resync")
		})
	})
}

func TestStoredObjectsReportsARecordItCannotRead(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	c, err := controller.New(controller.Config{Kind: "vm", Store: store, Handler: &toReady{}})
	require.NoError(t, err)
	for _, k := range []string{"b", "a"} {
		require.NoError(t, c.Add(ctx, k, "new", nil))
	}
	_, err = store.Put(ctx, converge.StoreRecord{Key: "other/x", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	got, err := c.StoredObjects(ctx)
	require.NoError(t, err)
	require.Len(t, got, 2, "only the controller's kind")
	assert.Equal(t, "a", got[0].Key)
	assert.Equal(t, "b", got[1].Key)
	assert.NotZero(t, got[0].Version)

	_, err = store.Put(ctx, converge.StoreRecord{Key: "vm/broken", Value: json.RawMessage(`[1]`)})
	require.NoError(t, err)
	_, err = c.StoredObjects(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "vm/broken")

	failing := (&convergetest.Store{}).FailNext(convergetest.OpList, 1, nil)
	c2, err := controller.New(controller.Config{Kind: "vm", Store: failing, Handler: &toReady{}})
	require.NoError(t, err)
	_, err = c2.StoredObjects(ctx)
	require.True(t, errors.Is(err, convergetest.ErrInjected), fmt.Sprint(err))
}
