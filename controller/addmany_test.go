package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// newObjects returns n objects "o0000".. in state "new", each with data.
func newObjects(n int) []controller.NewObject {
	out := make([]controller.NewObject, n)
	for i := range out {
		out[i] = controller.NewObject{Key: fmt.Sprintf("o%04d", i), State: "new", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return out
}

// TestAddManyAddsAllAndRunsEach adds 2,000 objects in one call and checks
// that each is stored as Add stores one, and handled, alone and as a
// replica.
func TestAddManyAddsAllAndRunsEach(t *testing.T) {
	const n = 2000
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		store := converge.NewMemStore()
		h := &toReady{}
		c, err := controller.New(controller.Config{Kind: "vm", Store: store, Owner: owner, Handler: h, Workers: 8})
		require.NoError(t, err)
		objs := newObjects(n)
		require.NoError(t, c.AddMany(ctx, objs))
		assert.Equal(t, n, c.Len(), "the controller knows them")
		o, ok := c.Get("o0007")
		require.True(t, ok)
		assert.Equal(t, controller.State("new"), o.State)
		assert.JSONEq(t, `{"n":7}`, string(o.Data))
		hist, err := c.History(ctx, "o0007")
		require.NoError(t, err)
		require.Len(t, hist, 1)
		assert.Equal(t, converge.HistoryEntry{At: hist[0].At, To: "new", Reason: "added"}, hist[0], "as Add starts a history")

		stop := startController(t, c)
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, stop())
		h.mu.Lock()
		defer h.mu.Unlock()
		assert.Len(t, h.runs, n, "every object handled")
		for _, obj := range objs {
			assert.Equal(t, controller.State("ready"), storedObject(t, store, "vm/"+obj.Key).State)
		}
	})
}

// TestAddManyAllOrNothing checks that a batch with stored or invalid
// objects adds none of them and names the culprits.
func TestAddManyAllOrNothing(t *testing.T) {
	ctx := context.Background()
	batch := func(edit func([]controller.NewObject) []controller.NewObject) []controller.NewObject {
		return edit(newObjects(10))
	}
	tests := []struct {
		name    string
		objs    []controller.NewObject
		exist   []string // want an *ObjectsExistError with these keys
		invalid string   // want ErrObjectInvalid naming this key
	}{
		{"stored keys", batch(func(o []controller.NewObject) []controller.NewObject {
			return append(o, controller.NewObject{Key: "old-2", State: "new"}, controller.NewObject{Key: "old-1", State: "new"})
		}), []string{"old-1", "old-2"}, ""},
		{"empty key", batch(func(o []controller.NewObject) []controller.NewObject { o[3].Key = ""; return o }), nil, ""},
		{"key twice", batch(func(o []controller.NewObject) []controller.NewObject { o[3].Key = o[2].Key; return o }), nil, "o0002"},
		{"empty state", batch(func(o []controller.NewObject) []controller.NewObject { o[4].State = ""; return o }), nil, "o0004"},
		{"data not JSON", batch(func(o []controller.NewObject) []controller.NewObject {
			o[5].Data = json.RawMessage(`{`)
			return o
		}), nil, "o0005"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := converge.NewMemStore()
			c, err := controller.New(controller.Config{Kind: "vm", Store: store, Handler: &toReady{}})
			require.NoError(t, err)
			require.NoError(t, c.AddMany(ctx, []controller.NewObject{{Key: "old-1", State: "ready"}, {Key: "old-2", State: "ready"}}))

			err = c.AddMany(ctx, tt.objs)
			if tt.exist != nil {
				var ee *controller.ObjectsExistError
				require.ErrorAs(t, err, &ee)
				require.ErrorIs(t, err, controller.ErrObjectExists)
				assert.Equal(t, "vm", ee.Kind)
				assert.Equal(t, tt.exist, ee.Keys)
			} else {
				var oe *controller.ObjectError
				require.ErrorAs(t, err, &oe)
				require.ErrorIs(t, err, controller.ErrObjectInvalid)
				assert.Equal(t, tt.invalid, oe.Key)
			}
			recs, err := store.List(ctx, "vm/")
			require.NoError(t, err)
			assert.Len(t, recs, 2, "nothing added")
			assert.Equal(t, 2, c.Len())
			hist, err := store.History(ctx, "vm/o0000")
			require.NoError(t, err)
			assert.Empty(t, hist, "no history written")
		})
	}
}

// plainStore is a converge.Store that cannot create records in bulk.
type plainStore struct{ converge.Store }

func TestAddObjectsNeedsACreator(t *testing.T) {
	ctx := context.Background()
	mem := converge.NewMemStore()
	err := controller.AddObjects(ctx, plainStore{mem}, "vm", newObjects(3))
	require.ErrorIs(t, err, controller.ErrObjectInvalid)
	var oe *controller.ObjectError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "vm", oe.Kind)
	recs, err := mem.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, recs)

	require.NoError(t, controller.AddObjects(ctx, mem, "vm", nil), "no objects: nothing to do")
	require.NoError(t, controller.AddObjects(ctx, mem, "vm", newObjects(3)))
	recs, err = mem.List(ctx, "vm/")
	require.NoError(t, err)
	assert.Len(t, recs, 3)
	err = controller.AddObjects(ctx, mem, "vm", newObjects(20))
	var ee *controller.ObjectsExistError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, []string{"o0000", "o0001", "o0002"}, ee.Keys)
}
