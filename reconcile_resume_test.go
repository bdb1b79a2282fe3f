package converge_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// revisionsOf returns the revisions the pass events of ev carry, in order.
func revisionsOf(ev *events, k converge.TargetEventKind) []uint64 {
	var out []uint64
	for _, e := range ev.of(k) {
		out = append(out, e.Revision)
	}
	return out
}

func TestReconcileLoadReadsTheStoredTargetBeforeRun(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	d := newDevice()
	r1, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
	require.NoError(t, r1.SetTarget(ctx, spec{Host: "on", App: "v1"}))
	require.NoError(t, r1.SetTarget(ctx, spec{Host: "on", App: "v2"}))
	require.Equal(t, uint64(2), r1.Revision())

	// A restarted process: nothing is read until Load.
	r2, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
	_, ok := r2.Target()
	assert.False(t, ok)
	assert.Zero(t, r2.Revision())
	found, err := r2.Load(ctx)
	require.NoError(t, err)
	assert.True(t, found)
	got, ok := r2.Target()
	require.True(t, ok)
	assert.Equal(t, spec{Host: "on", App: "v2"}, got)
	assert.Equal(t, uint64(2), r2.Revision(), "the stored revision, not a new count")

	// Another name has nothing stored.
	r3, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "other", Build: d.build, Store: store})
	found, err = r3.Load(ctx)
	require.NoError(t, err)
	assert.False(t, found)
	_, ok = r3.Target()
	assert.False(t, ok)
}

func TestReconcileLoadErrors(t *testing.T) {
	ctx := context.Background()
	d := newDevice()
	store := (&convergetest.Store{}).FailNext(convergetest.OpTarget, 1, nil)
	r, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
	_, err := r.Load(ctx)
	require.ErrorIs(t, err, convergetest.ErrInjected)

	_, err = store.PutTarget(ctx, "edge", []byte(`{"host":7}`))
	require.NoError(t, err)
	found, err := r.Load(ctx)
	require.Error(t, err, "a stored target of the wrong shape")
	assert.Contains(t, err.Error(), `target "edge": decode`)
	assert.False(t, found)
	_, ok := r.Target()
	assert.False(t, ok, "a target that does not decode is not set")
}

func TestReconcileLoadOrSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		d := newDevice()

		// First boot: nothing stored, the default is set and stored.
		r1, ev1 := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
		found, err := r1.LoadOrSet(ctx, spec{Host: "on", App: "default"})
		require.NoError(t, err)
		assert.False(t, found)
		assert.Equal(t, uint64(1), r1.Revision())
		stop := runReconciler(t, r1)
		synctest.Wait()
		require.NoError(t, r1.SetTarget(ctx, spec{Host: "on", App: "v2"}))
		synctest.Wait()
		require.NoError(t, stop())
		assert.Equal(t, []uint64{1, 2}, revisionsOf(ev1, converge.TargetPassFinished))

		// Second boot: the stored target wins over the default.
		r2, ev2 := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
		found, err = r2.LoadOrSet(ctx, spec{Host: "on", App: "default"})
		require.NoError(t, err)
		assert.True(t, found)
		got, _ := r2.Target()
		assert.Equal(t, spec{Host: "on", App: "v2"}, got)
		stop = runReconciler(t, r2)
		synctest.Wait()
		require.NoError(t, stop())
		assert.Equal(t, []uint64{2}, revisionsOf(ev2, converge.TargetPassFinished))
		v, _ := d.app.get()
		assert.Equal(t, "v2", v)
	})
}

// TestReconcileRevisionsGrowAcrossRestarts checks that a restarted process
// numbers its targets after every revision an earlier one used, the
// intermediate targets' included, so that a revision never names two
// targets.
func TestReconcileRevisionsGrowAcrossRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		d := newDevice()
		names := map[uint64]string{} // revision -> the target it names
		name := func(rev uint64, what string) {
			t.Helper()
			if prev, ok := names[rev]; ok && prev != what {
				t.Errorf("revision %d names %s and %s", rev, prev, what)
			}
			names[rev] = what
		}
		for boot := range 3 {
			r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
			_, err := r.LoadOrSet(ctx, spec{Host: "on", App: "v0"})
			require.NoError(t, err)
			tg, _ := r.Target()
			name(r.Revision(), tg.App)
			stop := runReconciler(t, r)
			synctest.Wait()
			require.NoError(t, r.ApplyIntermediate(ctx, spec{}))
			synctest.Wait()
			app := fmt.Sprintf("v%d", boot+1)
			require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: app}))
			name(r.Revision(), app)
			synctest.Wait()
			require.NoError(t, stop())
			for _, e := range ev.of(converge.TargetPassFinished) {
				if e.Intermediate {
					name(e.Revision, fmt.Sprintf("intermediate of boot %d", boot))
					continue
				}
				_, ok := names[e.Revision]
				assert.True(t, ok, "boot %d: pass of revision %d, which no target has", boot, e.Revision)
			}
		}
		assert.Len(t, names, 1+3*2, "v0, then each boot an intermediate target and a new one, each under a revision of its own")
	})
}

