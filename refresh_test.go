package converge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// refreshRig is three configuration files and a service that depends on
// them, walked by one Walker with one refresh log.
type refreshRig struct {
	files  []*convergetest.Item
	svc    *convergetest.RefreshItem
	log    converge.RefreshLog
	walker *converge.Walker
	g      *converge.Graph
}

// newRefreshRig makes the rig with the first changed files away from
// their goal.
func newRefreshRig(t *testing.T, changed int) *refreshRig {
	t.Helper()
	r := &refreshRig{log: &converge.MemRefreshLog{}}
	r.g = converge.NewGraph()
	var ids []converge.ID
	for i := range 3 {
		f := &convergetest.Item{Key: converge.ID(fmt.Sprintf("file:%d", i+1)), Goal: "v2", Value: "v2"}
		if i < changed {
			f.Value = "v1"
		}
		r.files = append(r.files, f)
		ids = append(ids, f.Key)
		r.g.Add(f.Node(), converge.Present)
	}
	r.svc = &convergetest.RefreshItem{Item: convergetest.Item{Key: "service:web", Goal: "running", Value: "running"}}
	r.g.Add(r.svc.Node(), converge.Present, ids...)
	var err error
	r.walker, err = converge.NewWalker(converge.WalkerConfig{RefreshLog: r.log})
	require.NoError(t, err)
	return r
}

func (r *refreshRig) walk(t *testing.T, dry bool) (*converge.Report, error) {
	t.Helper()
	if dry {
		return r.walker.ApplyDry(t.Context(), r.g)
	}
	return r.walker.Apply(t.Context(), r.g)
}

func (r *refreshRig) pending(t *testing.T) map[converge.ID][]converge.ID {
	t.Helper()
	p, err := r.log.Pending(t.Context())
	require.NoError(t, err)
	return p
}

// TestRefreshTable is the refresh table: a service restarts exactly once
// after one or more of its configuration files changed, never after a
// walk that changed nothing, and a refresh that was due and did not happen
// is not lost, not even to a SIGKILL.
func TestRefreshTable(t *testing.T) {
	tests := []struct {
		name    string
		changed int  // files away from their goal
		fail    bool // the first file's write fails once
		dry     bool
		// The service in the first walk.
		refreshes int
		outcome   converge.Outcome
		refresh   []converge.ID
		waiting   []converge.ID
		pending   map[converge.ID][]converge.ID // after the first walk
		// After a second walk (Apply, every write succeeding).
		refreshedFor [][]converge.ID
		// run replaces the steps above (a process killed mid-walk).
		run func(t *testing.T)
	}{
		{name: "no change, no refresh", changed: 0, outcome: converge.OutcomeUnchanged,
			pending: map[converge.ID][]converge.ID{}, refreshedFor: [][]converge.ID{}},
		{name: "one file changed, one refresh", changed: 1, refreshes: 1, outcome: converge.OutcomeChanged,
			refresh: []converge.ID{"file:1"}, pending: map[converge.ID][]converge.ID{},
			refreshedFor: [][]converge.ID{{"file:1"}}},
		{name: "three files changed, one refresh", changed: 3, refreshes: 1, outcome: converge.OutcomeChanged,
			refresh: []converge.ID{"file:1", "file:2", "file:3"}, pending: map[converge.ID][]converge.ID{},
			refreshedFor: [][]converge.ID{{"file:1", "file:2", "file:3"}}},
		{name: "a failed write, no refresh, the refresh is pending", changed: 2, fail: true,
			outcome: converge.OutcomeWaiting, waiting: []converge.ID{"file:1"},
			pending:      map[converge.ID][]converge.ID{"service:web": {"file:1", "file:2"}},
			refreshedFor: [][]converge.ID{{"file:1", "file:2"}}},
		{name: "a dry run would refresh and does not", changed: 2, dry: true, outcome: converge.OutcomeWouldChange,
			refresh: []converge.ID{"file:1", "file:2"}, pending: map[converge.ID][]converge.ID{},
			refreshedFor: [][]converge.ID{{"file:1", "file:2"}}},
		{name: "killed between the write and the restart, refreshed on the next run", run: refreshKilledCase},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.run != nil {
				tt.run(t)
				return
			}
			r := newRefreshRig(t, tt.changed)
			if tt.fail {
				r.files[0].FailAt(converge.PhaseApply, 1, nil)
			}
			rep, err := r.walk(t, tt.dry)
			if tt.fail {
				require.ErrorIs(t, err, convergetest.ErrInjected)
			} else {
				require.NoError(t, err)
			}
			res, ok := rep.Item("service:web")
			require.True(t, ok)
			assert.Equal(t, tt.refreshes, r.svc.Refreshes())
			assert.Equal(t, tt.refreshes, r.svc.Calls("Refresh"), "Refresh is called once at most, and never in a dry run")
			assert.Equal(t, tt.outcome, res.Outcome)
			assert.Equal(t, tt.refresh, res.Refresh)
			assert.Equal(t, tt.waiting, res.WaitingFor)
			assert.Equal(t, tt.pending, r.pending(t))
			assert.Zero(t, r.svc.Calls("Apply"), "the service itself never needed work")

			rep, err = r.walk(t, false)
			require.NoError(t, err)
			assert.Equal(t, tt.refreshedFor, r.svc.RefreshedFor(), "after the next walk")
			assert.Empty(t, r.pending(t))
			res, _ = rep.Item("service:web")
			if len(tt.refreshedFor) > tt.refreshes {
				assert.Equal(t, converge.OutcomeChanged, res.Outcome)
				assert.Equal(t, tt.refreshedFor[len(tt.refreshedFor)-1], res.Refresh)
			} else {
				assert.Equal(t, converge.OutcomeUnchanged, res.Outcome)
				assert.Empty(t, res.Refresh)
			}

			// And a walk that changes nothing does not refresh.
			_, err = r.walk(t, false)
			require.NoError(t, err)
			assert.Len(t, r.svc.RefreshedFor(), len(tt.refreshedFor))
		})
	}
}

