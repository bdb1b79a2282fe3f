package converge_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/convergetest"
)

// bootClock is an injectable boot ID: the host "reboots" when it changes.
type bootClock struct {
	mu sync.Mutex
	id string
}

func (b *bootClock) set(id string) { b.mu.Lock(); b.id = id; b.mu.Unlock() }
func (b *bootClock) read(context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id, nil
}

// agent is one run of a device agent: a reconciler over the store at path.
type agent struct {
	store *boltstore.Store
	r     *converge.TargetReconciler[spec]
	ev    *events
	done  chan converge.TargetEvent
	m     *convergetest.Metrics
}

// startAgent opens the store at path and builds a reconciler called "edge"
// over it, as an agent does when it starts.
func startAgent(t *testing.T, path string, d *device, boot *bootClock) *agent {
	t.Helper()
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	a := &agent{store: st, done: make(chan converge.TargetEvent, 16), m: &convergetest.Metrics{}}
	cfg := converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: st, BootID: boot.read}
	cfg.Walk.Metrics = a.m
	a.r, a.ev = newReconciler(t, cfg)
	a.r.Subscribe(func(e converge.TargetEvent) {
		if e.Kind == converge.TargetPassFinished || e.Kind == converge.TargetPassFailed {
			a.done <- e
		}
	})
	return a
}

// pass waits for the next pass to end and returns its event.
func (a *agent) pass(t *testing.T) converge.TargetEvent {
	t.Helper()
	select {
	case e := <-a.done:
		return e
	case <-time.After(20 * time.Second):
		require.FailNow(t, "no pass ended")
		return converge.TargetEvent{}
	}
}

// runOnePass runs r until its first pass ends and returns that pass's
// event.
func runOnePass(t *testing.T, r *converge.TargetReconciler[spec]) converge.TargetEvent {
	t.Helper()
	ends := make(chan converge.TargetEvent, 8)
	unsubscribe := r.Subscribe(func(e converge.TargetEvent) {
		if e.Kind == converge.TargetPassFailed || e.Kind == converge.TargetPassFinished {
			ends <- e
		}
	})
	defer unsubscribe()
	stop := runReconciler(t, r)
	var e converge.TargetEvent
	select {
	case e = <-ends:
	case <-time.After(20 * time.Second):
		require.FailNow(t, "no pass ended")
	}
	require.NoError(t, stop())
	return e
}

func (a *agent) stop(t *testing.T, stop func() error) {
	t.Helper()
	require.NoError(t, stop())
	require.NoError(t, a.store.Close())
}

func (a *agent) gauge(action string) float64 {
	return a.m.Value(converge.MetricTargetPendingActions.Name, "edge", action)
}

// TestTargetReconcilerPendingRebootSurvivesRestart is the device agent
// restarted between the pass that asked for a reboot and the reboot: on a
// real boltstore file, a new reconciler over the reopened store with the
// same boot ID still has the reboot pending (also after a newer target
// converged), and once the boot ID differs it is done and removed from the
// store.
func TestTargetReconcilerPendingRebootSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agent.db")
	boot := &bootClock{id: "boot-1"}
	d := newDevice() // the real system: it outlives the agent
	d.app.reboot = true

	// First run: the pass applies the app, which asks for a reboot.
	a1 := startAgent(t, path, d, boot)
	require.NoError(t, a1.r.SetTarget(ctx, spec{Host: "on", App: "v1"}))
	stop := runReconciler(t, a1.r)
	require.Equal(t, converge.TargetPassFinished, a1.pass(t).Kind)
	got := a1.r.PendingActions()
	require.Len(t, got, 1)
	assert.Equal(t, converge.ActionReboot, got[0].Action)
	assert.Equal(t, converge.ID("app"), got[0].ID)
	assert.Equal(t, "new kernel", got[0].Reason)
	assert.Equal(t, uint64(1), got[0].Revision)
	assert.Equal(t, "boot-1", got[0].BootID)
	assert.False(t, got[0].Since.IsZero())
	assert.Equal(t, 1.0, a1.gauge("reboot"))
	assert.Zero(t, a1.gauge("shutdown"))
	a1.stop(t, stop) // the subscribers took their events
	require.Len(t, a1.ev.of(converge.TargetActionRequired), 1, "the event is still emitted")

	// The agent restarts; the host did not reboot.
	d.app.reboot = false
	a2 := startAgent(t, path, d, boot)
	found, err := a2.r.LoadOrSet(ctx, spec{})
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, got, a2.r.PendingActions(), "read back by Load, before any pass")
	stop = runReconciler(t, a2.r)
	require.Equal(t, converge.TargetPassFinished, a2.pass(t).Kind)
	assert.Equal(t, got, a2.r.PendingActions(), "a pass that asks for nothing keeps it")
	// A newer target converges; the reboot the old one asked for is still due.
	require.NoError(t, a2.r.SetTarget(ctx, spec{Host: "on", App: "v2"}))
	require.Equal(t, converge.TargetPassFinished, a2.pass(t).Kind)
	assert.Equal(t, uint64(2), a2.r.Revision())
	assert.Equal(t, got, a2.r.PendingActions(), "a newer target keeps it")
	assert.Equal(t, 1.0, a2.gauge("reboot"))
	a2.stop(t, stop)

	// The host rebooted: a new boot ID.
	boot.set("boot-2")
	a3 := startAgent(t, path, d, boot)
	found, err = a3.r.Load(ctx)
	require.NoError(t, err)
	require.True(t, found)
	assert.Empty(t, a3.r.PendingActions(), "done: the boot ID changed")
	assert.Zero(t, a3.gauge("reboot"))
	_, err = a3.store.Get(ctx, converge.TargetActionsKey("edge"))
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "removed from the store")
	require.NoError(t, a3.store.Close())
}