// TestReconcileRevisionsAcrossReplicas runs two reconcilers of one name on
// one store, as two replicas would: the revisions they hand out never
// collide, and Load brings the other's newer target.
func TestReconcileRevisionsAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	d := newDevice()
	a, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "shared", Build: d.build, Store: store})
	b, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "shared", Build: d.build, Store: store})

	var wg sync.WaitGroup
	for _, r := range []*converge.TargetReconciler[spec]{a, b} {
		for i := range 20 {
			wg.Go(func() {
				app := "v" + string(rune('a'+i))
				assert.NoError(t, r.SetTarget(ctx, spec{App: app}))
			})
		}
	}
	wg.Wait()
	_, top, err := store.Target(ctx, "shared")
	require.NoError(t, err)
	assert.Equal(t, uint64(40), top, "40 targets, 40 distinct revisions")
	assert.LessOrEqual(t, a.Revision(), top)
	assert.LessOrEqual(t, b.Revision(), top)

	// Each replica's current target is the newest it set; Load brings the
	// newest of both.
	for _, r := range []*converge.TargetReconciler[spec]{a, b} {
		found, err := r.Load(ctx)
		require.NoError(t, err)
		assert.True(t, found)
		assert.Equal(t, top, r.Revision())
	}
	ta, _ := a.Target()
	tb, _ := b.Target()
	assert.Equal(t, ta, tb)

	// A restarted replica numbers after both.
	require.NoError(t, a.SetTarget(ctx, spec{App: "after"}))
	assert.Equal(t, top+1, a.Revision())
	found, err := b.Load(ctx)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, top+1, b.Revision())
	tb, _ = b.Target()
	assert.Equal(t, spec{App: "after"}, tb)
}

// TestReconcileSetTargetBeforeRun checks what SetTarget before Run means:
// it replaces the stored target, under a revision above the stored one,
// and Run converges it without loading the old one.
func TestReconcileSetTargetBeforeRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		d := newDevice()
		old, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
		for _, app := range []string{"v1", "v2", "v3"} {
			require.NoError(t, old.SetTarget(ctx, spec{Host: "on", App: app}))
		}

		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
		require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: "new"}))
		assert.Equal(t, uint64(4), r.Revision(), "after the stored revision 3")
		stored, rev, err := store.Target(ctx, "edge")
		require.NoError(t, err)
		assert.JSONEq(t, `{"host":"on","app":"new"}`, string(stored), "SetTarget replaced the stored target")
		assert.Equal(t, uint64(4), rev)

		stop := runReconciler(t, r)
		synctest.Wait()
		require.NoError(t, stop())
		got, _ := r.Target()
		assert.Equal(t, spec{Host: "on", App: "new"}, got, "Run did not load the old target")
		assert.Equal(t, []uint64{4}, revisionsOf(ev, converge.TargetPassFinished))
		v, applies := d.app.get()
		assert.Equal(t, "new", v)
		assert.Equal(t, 1, applies, "the old target was never applied")
	})
}

// TestReconcileLoadWhileRunningAdoptsANewerTarget checks that Load during
// Run brings a target another process stored, preempting the pass.
func TestReconcileLoadWhileRunningAdoptsANewerTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		d := newDevice()
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
		require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		synctest.Wait()

		other, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
		require.NoError(t, other.SetTarget(ctx, spec{Host: "on", App: "v2"}))
		found, err := r.Load(ctx)
		require.NoError(t, err)
		assert.True(t, found)
		synctest.Wait()
		v, _ := d.app.get()
		assert.Equal(t, "v2", v)

		// Loading the same target again changes nothing: no new pass.
		found, err = r.Load(ctx)
		require.NoError(t, err)
		assert.True(t, found)
		assert.Equal(t, uint64(2), r.Revision())
		synctest.Wait()
		require.NoError(t, stop())
		assert.Equal(t, []uint64{1, 2}, revisionsOf(ev, converge.TargetPassFinished))
	})
}

func TestReconcileIntermediateRevisionComesFromTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		d := newDevice()
		store := &convergetest.Store{}
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
		require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		synctest.Wait()
		require.NoError(t, r.ApplyIntermediate(ctx, spec{}))
		synctest.Wait()

		store.FailNext(convergetest.OpPutTarget, 1, nil)
		require.ErrorIs(t, r.ApplyIntermediate(ctx, spec{}), convergetest.ErrInjected)
		require.NoError(t, stop())

		var inter []uint64
		for _, e := range ev.of(converge.TargetPassFinished) {
			if e.Intermediate {
				inter = append(inter, e.Revision)
			}
		}
		assert.Equal(t, []uint64{2}, inter)
		_, rev, err := store.Target(ctx, "edge")
		require.NoError(t, err)
		assert.Equal(t, uint64(1), rev, "the intermediate target took a revision without replacing the stored one")
		next, err := store.PutTarget(ctx, "edge", nil)
		require.NoError(t, err)
		assert.Equal(t, uint64(3), next)
	})
}