// TestRefreshFailureStaysPending: a Refresh that fails fails the item in
// PhaseRefresh, stays pending and is retried by the next walk, once.
func TestRefreshFailureStaysPending(t *testing.T) {
	r := newRefreshRig(t, 1)
	r.svc.FailAt(converge.PhaseRefresh, 1, nil)
	rep, err := r.walk(t, false)
	require.ErrorIs(t, err, convergetest.ErrInjected)
	res, _ := rep.Item("service:web")
	assert.Equal(t, converge.OutcomeFailed, res.Outcome)
	assert.Equal(t, converge.PhaseRefresh, res.Phase)
	assert.Equal(t, []converge.ID{"file:1"}, res.Refresh)
	var ie *converge.ItemError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, converge.PhaseRefresh, ie.Phase)
	assert.Contains(t, ie.Error(), `item "service:web": refresh: `)
	assert.Equal(t, map[converge.ID][]converge.ID{"service:web": {"file:1"}}, r.pending(t))
	edge, err := converge.EdgeReportFrom(rep, 1, rep.Started)
	require.NoError(t, err)
	assert.Equal(t, converge.EdgeCreatingFailed, edge.Items[3].State, "a failed refresh is reported as a failed apply")
	assert.Contains(t, rep.Summary(), "service:web (refresh): ")

	rep, err = r.walk(t, false)
	require.NoError(t, err)
	res, _ = rep.Item("service:web")
	assert.Equal(t, converge.OutcomeChanged, res.Outcome)
	assert.Equal(t, []converge.ID{"file:1"}, res.Refresh)
	assert.Equal(t, converge.OutcomeUnchanged, rep.Items[0].Outcome, "the file was written by the first walk")
	assert.Equal(t, [][]converge.ID{{"file:1"}}, r.svc.RefreshedFor())
	assert.Empty(t, r.pending(t))

	_, err = r.walk(t, false)
	require.NoError(t, err)
	assert.Equal(t, 1, r.svc.Refreshes())
}

// TestRefreshAfterItsOwnChange: an item whose own Apply ran is refreshed
// too, once, after it converged; a panic in Refresh fails it in
// PhaseRefresh.
func TestRefreshAfterItsOwnChange(t *testing.T) {
	rec := &convergetest.Recorder{}
	r := newRefreshRig(t, 1)
	r.files[0].Recorder = rec
	r.svc.Recorder = rec
	r.svc.SetCurrent("stopped")
	rep, err := r.walk(t, false)
	require.NoError(t, err)
	res, _ := rep.Item("service:web")
	assert.Equal(t, converge.OutcomeChanged, res.Outcome)
	assert.Equal(t, []converge.ID{"file:1"}, res.Refresh)
	assert.Equal(t, "running", res.After)
	assert.Equal(t, []string{"file:1 apply-start", "file:1 apply-end", "service:web apply-start", "service:web apply-end", "service:web refresh"},
		recordStrings(rec))

	r2 := newRefreshRig(t, 1)
	r2.svc.PanicAt(converge.PhaseRefresh, "restart exploded")
	rep, err = r2.walk(t, false)
	require.ErrorIs(t, err, converge.ErrPanic)
	res, _ = rep.Item("service:web")
	assert.Equal(t, converge.PhaseRefresh, res.Phase)
	assert.Equal(t, map[converge.ID][]converge.ID{"service:web": {"file:1"}}, r2.pending(t))
}

