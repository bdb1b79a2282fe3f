package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/convergetest"
)

// reasons returns the reasons and who of the history of key, as
// "reason by who" ("reason" alone when By is empty).
func reasons(t *testing.T, store converge.Store, key string) []string {
	t.Helper()
	h, err := store.History(context.Background(), key)
	require.NoError(t, err)
	out := make([]string, len(h))
	for i, e := range h {
		out[i] = e.Reason
		if e.By != "" {
			out[i] += " by " + e.By
		}
	}
	return out
}

// A quarantine is in the history, by nobody; the package's Release,
// without a Controller, clears it with an entry naming who released it,
// and a running controller picks the object up: a replica at once, a
// controller on its own at its next listing of the store.
func TestReleaseWithoutControllerWakesARunningOne(t *testing.T) {
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		store := converge.NewMemStore()
		var broken atomic.Bool
		broken.Store(true)
		var runs atomic.Int32
		// The run after the release waits for gate, so that a replica woken
		// by the release cannot end it (and reset the failures) before the
		// test has read what Release stored.
		gate := make(chan struct{})
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Owner: owner,
			Resync: 10 * time.Minute, ResyncJitter: -1,
			Backoff:         converge.Backoff{Base: time.Second, Max: time.Second},
			QuarantineAfter: 2,
			Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
				if o.State == "ready" {
					return controller.NoChange(), nil
				}
				runs.Add(1)
				if broken.Load() {
					return controller.Result{}, errors.New("connection refused")
				}
				<-gate
				return controller.Transition("ready").Because("provisioned"), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "provisioning", nil))
		stop := startController(t, c)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Equal(t, int32(2), runs.Load())
		assert.Equal(t, []string{"added", "quarantined: connection refused"}, reasons(t, store, "vm/a"))
		h, err := store.History(ctx, "vm/a")
		require.NoError(t, err)
		require.Len(t, h, 2)
		assert.Equal(t, "provisioning", h[1].From)
		assert.Equal(t, "provisioning", h[1].To, "a halt is not a transition")

		broken.Store(false)
		require.NoError(t, controller.Release(ctx, store, "vm", "a", "alice"))
		o := storedObject(t, store, "vm/a")
		assert.Empty(t, o.Halted)
		assert.Zero(t, o.Retries)
		assert.Equal(t, 2, o.Failures, "the failures in the state are kept")
		close(gate)
		synctest.Wait()
		if owner == "" {
			assert.Equal(t, int32(2), runs.Load(), "a controller on its own sees the release when it lists the store")
			time.Sleep(10 * time.Minute)
			synctest.Wait()
		}
		assert.Equal(t, int32(3), runs.Load(), "released: run again")
		assert.Equal(t, controller.State("ready"), storedObject(t, store, "vm/a").State)
		assert.Equal(t, []string{"added", "quarantined: connection refused", "released by alice", "provisioned"}, reasons(t, store, "vm/a"))
		require.NoError(t, stop())
	})
}

// Controller.ReleaseBy queues the object in its controller at once, with
// who in the history; Controller.Release names nobody.
func TestControllerReleaseByRecordsWho(t *testing.T) {
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		store := converge.NewMemStore()
		var runs atomic.Int32
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Owner: owner,
			Resync: 24 * time.Hour, ResyncJitter: -1,
			Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
				runs.Add(1)
				return controller.Result{}, controller.Terminal(errors.New("no such image"))
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "provisioning", nil))
		stop := startController(t, c)
		synctest.Wait()
		require.Equal(t, int32(1), runs.Load())

		require.NoError(t, c.ReleaseBy(ctx, "a", "ops: bob"))
		synctest.Wait()
		assert.Equal(t, int32(2), runs.Load(), "queued at once")
		require.NoError(t, c.Release(ctx, "a"))
		synctest.Wait()
		assert.Equal(t, int32(3), runs.Load())
		assert.Equal(t, []string{"added", "terminal error: no such image", "released by ops: bob",
			"terminal error: no such image", "released", "terminal error: no such image"}, reasons(t, store, "vm/a"))
		require.NoError(t, stop())
	})
}

