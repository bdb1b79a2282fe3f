package converge_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// errBadRelease is what a release whose name starts with "bad" fails with.
var errBadRelease = errors.New("release does not start")

// release is the device of the rollback tests: it runs one release at a
// time, and a release named "bad..." (or the one broken names) never
// applies.
type release struct {
	item   convergetest.Item
	mu     sync.Mutex
	broken string
}

func newRelease() *release {
	r := &release{item: convergetest.Item{Key: "release"}}
	r.item.Refuse = func(target string) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if strings.HasPrefix(target, "bad") || target == r.broken {
			return errBadRelease
		}
		return nil
	}
	return r
}

func (r *release) build(_ context.Context, s spec) ([]converge.TargetStage, error) {
	r.item.Goal = s.App
	g := converge.NewGraph()
	g.Add(r.item.Node(), converge.Present)
	return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
}

func (r *release) now() string { return r.item.Current() }

// TestReconcileRollback sets a good target, then a bad one: after
// RollbackAfter failed passes in a row the good one is set again (an
// event, a history entry, RolledBack), which survives a restart, and a
// later good target ends the rollback.
func TestReconcileRollback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		dev := newRelease()
		cfg := converge.TargetReconcilerConfig[spec]{Name: "edge", Build: dev.build, Store: store, RollbackAfter: 3,
			Backoff: converge.Backoff{Base: time.Second, Max: time.Second}}
		r, ev := newReconciler(t, cfg)
		stop := runReconciler(t, r)

		require.NoError(t, r.SetTarget(ctx, spec{App: "v1"}))
		synctest.Wait()
		require.Equal(t, "v1", dev.now())
		_, ok := r.RolledBack()
		assert.False(t, ok)

		require.NoError(t, r.SetTarget(ctx, spec{App: "bad-v2"}))
		time.Sleep(time.Minute) // the backoff's virtual seconds
		synctest.Wait()

		rolled := ev.of(converge.TargetRolledBack)
		require.Len(t, rolled, 1)
		rb := rolled[0].Rollback
		require.NotNil(t, rb)
		assert.Equal(t, converge.TargetRollback{From: 2, To: 1, Revision: 3, Failures: 3, At: rb.At, Err: rb.Err}, *rb)
		assert.Contains(t, rb.Err, errBadRelease.Error())
		assert.Equal(t, uint64(2), rolled[0].Revision, "the event is the failed target's")
		assert.Equal(t, []uint64{2, 2, 2}, revisionsOf(ev, converge.TargetPassFailed), "rolled back after exactly 3 failed passes")
		got, _ := r.Target()
		assert.Equal(t, spec{App: "v1"}, got)
		assert.Equal(t, uint64(3), r.Revision())
		assert.Equal(t, "v1", dev.now(), "the good release runs again")
		inForce, ok := r.RolledBack()
		require.True(t, ok)
		assert.Equal(t, *rb, inForce)
		hist, err := store.History(ctx, converge.TargetRollbackKey("edge"))
		require.NoError(t, err)
		require.Len(t, hist, 1)
		assert.Equal(t, "revision 2", hist[0].From)
		assert.Equal(t, "revision 1", hist[0].To)
		stored, _, err := store.Target(ctx, "edge")
		require.NoError(t, err)
		assert.JSONEq(t, `{"host":"","app":"v1"}`, string(stored), "a restart resumes the good target")
		require.NoError(t, stop())

		// A restarted agent still shows the rollback.
		r2, ev2 := newReconciler(t, cfg)
		found, err := r2.Load(ctx)
		require.NoError(t, err)
		require.True(t, found)
		inForce, ok = r2.RolledBack()
		require.True(t, ok)
		assert.Equal(t, uint64(3), inForce.Revision)
		stop2 := runReconciler(t, r2)

		// A later good target is applied and ends the rollback.
		require.NoError(t, r2.SetTarget(ctx, spec{App: "v3"}))
		synctest.Wait()
		assert.Equal(t, "v3", dev.now())
		_, ok = r2.RolledBack()
		assert.False(t, ok, "a new target clears the rollback")
		assert.Empty(t, ev2.of(converge.TargetRolledBack))
		hist, err = store.History(ctx, converge.TargetRollbackKey("edge"))
		require.NoError(t, err)
		require.Len(t, hist, 2)
		assert.Equal(t, "revision 4", hist[1].To)
		require.NoError(t, stop2())
	})
}