func recordStrings(rec *convergetest.Recorder) []string {
	var out []string
	for _, r := range rec.Records() {
		out = append(out, r.String())
	}
	return out
}

// TestRefreshNeverForAbsentOrClean: an Absent item and the items of a Clean
// are never refreshed, and what was pending for them is dropped once they
// are gone.
func TestRefreshNeverForAbsentOrClean(t *testing.T) {
	tests := []struct {
		name  string
		svc   converge.Presence
		clean bool
	}{
		{"absent in an apply", converge.Absent, false},
		{"present, cleaned", converge.Present, true},
		{"absent, cleaned", converge.Absent, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &converge.MemRefreshLog{}
			require.NoError(t, log.Record(t.Context(), "file:old", []converge.ID{"service:web"}))
			file := &convergetest.Item{Key: "file:1", Goal: "v2", Value: "v1"}
			svc := &convergetest.RefreshItem{Item: convergetest.Item{Key: "service:web", Goal: "running", Value: "running"}}
			g := converge.NewGraph()
			g.Add(file.Node(), converge.Present)
			g.Add(svc.Node(), tt.svc, file.Key)
			w, err := converge.NewWalker(converge.WalkerConfig{RefreshLog: log})
			require.NoError(t, err)
			walk := w.Apply
			if tt.clean {
				walk = w.Clean
			}
			walkDry := w.ApplyDry
			if tt.clean {
				walkDry = w.CleanDry
			}
			dry, err := walkDry(t.Context(), g)
			require.NoError(t, err)
			res, _ := dry.Item("service:web")
			assert.Empty(t, res.Refresh, "a dry run says nothing of a refresh either")
			rep, err := walk(t.Context(), g)
			require.NoError(t, err)
			res, _ = rep.Item("service:web")
			assert.Empty(t, res.Refresh)
			assert.Equal(t, converge.OutcomeChanged, res.Outcome, "removed")
			assert.Zero(t, svc.Calls("Refresh"))
			p, err := log.Pending(t.Context())
			require.NoError(t, err)
			assert.Empty(t, p, "the refresh of an item that is gone is dropped")
		})
	}
}

// TestRefreshOrderingEdgeNeverRefreshes: an item ordered after another
// (Graph.After) is not refreshed when that one changes; only dependencies
// refresh.
func TestRefreshOrderingEdgeNeverRefreshes(t *testing.T) {
	log := &converge.MemRefreshLog{}
	conf := &convergetest.Item{Key: "file:conf", Goal: "v2", Value: "v1"}
	motd := &convergetest.Item{Key: "file:motd", Goal: "v2", Value: "v1"}
	svc := &convergetest.RefreshItem{Item: convergetest.Item{Key: "service:web", Goal: "running", Value: "running"}}
	g := converge.NewGraph()
	g.Add(conf.Node(), converge.Present)
	g.Add(motd.Node(), converge.Present)
	g.Add(svc.Node(), converge.Present, conf.Key)
	g.After(svc.Key, motd.Key)
	w, err := converge.NewWalker(converge.WalkerConfig{RefreshLog: log})
	require.NoError(t, err)

	motd.SetCurrent("v1")
	conf.SetCurrent("v2")
	rep, err := w.Apply(t.Context(), g)
	require.NoError(t, err)
	res, _ := rep.Item(svc.Key)
	assert.Equal(t, converge.OutcomeUnchanged, res.Outcome, "only the ordering edge changed")
	assert.Zero(t, svc.Calls("Refresh"))

	conf.SetCurrent("v1")
	rep, err = w.Apply(t.Context(), g)
	require.NoError(t, err)
	res, _ = rep.Item(svc.Key)
	assert.Equal(t, []converge.ID{"file:conf"}, res.Refresh)
	assert.Equal(t, 1, svc.Refreshes())
}