// An object found above its state's SLA has an entry for it, by nobody.
func TestSLABreachIsInTheHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, ResyncJitter: -1, Resync: time.Minute,
			SLA: map[controller.State]time.Duration{"provisioning": 5 * time.Minute},
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				return controller.Wait("booting"), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "provisioning", nil))
		stop := startController(t, c)
		time.Sleep(20 * time.Minute)
		synctest.Wait()
		assert.Equal(t, []string{"added", "above SLA 5m0s"}, reasons(t, store, "vm/a"), "one entry, however long it stays above")
		require.NoError(t, stop())
	})
}

// putHalted stores the object key of kind vm as halted, without a
// controller.
func putHalted(t *testing.T, store converge.Store, key string, halt controller.Halt) uint64 {
	t.Helper()
	b, err := json.Marshal(controller.Object{State: "provisioning", Since: time.Now(), Retries: 3, Failures: 3, Halted: halt,
		LastError: &controller.Failure{At: time.Now(), Error: "connection refused"}})
	require.NoError(t, err)
	v, err := store.Put(context.Background(), converge.StoreRecord{Key: "vm/" + key, Value: b})
	require.NoError(t, err)
	return v
}

func TestReleaseWithoutController(t *testing.T) {
	ctx := context.Background()
	t.Run("not halted: nothing stored", func(t *testing.T) {
		store := converge.NewMemStore()
		v := putHalted(t, store, "a", "")
		require.NoError(t, controller.Release(ctx, store, "vm", "a", "alice"))
		rec, err := store.Get(ctx, "vm/a")
		require.NoError(t, err)
		assert.Equal(t, v, rec.Version)
		assert.Empty(t, reasons(t, store, "vm/a"))
	})
	t.Run("terminal halt released", func(t *testing.T) {
		store := converge.NewMemStore()
		putHalted(t, store, "a", controller.HaltTerminal)
		require.NoError(t, controller.Release(ctx, store, "vm", "a", "alice"))
		assert.Empty(t, storedObject(t, store, "vm/a").Halted)
		assert.Equal(t, []string{"released by alice"}, reasons(t, store, "vm/a"))
	})
	t.Run("a write in between is read again", func(t *testing.T) {
		store := &staleOnce{Store: &convergetest.Store{}}
		putHalted(t, store, "a", controller.HaltQuarantined)
		require.NoError(t, controller.Release(ctx, store, "vm", "a", "alice"))
		assert.Equal(t, int32(1), store.stale.Load(), "the first write was stale")
		assert.Empty(t, storedObject(t, store, "vm/a").Halted)
		assert.Equal(t, []string{"released by alice"}, reasons(t, store, "vm/a"), "one entry")
	})
	t.Run("made due in a queue", func(t *testing.T) {
		store := converge.NewMemStore()
		putHalted(t, store, "a", controller.HaltQuarantined)
		// Take the record's due time away, as a replica's Finish with no
		// next run leaves a halted object.
		claimed, err := store.ClaimDue(ctx, "vm/", "r", time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.NoError(t, store.Finish(ctx, claimed[0].Lease, time.Time{}))
		require.NoError(t, controller.Release(ctx, store, "vm", "a", "alice"))
		claimed, err = store.ClaimDue(ctx, "vm/", "r", time.Minute, 10)
		require.NoError(t, err)
		assert.Len(t, claimed, 1, "due again")
	})
	for _, tc := range []struct {
		name      string
		store     converge.Store
		kind, key string
		want      error
	}{
		{"missing key", converge.NewMemStore(), "vm", "nope", controller.ErrObjectNotFound},
		{"empty key", converge.NewMemStore(), "vm", "", controller.ErrObjectInvalid},
		{"empty kind", converge.NewMemStore(), "", "a", controller.ErrObjectInvalid},
		{"kind with a slash", converge.NewMemStore(), "vm/x", "a", controller.ErrObjectInvalid},
		{"nil store", nil, "vm", "a", controller.ErrObjectInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := controller.Release(ctx, tc.store, tc.kind, tc.key, "alice")
			require.ErrorIs(t, err, tc.want)
			var oe *controller.ObjectError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, tc.key, oe.Key)
		})
	}
	t.Run("store error", func(t *testing.T) {
		store := (&convergetest.Store{}).FailNext(convergetest.OpGet, 1, nil)
		err := controller.Release(ctx, store, "vm", "a", "alice")
		require.ErrorIs(t, err, convergetest.ErrInjected)
	})
}