// TestTargetReconcilerPendingActions covers the other ways an action is
// kept or not: a pass that fails after the item asked, a shutdown, an
// unknown boot ID, and a damaged record.
func TestTargetReconcilerPendingActions(t *testing.T) {
	ctx := context.Background()

	t.Run("failed pass keeps what was asked", func(t *testing.T) {
		boot := &bootClock{id: "boot-1"}
		d := newDevice()
		d.app.reboot = true
		broken := &convergetest.Item{Key: "broken", Goal: "x"}
		broken.FailAt(converge.PhaseApply, -1, nil)
		build := func(ctx context.Context, s spec) ([]converge.TargetStage, error) {
			stages, err := d.build(ctx, s)
			g := converge.NewGraph()
			g.Add(broken.Node(), converge.Present)
			return append(stages, converge.TargetStage{Name: "late", Graph: g}), err
		}
		store := converge.NewMemStore()
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: build, Store: store, BootID: boot.read})
		require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: "v1"}))
		require.Equal(t, converge.TargetPassFailed, runOnePass(t, r).Kind)
		got := r.PendingActions()
		require.Len(t, got, 1)
		assert.Equal(t, converge.ActionReboot, got[0].Action)
		assert.NotEmpty(t, ev.of(converge.TargetPassFailed))
		// A new reconciler over the same store finds it.
		r2, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: build, Store: store, BootID: boot.read})
		_, err := r2.Load(ctx)
		require.NoError(t, err)
		assert.Equal(t, got, r2.PendingActions())
	})

	t.Run("unknown boot ID keeps it until cleared", func(t *testing.T) {
		boot := &bootClock{}
		d := newDevice()
		d.app.reboot = true
		store := converge.NewMemStore()
		r, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store, BootID: boot.read})
		require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: "v1"}))
		require.Equal(t, converge.TargetPassFinished, runOnePass(t, r).Kind)
		require.Len(t, r.PendingActions(), 1)
		assert.Empty(t, r.PendingActions()[0].BootID)

		boot.set("boot-2")
		r2, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store, BootID: boot.read})
		_, err := r2.Load(ctx)
		require.NoError(t, err)
		require.Len(t, r2.PendingActions(), 1, "asked under an unknown boot: never known to be done")
		require.NoError(t, r2.ClearPendingActions(ctx))
		assert.Empty(t, r2.PendingActions())
		_, err = store.Get(ctx, converge.TargetActionsKey("edge"))
		require.ErrorIs(t, err, converge.ErrStoreNotFound)
	})

	t.Run("damaged record fails the pass until cleared", func(t *testing.T) {
		for _, bad := range []string{
			`[1,2]`,
			`{"actions":[]}`,
			`{"format":2}`,
			`{"format":1,"actions":[{"action":"dance","item":"a","since":"2026-01-01T00:00:00Z"}]}`,
			`{"format":1,"actions":[{"action":"reboot","since":"2026-01-01T00:00:00Z"}]}`,
			`{"format":1,"actions":[{"action":"reboot","item":"a","since":"2026-01-01T00:00:00Z","extra":1}]}`,
			`{"format":1,"actions":[{"action":"reboot","item":"a","since":"2026-01-01T00:00:00Z"},{"action":"reboot","item":"a","since":"2026-01-01T00:00:00Z"}]}`,
		} {
			t.Run(bad, func(t *testing.T) {
				store := converge.NewMemStore()
				_, err := store.Put(ctx, converge.StoreRecord{Key: converge.TargetActionsKey("edge"), Value: []byte(bad)})
				require.NoError(t, err)
				d := newDevice()
				r, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store, BootID: (&bootClock{id: "b"}).read})
				_, err = r.Load(ctx)
				require.NoError(t, err, "Load does not fail for it; the pass does")
				require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: "v1"}))
				e := runOnePass(t, r)
				require.Equal(t, converge.TargetPassFailed, e.Kind)
				require.ErrorIs(t, e.Err, converge.ErrActionsDamaged)
				assert.Contains(t, e.Err.Error(), `"converge.actions/edge"`)
				v, _ := d.app.get()
				assert.Empty(t, v, "nothing was applied")
				require.NoError(t, r.ClearPendingActions(ctx))
				_, err = store.Get(ctx, converge.TargetActionsKey("edge"))
				require.ErrorIs(t, err, converge.ErrStoreNotFound)
			})
		}
	})
}