// depProbe records what DepChanged says of each of its dependencies when
// its goal is computed.
type depProbe struct {
	convergetest.Item
	ask  []converge.ID
	mu   sync.Mutex
	seen map[converge.ID]bool
}

func (p *depProbe) StateGoal(ctx context.Context, deps converge.DepStates) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = map[converge.ID]bool{}
	for _, id := range p.ask {
		p.seen[id] = converge.DepChanged(deps, id)
	}
	return p.Item.StateGoal(ctx, deps)
}

// fixedDeps is a DepStates that no walk made.
type fixedDeps map[converge.ID]any

func (d fixedDeps) State(id converge.ID) (any, bool) { v, ok := d[id]; return v, ok }

func TestDepChanged(t *testing.T) {
	tests := []struct {
		name string
		dry  bool
		want map[converge.ID]bool
	}{
		{"apply", false, map[converge.ID]bool{"changed": true, "unchanged": false, "after": false, "refreshed": false, "unknown": false}},
		{"dry run", true, map[converge.ID]bool{"changed": true, "unchanged": false, "after": false, "refreshed": false, "unknown": false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed := &convergetest.Item{Key: "changed", Goal: "v2", Value: "v1"}
			unchanged := &convergetest.Item{Key: "unchanged", Goal: "v2", Value: "v2"}
			after := &convergetest.Item{Key: "after", Goal: "v2", Value: "v1"}
			// refreshed is only refreshed: its own Apply does not run.
			refreshed := &convergetest.RefreshItem{Item: convergetest.Item{Key: "refreshed", Goal: "up", Value: "up"}}
			probe := &depProbe{Item: convergetest.Item{Key: "probe", Goal: "x", Value: "x"},
				ask: []converge.ID{"changed", "unchanged", "after", "refreshed", "unknown"}}
			g := converge.NewGraph()
			g.Add(changed.Node(), converge.Present)
			g.Add(unchanged.Node(), converge.Present)
			g.Add(after.Node(), converge.Present)
			g.Add(refreshed.Node(), converge.Present, "changed")
			g.Add(converge.Wrap[string](probe), converge.Present, "changed", "unchanged", "refreshed")
			g.After("probe", "after")
			w, err := converge.NewWalker(converge.WalkerConfig{})
			require.NoError(t, err)
			walk := w.Apply
			if tt.dry {
				walk = w.ApplyDry
			}
			rep, err := walk(t.Context(), g)
			require.NoError(t, err)
			res, _ := rep.Item("refreshed")
			assert.NotEmpty(t, res.Refresh)
			probe.mu.Lock()
			assert.Equal(t, tt.want, probe.seen)
			probe.mu.Unlock()
		})
	}
	t.Run("a DepStates the walk did not make", func(t *testing.T) {
		assert.False(t, converge.DepChanged(nil, "a"))
		assert.False(t, converge.DepChanged(fixedDeps{"a": "v"}, "a"))
	})
	t.Run("the absent dependencies of an absent item", func(t *testing.T) {
		dep := &convergetest.Item{Key: "dep", Value: "v"}
		seen := false
		obs := &depChangedAtCurrent{Item: convergetest.Item{Key: "obs", Value: "x"}, dep: "dep", seen: &seen}
		g := converge.NewGraph()
		g.Add(dep.Node(), converge.Absent)
		g.Add(converge.Wrap[string](obs), converge.Absent, "dep")
		w, err := converge.NewWalker(converge.WalkerConfig{})
		require.NoError(t, err)
		_, err = w.Apply(t.Context(), g)
		require.NoError(t, err)
		assert.False(t, seen, "an Absent dependency of an Absent item is removed after it: not finished")
		assert.Equal(t, "", dep.Current())
	})
}

// depChangedAtCurrent asks DepChanged from StateCurrent.
type depChangedAtCurrent struct {
	convergetest.Item
	dep  converge.ID
	seen *bool
}

func (d *depChangedAtCurrent) StateCurrent(ctx context.Context, deps converge.DepStates) (string, error) {
	if converge.DepChanged(deps, d.dep) {
		*d.seen = true
	}
	return d.Item.StateCurrent(ctx, deps)
}

// countingLog is a RefreshLog that counts its calls and fails when told.
type countingLog struct {
	converge.MemRefreshLog
	mu                    sync.Mutex
	records, pendings     int
	dones                 int
	failRecord, failRead  error
	failDone              error
	recordedBeforeApplyOf map[converge.ID]bool
}