func TestReconcileRollbackLimits(t *testing.T) {
	tests := []struct {
		name    string
		after   int
		targets []string // set one after the other, each given a minute
		want    int      // rollbacks
		running string
	}{
		{name: "off by default", after: 0, targets: []string{"v1", "bad-v2"}, running: "v1"},
		{name: "nothing converged yet", after: 2, targets: []string{"bad-v1"}, running: ""},
		{name: "fewer failures than asked", after: 1000, targets: []string{"v1", "bad-v2"}, running: "v1"},
		{name: "rolled back once", after: 2, targets: []string{"v1", "bad-v2"}, want: 1, running: "v1"},
		{name: "each bad target rolled back", after: 2, targets: []string{"v1", "bad-v2", "bad-v3"}, want: 2, running: "v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				store := converge.NewMemStore()
				dev := newRelease()
				r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: dev.build, Store: store, RollbackAfter: tt.after,
					Backoff: converge.Backoff{Base: time.Second, Max: time.Second}})
				runReconciler(t, r)
				for _, app := range tt.targets {
					require.NoError(t, r.SetTarget(ctx, spec{App: app}))
					time.Sleep(time.Minute)
					synctest.Wait()
				}
				assert.Len(t, ev.of(converge.TargetRolledBack), tt.want)
				assert.Equal(t, tt.running, dev.now())
				_, err := store.Get(ctx, converge.TargetRollbackKey(converge.TargetDefaultName))
				if tt.after == 0 {
					require.ErrorIs(t, err, converge.ErrStoreNotFound, "nothing kept without RollbackAfter")
				}
			})
		})
	}
}

func TestReconcileRollbackAfterValidated(t *testing.T) {
	_, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[spec]{Build: newRelease().build, RollbackAfter: -1})
	var ce *converge.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "RollbackAfter", ce.Field)
}

// TestReconcileRollbackIsNotRolledBackAgain: the target rolled back to
// fails in its turn (the device changed since it converged); it is not
// rolled back again, and keeps being retried.
func TestReconcileRollbackIsNotRolledBackAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dev := newRelease()
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: dev.build, RollbackAfter: 2,
			Backoff: converge.Backoff{Base: time.Second, Max: time.Second}})
		runReconciler(t, r)
		require.NoError(t, r.SetTarget(ctx, spec{App: "v1"}))
		synctest.Wait()
		dev.mu.Lock()
		dev.broken = "v1"
		dev.mu.Unlock()
		dev.item.SetCurrent("v0")
		require.NoError(t, r.SetTarget(ctx, spec{App: "bad-v2"}))
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Len(t, ev.of(converge.TargetRolledBack), 1, "one rollback, not a loop")
		assert.Equal(t, uint64(3), r.Revision())
		failed := revisionsOf(ev, converge.TargetPassFailed)
		assert.Greater(t, len(failed), 4, "the rolled-back target is retried")
		assert.Equal(t, uint64(3), failed[len(failed)-1])
	})
}

// TestReconcileRollbackDamagedRecord: a rollback record that does not
// decode is reported (a Warn line naming it, ErrRollbackDamaged), never
// trusted, and replaced once a target converges, after which rollback
// works again.
func TestReconcileRollbackDamagedRecord(t *testing.T) {
	for _, damaged := range []string{`{"format":99}`, `[1,2]`, `{"format":1,"good":7}`} {
		t.Run(damaged, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				store := converge.NewMemStore()
				_, err := store.Put(ctx, converge.StoreRecord{Key: converge.TargetRollbackKey("edge"), Value: []byte(damaged)})
				require.NoError(t, err)
				var logs strings.Builder
				dev := newRelease()
				r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: dev.build, Store: store, RollbackAfter: 2,
					Backoff: converge.Backoff{Base: time.Second, Max: time.Second},
					Walk:    converge.WalkerConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
				_, err = r.Load(ctx)
				require.NoError(t, err, "a damaged rollback record does not stop the agent")
				if damaged != `{"format":1,"good":7}` { // decodes as a record: its good target fails later
					assert.Contains(t, logs.String(), converge.ErrRollbackDamaged.Error())
					assert.Contains(t, logs.String(), converge.TargetRollbackKey("edge"))
				}
				_, ok := r.RolledBack()
				assert.False(t, ok)
				runReconciler(t, r)
				require.NoError(t, r.SetTarget(ctx, spec{App: "v1"}))
				synctest.Wait()
				require.NoError(t, r.SetTarget(ctx, spec{App: "bad-v2"}))
				time.Sleep(time.Minute)
				synctest.Wait()
				require.Len(t, ev.of(converge.TargetRolledBack), 1)
				assert.Equal(t, "v1", dev.now())
			})
		})
	}
}