func (l *countingLog) Record(ctx context.Context, dep converge.ID, items []converge.ID) error {
	l.mu.Lock()
	l.records++
	err := l.failRecord
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.MemRefreshLog.Record(ctx, dep, items)
}

func (l *countingLog) Pending(ctx context.Context) (map[converge.ID][]converge.ID, error) {
	l.mu.Lock()
	l.pendings++
	err := l.failRead
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return l.MemRefreshLog.Pending(ctx)
}

func (l *countingLog) Done(ctx context.Context, item converge.ID, deps []converge.ID) error {
	l.mu.Lock()
	l.dones++
	err := l.failDone
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.MemRefreshLog.Done(ctx, item, deps)
}

func (l *countingLog) calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records + l.pendings + l.dones
}

// TestRefreshLogUnusedWithoutRefreshers: walks of a graph without a
// Refresher never touch the log, whatever changes.
func TestRefreshLogUnusedWithoutRefreshers(t *testing.T) {
	log := &countingLog{}
	a := &convergetest.Item{Key: "a", Goal: "v2", Value: "v1"}
	b := &convergetest.Item{Key: "b", Goal: "v2", Value: "v1"}
	g := converge.NewGraph()
	g.Add(a.Node(), converge.Present)
	g.Add(b.Node(), converge.Present, "a")
	w, err := converge.NewWalker(converge.WalkerConfig{RefreshLog: log})
	require.NoError(t, err)
	for _, walk := range []func(context.Context, *converge.Graph) (*converge.Report, error){w.ApplyDry, w.Apply, w.CleanDry, w.Clean} {
		rep, err := walk(t.Context(), g)
		require.NoError(t, err)
		for _, it := range rep.Items {
			assert.Empty(t, it.Refresh)
		}
	}
	assert.Zero(t, log.calls())
}

// TestRefreshLogFailures: a failure to record fails the dependency before
// it writes; a failure to read what is pending fails the Refreshers in
// PhaseRefresh; a failure to mark a refresh done fails the item, which is
// refreshed again by the next walk.
func TestRefreshLogFailures(t *testing.T) {
	boom := errors.New("disk full")
	t.Run("record", func(t *testing.T) {
		log := &countingLog{failRecord: boom}
		r := newRefreshRig(t, 1)
		r.log = log
		var err error
		r.walker, err = converge.NewWalker(converge.WalkerConfig{RefreshLog: log})
		require.NoError(t, err)
		rep, err := r.walk(t, false)
		require.ErrorIs(t, err, boom)
		require.ErrorIs(t, err, converge.ErrRefreshLog)
		var le *converge.RefreshLogError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, "record", le.Op)
		assert.Equal(t, converge.PhaseApply, rep.Items[0].Phase)
		assert.Zero(t, r.files[0].Calls("Apply"), "no write without recording")
		assert.Equal(t, "v1", r.files[0].Current())
		assert.Equal(t, converge.OutcomeWaiting, rep.Items[3].Outcome)
		dry, err := r.walk(t, true)
		require.NoError(t, err, "a dry run records nothing")
		assert.Equal(t, []converge.ID{"file:1"}, dry.Items[3].Refresh)
	})
	t.Run("pending", func(t *testing.T) {
		log := &countingLog{failRead: boom}
		r := newRefreshRig(t, 0)
		var err error
		r.walker, err = converge.NewWalker(converge.WalkerConfig{RefreshLog: log})
		require.NoError(t, err)
		for _, dry := range []bool{false, true} {
			rep, err := r.walk(t, dry)
			require.ErrorIs(t, err, converge.ErrRefreshLog)
			require.ErrorIs(t, err, boom)
			assert.Equal(t, converge.PhaseRefresh, rep.Items[3].Phase)
			assert.Equal(t, converge.OutcomeUnchanged, rep.Items[0].Outcome, "the files are not held back")
		}
		assert.Zero(t, r.svc.Calls("Refresh"))
	})
	t.Run("done", func(t *testing.T) {
		log := &countingLog{failDone: boom}
		r := newRefreshRig(t, 1)
		r.log = log
		var err error
		r.walker, err = converge.NewWalker(converge.WalkerConfig{RefreshLog: log})
		require.NoError(t, err)
		rep, err := r.walk(t, false)
		require.ErrorIs(t, err, converge.ErrRefreshLog)
		assert.Equal(t, converge.PhaseRefresh, rep.Items[3].Phase)
		assert.Equal(t, 1, r.svc.Refreshes())
		log.mu.Lock()
		log.failDone = nil
		log.mu.Unlock()
		_, err = r.walk(t, false)
		require.NoError(t, err)
		assert.Equal(t, 2, r.svc.Refreshes(), "refreshed again: at least once")
		assert.Empty(t, r.pending(t))
	})
}

// TestStoreRefreshLog checks the Store-backed log: one record, changes by
// version, concurrent writers that lose nothing, a damaged record named.
func TestStoreRefreshLog(t *testing.T) {
	ctx := t.Context()
	store := converge.NewMemStore()
	log := converge.NewStoreRefreshLog(store, "refresh/edge")
	p, err := log.Pending(ctx)
	require.NoError(t, err)
	assert.Empty(t, p)
	_, err = store.Get(ctx, "refresh/edge")
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "nothing is written before something is due")

	require.NoError(t, log.Record(ctx, "file:b", []converge.ID{"service:web", "service:db"}))
	require.NoError(t, log.Record(ctx, "file:a", []converge.ID{"service:web"}))
	rec, err := store.Get(ctx, "refresh/edge")
	require.NoError(t, err)
	assert.JSONEq(t, `{"format":1,"due":{"service:db":["file:b"],"service:web":["file:a","file:b"]}}`, string(rec.Value))
	require.NoError(t, log.Record(ctx, "file:a", []converge.ID{"service:web"}))
	again, err := store.Get(ctx, "refresh/edge")
	require.NoError(t, err)
	assert.Equal(t, rec.Version, again.Version, "a Record that changes nothing writes nothing")

	require.NoError(t, log.Done(ctx, "service:web", []converge.ID{"file:a"}))
	require.NoError(t, log.Done(ctx, "service:none", []converge.ID{"file:a"}))
	p, err = log.Pending(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[converge.ID][]converge.ID{"service:db": {"file:b"}, "service:web": {"file:b"}}, p)

	// Two processes' logs on one store: nothing is lost to a race.
	other := converge.NewStoreRefreshLog(store, "refresh/edge")
	var wg sync.WaitGroup
	for i := range 20 {
		l := log
		if i%2 == 1 {
			l = other
		}
		wg.Go(func() {
			assert.NoError(t, l.Record(ctx, converge.ID(fmt.Sprintf("file:%02d", i)), []converge.ID{"service:many"}))
		})
	}
	wg.Wait()
	p, err = other.Pending(ctx)
	require.NoError(t, err)
	assert.Len(t, p["service:many"], 20)

	for _, bad := range []string{`{"format":2}`, `{"due":{}}`, `{"format":1,"extra":true}`, `{"format":1,"due":{"a":[]}}`, `[]`} {
		t.Run(bad, func(t *testing.T) {
			s := converge.NewMemStore()
			_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(bad)})
			require.NoError(t, err)
			l := converge.NewStoreRefreshLog(s, "k")
			_, err = l.Pending(ctx)
			require.ErrorIs(t, err, converge.ErrRefreshDamaged)
			assert.Contains(t, err.Error(), `refresh log "k"`)
			require.ErrorIs(t, l.Record(ctx, "a", []converge.ID{"b"}), converge.ErrRefreshDamaged)
		})
	}

	t.Run("a failing store fails the dependency before its write", func(t *testing.T) {
		fs := &convergetest.Store{}
		fs.FailNext(convergetest.OpPut, 1, nil)
		r := newRefreshRig(t, 1)
		var err error
		r.walker, err = converge.NewWalker(converge.WalkerConfig{RefreshLog: converge.NewStoreRefreshLog(fs, "r")})
		require.NoError(t, err)
		rep, err := r.walk(t, false)
		require.ErrorIs(t, err, convergetest.ErrInjected)
		require.ErrorIs(t, err, converge.ErrRefreshLog)
		assert.Zero(t, r.files[0].Calls("Apply"))
		assert.Equal(t, converge.OutcomeWaiting, rep.Items[3].Outcome)
		_, err = r.walk(t, false)
		require.NoError(t, err)
		assert.Equal(t, 1, r.svc.Refreshes())
	})
}

// TestRefreshReconcilerKeepsPendingInItsStore: a TargetReconciler's walks
// keep their refresh log in its Store, under TargetRefreshKey(Name), so
// that a refresh due when the agent stopped happens after it restarts.
func TestRefreshReconcilerKeepsPendingInItsStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		file := &convergetest.Item{Key: "file:web.conf", Value: "v1"}
		svc := &convergetest.RefreshItem{Item: convergetest.Item{Key: "service:web", Goal: "running", Value: "running"}}
		build := func(_ context.Context, s spec) ([]converge.TargetStage, error) {
			file.Goal = s.App
			g := converge.NewGraph()
			g.Add(file.Node(), converge.Present)
			g.Add(svc.Node(), converge.Present, file.Key)
			return []converge.TargetStage{{Name: "host", Graph: g}}, nil
		}
		// The first agent dies after the write and before the restart:
		// what it left is the file written and the record in the store.
		require.NoError(t, converge.NewStoreRefreshLog(store, converge.TargetRefreshKey("edge")).
			Record(ctx, file.Key, []converge.ID{svc.Key}))
		file.SetCurrent("v2")

		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: build, Store: store})
		require.NoError(t, r.SetTarget(ctx, spec{App: "v2"}))
		stop := runReconciler(t, r)
		synctest.Wait()
		require.NoError(t, stop())
		assert.Equal(t, [][]converge.ID{{"file:web.conf"}}, svc.RefreshedFor())
		require.Len(t, ev.of(converge.TargetPassFinished), 1)
		changed := ev.of(converge.TargetStateChanged)
		require.Len(t, changed, 1)
		assert.Equal(t, []converge.ID{"service:web"}, changed[0].Report.IDs(converge.OutcomeChanged))
		rec, err := store.Get(ctx, "converge.refresh/edge")
		require.NoError(t, err, "the log is the documented record")
		assert.JSONEq(t, `{"format":1}`, string(rec.Value))

		// A new target writes the file and restarts once, in one pass.
		r2, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: build, Store: store})
		require.NoError(t, r2.SetTarget(ctx, spec{App: "v3"}))
		stop = runReconciler(t, r2)
		synctest.Wait()
		require.NoError(t, stop())
		assert.Equal(t, "v3", file.Current())
		assert.Equal(t, 2, svc.Refreshes())
	})
}

// TestRefreshInSummaryJSONAndLog: reports, their JSON and the walk's log
// lines say what was refreshed and what would be.
func TestRefreshInSummaryJSONAndLog(t *testing.T) {
	r := newRefreshRig(t, 2)
	dry, err := r.walk(t, true)
	require.NoError(t, err)
	assert.Contains(t, dry.Summary(), "would-change service:web (present; would refresh for file:1, file:2)")
	assert.True(t, dry.Changed())

	var logs strings.Builder
	r.walker, err = converge.NewWalker(converge.WalkerConfig{RefreshLog: r.log,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	require.NoError(t, err)
	rep, err := r.walk(t, false)
	require.NoError(t, err)
	assert.Contains(t, rep.Summary(), "changed      service:web (present; refreshed for file:1, file:2)")
	assert.Contains(t, logs.String(), `item=service:web outcome=changed`)
	assert.Contains(t, logs.String(), `refresh="file:1, file:2"`)

	b, err := json.Marshal(rep.Items[3])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, []any{"file:1", "file:2"}, m["Refresh"])
	b, err = json.Marshal(rep.Items[0])
	require.NoError(t, err)
	assert.NotContains(t, string(b), `"Refresh"`, "left out when empty")
}

// TestRefreshWrapCarriesTheAbility: Wrap makes a RefreshNode of a
// Refresher, with or without Cleaner, and Unwrap gives the item back.
func TestRefreshWrapCarriesTheAbility(t *testing.T) {
	svc := &convergetest.RefreshItem{Item: convergetest.Item{Key: "s"}}
	n := converge.Wrap[string](svc)
	_, refresh := n.(converge.RefreshNode)
	_, clean := n.(converge.CleanNode)
	assert.True(t, refresh)
	assert.True(t, clean)
	back, ok := converge.Unwrap[string](n)
	require.True(t, ok)
	assert.Same(t, svc, back)

	only := converge.Wrap[string](&refreshOnly{key: "r"})
	_, refresh = only.(converge.RefreshNode)
	_, clean = only.(converge.CleanNode)
	assert.True(t, refresh)
	assert.False(t, clean)
	_, ok = converge.Unwrap[string](only)
	assert.True(t, ok)
	got, err := only.(converge.RefreshNode).Refresh(t.Context(), "up", []converge.ID{"a"})
	require.NoError(t, err)
	assert.Equal(t, "up+a", got)
	_, err = only.(converge.RefreshNode).Refresh(t.Context(), 7, nil)
	require.ErrorIs(t, err, converge.ErrStateType)

	_, refresh = converge.Wrap[string](&convergetest.Item{Key: "plain"}).(converge.RefreshNode)
	assert.False(t, refresh, "a plain item is no Refresher")
}

// refreshOnly is a Refresher without StateClean.
type refreshOnly struct{ key converge.ID }

func (r *refreshOnly) ID() converge.ID { return r.key }
func (r *refreshOnly) StateCurrent(context.Context, converge.DepStates) (string, error) {
	return "up", nil
}
func (r *refreshOnly) StateGoal(context.Context, converge.DepStates) (string, error) {
	return "up", nil
}
func (r *refreshOnly) Check(_ context.Context, c, t string) (converge.Decision, error) {
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (r *refreshOnly) Apply(_ context.Context, _, t string) (string, error)    { return t, nil }
func (r *refreshOnly) ApplyDry(_ context.Context, _, t string) (string, error) { return t, nil }
func (r *refreshOnly) Refresh(_ context.Context, c string, changed []converge.ID) (string, error) {
	return c + "+" + string(changed[0]), nil
}

// writeFile writes content to path and syncs it, as a configuration file
// item does.
func writeFile(path, content string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// confFile is a configuration file on disk; its state is its content.
type confFile struct {
	path, content string
	// afterWrite, when set, runs once the content is written, before
	// Apply returns.
	afterWrite func()
}

func (f *confFile) ID() converge.ID { return converge.ID("file:" + filepath.Base(f.path)) }
func (f *confFile) StateCurrent(context.Context, converge.DepStates) (string, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return string(b), err
}
func (f *confFile) StateGoal(context.Context, converge.DepStates) (string, error) {
	return f.content, nil
}
func (f *confFile) Check(_ context.Context, c, t string) (converge.Decision, error) {
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(len(t)), nil
}
func (f *confFile) Apply(_ context.Context, _, t string) (string, error) {
	if err := writeFile(f.path, t); err != nil {
		return "", err
	}
	if f.afterWrite != nil {
		f.afterWrite()
	}
	return t, nil
}
func (f *confFile) ApplyDry(_ context.Context, _, t string) (string, error) { return t, nil }

// benchNoop is a converged item; benchService is one that refreshes.
type benchNoop struct{ id converge.ID }

func (n *benchNoop) ID() converge.ID                                               { return n.id }
func (n *benchNoop) StateCurrent(context.Context, converge.DepStates) (int, error) { return 1, nil }
func (n *benchNoop) StateGoal(context.Context, converge.DepStates) (int, error)    { return 1, nil }
func (n *benchNoop) Check(_ context.Context, c, t int) (converge.Decision, error) {
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (n *benchNoop) Apply(_ context.Context, _, t int) (int, error)    { return t, nil }
func (n *benchNoop) ApplyDry(_ context.Context, _, t int) (int, error) { return t, nil }

type benchService struct{ benchNoop }

func (s *benchService) Refresh(_ context.Context, c int, _ []converge.ID) (int, error) { return c, nil }

// BenchmarkApplyRefresh walks 1,000 converged items, every fourth a
// service depending on the three before it: without Refreshers (the cost
// every graph pays) and with them (one read of the log per walk).
func BenchmarkApplyRefresh(b *testing.B) {
	for _, refreshers := range []bool{false, true} {
		b.Run(fmt.Sprintf("refreshers=%t", refreshers), func(b *testing.B) {
			g := converge.NewGraph()
			for k := range 1000 {
				id := converge.ID(fmt.Sprintf("item-%04d", k))
				if k%4 != 3 {
					g.Add(converge.Wrap[int](&benchNoop{id: id}), converge.Present)
					continue
				}
				deps := []converge.ID{
					converge.ID(fmt.Sprintf("item-%04d", k-3)), converge.ID(fmt.Sprintf("item-%04d", k-2)), converge.ID(fmt.Sprintf("item-%04d", k-1)),
				}
				if refreshers {
					g.Add(converge.Wrap[int](&benchService{benchNoop{id: id}}), converge.Present, deps...)
				} else {
					g.Add(converge.Wrap[int](&benchNoop{id: id}), converge.Present, deps...)
				}
			}
			w, err := converge.NewWalker(converge.WalkerConfig{})
			require.NoError(b, err)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := w.Apply(ctx, g); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
