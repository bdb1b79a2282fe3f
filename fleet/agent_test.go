package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/fleet"
)

// simDevice is a simulated device: its items are its real system, kept
// across passes and restarts of its agent.
type simDevice struct {
	id    string
	mu    sync.Mutex
	items map[converge.ID]*convergetest.Item
	fail  bool // every Apply fails
	// failFirst fails the first Apply of each item once.
	failFirst bool
}

type payload struct {
	Version string `json:"version"`
}

func (d *simDevice) build(_ context.Context, t fleet.Target) ([]converge.TargetStage, error) {
	var p payload
	if err := json.Unmarshal(t.Payload, &p); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.items == nil {
		d.items = map[converge.ID]*convergetest.Item{}
	}
	g := converge.NewGraph()
	for _, di := range t.Desired.Items {
		it, ok := d.items[di.ID]
		if !ok {
			it = &convergetest.Item{Key: di.ID}
			switch {
			case d.fail:
				it.FailAt(converge.PhaseApply, 1<<20, errors.New("disk full"))
			case d.failFirst:
				it.FailAt(converge.PhaseApply, 1, errors.New("busy"))
			}
			d.items[di.ID] = it
		}
		it.Goal = p.Version
		g.Add(it.Node(), di.Presence)
	}
	return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
}

func (d *simDevice) value(id converge.ID) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if it, ok := d.items[id]; ok {
		return it.Current()
	}
	return ""
}

// runningAgent is an agent and its reconciler, running until stop.
type runningAgent struct {
	agent *fleet.Agent
	rec   *converge.TargetReconciler[fleet.Target]
	stop  func()
}

func startAgent(t *testing.T, d *simDevice, server, token string, store converge.Store) *runningAgent {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	rec, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[fleet.Target]{
		Name: "fleet", Build: d.build, Store: store,
		Backoff: converge.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond},
		Walk:    converge.WalkerConfig{Logger: logger},
	})
	require.NoError(t, err)
	ag, err := fleet.NewAgent(fleet.AgentConfig{
		Server: server, Device: d.id, Token: token, Reconciler: rec,
		Wait: 2 * time.Second, Backoff: converge.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: 0.5},
		Logger: logger,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = rec.Run(ctx) }()
	go func() { defer wg.Done(); _ = ag.Run(ctx) }()
	ra := &runningAgent{agent: ag, rec: rec}
	var once sync.Once
	ra.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(ra.stop)
	return ra
}

var twoItems = []converge.DesiredItem{{ID: "app", Presence: converge.Present}, {ID: "db", Presence: converge.Present}}

func setAll(t *testing.T, s *fleet.Server, ids []string, version string) map[string]uint64 {
	t.Helper()
	revs := map[string]uint64{}
	for _, id := range ids {
		rev, err := s.SetTarget(context.Background(), id, fleet.Target{Desired: converge.Desired{Items: twoItems}, Payload: json.RawMessage(`{"version":"` + version + `"}`)})
		require.NoError(t, err)
		revs[id] = rev
	}
	return revs
}

// waitState waits until every device is in state want at its revision.
func waitState(t *testing.T, s *fleet.Server, revs map[string]uint64, want func(id string) fleet.State) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for id, rev := range revs {
			st, err := s.DeviceStatus(context.Background(), id)
			require.NoError(c, err)
			assert.Equal(c, want(id), st.State, id)
			assert.Equal(c, rev, st.Reported, id)
		}
	}, 20*time.Second, 10*time.Millisecond)
}

func TestAgentsConvergeThroughTwoReplicas(t *testing.T) {
	store := converge.NewMemStore()
	logger := slog.New(slog.DiscardHandler)
	var replicas []*fleet.Server
	var urls []string
	for range 2 {
		s, err := fleet.NewServer(fleet.Config{Store: store, Logger: logger, Rate: -1})
		require.NoError(t, err)
		hs := httptest.NewServer(s)
		t.Cleanup(func() { hs.Close(); _ = s.Close() })
		replicas = append(replicas, s)
		urls = append(urls, hs.URL)
	}
	ids := []string{"dev-0", "dev-1", "dev-2", "dev-bad"}
	devices := map[string]*simDevice{}
	for i, id := range ids {
		tok, err := replicas[0].Enrol(context.Background(), id, nil)
		require.NoError(t, err)
		devices[id] = &simDevice{id: id, fail: id == "dev-bad"}
		startAgent(t, devices[id], urls[i%2], tok, converge.NewMemStore())
	}
	want := func(id string) fleet.State {
		if id == "dev-bad" {
			return fleet.StateFailed
		}
		return fleet.StateReady
	}

	for _, version := range []string{"v1", "v2"} {
		revs := setAll(t, replicas[0], ids, version)
		waitState(t, replicas[1], revs, want)
		for _, id := range ids[:3] {
			assert.Equal(t, version, devices[id].value("app"), id)
			assert.Equal(t, version, devices[id].value("db"), id)
		}
	}
	c, err := replicas[1].Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []fleet.RevisionCount{
		{Revision: 2, State: fleet.StateFailed, Devices: 1},
		{Revision: 2, State: fleet.StateReady, Devices: 3},
	}, c.Revisions)
}

// flaky answers 503 to the requests that drop says to drop.
type flaky struct {
	next    http.Handler
	down    atomic.Bool
	refused atomic.Int32
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.down.Load() {
		f.refused.Add(1)
		http.Error(w, "away", http.StatusServiceUnavailable)
		return
	}
	f.next.ServeHTTP(w, r)
}

func TestAgentResumesAndRetriesWhileServerAway(t *testing.T) {
	ctx := context.Background()
	s, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Logger: slog.New(slog.DiscardHandler), Rate: -1})
	require.NoError(t, err)
	fl := &flaky{next: s}
	hs := httptest.NewServer(fl)
	t.Cleanup(func() { hs.Close(); _ = s.Close() })
	tok, err := s.Enrol(ctx, "d", nil)
	require.NoError(t, err)
	dev := &simDevice{id: "d"}
	path := filepath.Join(t.TempDir(), "device.db")
	devStore, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)

	a := startAgent(t, dev, hs.URL, tok, devStore)
	revs := setAll(t, s, []string{"d"}, "v1")
	waitState(t, s, revs, func(string) fleet.State { return fleet.StateReady })
	localRev := a.rec.Revision()

	// The server goes away; a new target set meanwhile reaches the device
	// once it is back, and the device keeps its last target meanwhile.
	fl.down.Store(true)
	require.Eventually(t, func() bool { return fl.refused.Load() > 0 }, 10*time.Second, 5*time.Millisecond)
	revs = setAll(t, s, []string{"d"}, "v2")
	assert.Equal(t, "v1", dev.value("app"), "offline, the device keeps its stored target")
	fl.down.Store(false)
	waitState(t, s, revs, func(string) fleet.State { return fleet.StateReady })
	assert.Equal(t, "v2", dev.value("app"))
	assert.Greater(t, a.rec.Revision(), localRev, "the device's own revision grew with the server's")
	localRev = a.rec.Revision()

	// The agent restarts from its store: it resumes the target and the
	// server revision (its ETag), so it does not take the same target again.
	a.stop()
	require.NoError(t, devStore.Close())
	devStore, err = boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = devStore.Close() })
	a = startAgent(t, dev, hs.URL, tok, devStore)
	require.Eventually(t, func() bool { _, ok := a.rec.Target(); return ok }, 10*time.Second, 5*time.Millisecond)
	tgt, _ := a.rec.Target()
	assert.Equal(t, revs["d"], tgt.Desired.Revision, "the server's revision survives the restart")
	assert.Equal(t, localRev, a.rec.Revision(), "the same target is not set again")
	revs = setAll(t, s, []string{"d"}, "v3")
	waitState(t, s, revs, func(string) fleet.State { return fleet.StateReady })
	assert.Equal(t, "v3", dev.value("db"))
}

func TestPassReport(t *testing.T) {
	desired := converge.Desired{Revision: 4, Items: []converge.DesiredItem{
		{ID: "a", Presence: converge.Present}, {ID: "b", Presence: converge.Absent},
		{ID: "c", Presence: converge.Present}, {ID: "d", Presence: converge.Absent},
	}}
	stageErr := &converge.TargetStageError{Stage: "s", Err: errors.Join(
		&converge.ItemError{ID: "a", Phase: converge.PhaseApply, Err: errors.New("x")},
		&converge.ItemError{ID: "b", Phase: converge.PhaseCheck, Err: errors.New("y")},
	)}
	tests := []struct {
		name string
		ev   converge.TargetEvent
		want []converge.EdgeState
	}{
		{"finished", converge.TargetEvent{Kind: converge.TargetPassFinished},
			[]converge.EdgeState{converge.EdgePresent, converge.EdgeAbsent, converge.EdgePresent, converge.EdgeAbsent}},
		{"failed", converge.TargetEvent{Kind: converge.TargetPassFailed, Err: stageErr},
			[]converge.EdgeState{converge.EdgeCreatingFailed, converge.EdgeCheckAbsentFailed, converge.EdgeNotRun, converge.EdgeNotRun}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := fleet.PassReport(desired, tt.ev)
			require.NoError(t, rep.Validate())
			assert.Equal(t, uint64(4), rep.Revision)
			var got []converge.EdgeState
			for _, it := range rep.Items {
				got = append(got, it.State)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestNewAgentConfig(t *testing.T) {
	rec, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[fleet.Target]{Build: (&simDevice{}).build})
	require.NoError(t, err)
	ok := fleet.AgentConfig{Server: "http://x", Device: "d", Token: "t", Reconciler: rec}
	tests := []struct {
		name  string
		mod   func(*fleet.AgentConfig)
		field string
	}{
		{"server", func(c *fleet.AgentConfig) { c.Server = "ftp://x" }, "Server"},
		{"device", func(c *fleet.AgentConfig) { c.Device = "a/b" }, "Device"},
		{"token", func(c *fleet.AgentConfig) { c.Token = "" }, "Token"},
		{"reconciler", func(c *fleet.AgentConfig) { c.Reconciler = nil }, "Reconciler"},
		{"wait", func(c *fleet.AgentConfig) { c.Wait = -1 }, "Wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.mod(&cfg)
			_, err := fleet.NewAgent(cfg)
			var ce *converge.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.True(t, strings.HasPrefix(ce.Field, tt.field))
		})
	}
	_, err = fleet.NewAgent(ok)
	assert.NoError(t, err)
}

// reportGate refuses report requests while shut, counting the requests on
// either side.
type reportGate struct {
	next             http.Handler
	shut             atomic.Bool
	refused, reports atomic.Int32
	first            atomic.Pointer[[]byte] // the first report let through
}

func (g *reportGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/report") {
		if g.shut.Load() {
			g.refused.Add(1)
			http.Error(w, "away", http.StatusBadGateway)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read", http.StatusBadRequest)
			return
		}
		g.first.CompareAndSwap(nil, &body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		g.reports.Add(1)
	}
	g.next.ServeHTTP(w, r)
}

func TestAgentSendsOnlyTheLatestReport(t *testing.T) {
	ctx := context.Background()
	s, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Logger: slog.New(slog.DiscardHandler), Rate: -1})
	require.NoError(t, err)
	gate := &reportGate{next: s}
	hs := httptest.NewServer(gate)
	t.Cleanup(func() { hs.Close(); _ = s.Close() })
	tok, err := s.Enrol(ctx, "d", nil)
	require.NoError(t, err)
	// The first pass fails, the next ones converge: the report sent must
	// be the last pass's.
	dev := &simDevice{id: "d", failFirst: true}
	gate.shut.Store(true)
	a := startAgent(t, dev, hs.URL, tok, converge.NewMemStore())
	passes := make(chan struct{}, 16)
	unsub := a.rec.Subscribe(func(e converge.TargetEvent) {
		if e.Kind == converge.TargetPassFinished {
			passes <- struct{}{}
		}
	})
	defer unsub()
	revs := setAll(t, s, []string{"d"}, "v1")
	<-passes
	for range 3 { // three more passes, whose reports wait
		a.rec.Trigger()
		<-passes
	}
	require.Eventually(t, func() bool { return gate.refused.Load() > 0 }, 10*time.Second, 5*time.Millisecond)
	gate.shut.Store(false)
	waitState(t, s, revs, func(string) fleet.State { return fleet.StateReady })
	// The passes held back were coalesced: the first report let through is
	// the last pass's, which converged, never the failed first pass's. (A
	// repair pass after it may report again, so the count is not fixed.)
	first := gate.first.Load()
	require.NotNil(t, first)
	rep, err := converge.DecodeEdgeReport(*first, converge.DecodeLimits{})
	require.NoError(t, err)
	for _, it := range rep.Items {
		assert.Empty(t, it.Message, "item %s: the failed pass's report was sent", it.ID)
	}
}

// fixedTarget serves one target document whatever the If-None-Match, as a
// server that lost its newest targets would, and counts the reads.
type fixedTarget struct {
	mu    sync.Mutex
	doc   []byte
	reads atomic.Int32
}

func (f *fixedTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	f.reads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	_, _ = w.Write(f.doc)
}

func (f *fixedTarget) set(rev uint64, version string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.doc = []byte(`{"format":1,"desired":{"revision":` + strconv.FormatUint(rev, 10) + `,"items":[{"id":"app","presence":"present"}]},"payload":{"version":"` + version + `"},"set":"2026-01-01T00:00:00Z"}`)
}

func TestAgentNeverTakesAnOlderRevision(t *testing.T) {
	f := &fixedTarget{}
	f.set(2, "v2")
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	dev := &simDevice{id: "d"}
	a := startAgent(t, dev, hs.URL, "d.token", converge.NewMemStore())
	require.Eventually(t, func() bool { return dev.value("app") == "v2" }, 10*time.Second, 5*time.Millisecond)
	local := a.rec.Revision()
	f.set(1, "v1")
	n := f.reads.Load()
	require.Eventually(t, func() bool { return f.reads.Load() > n+3 }, 10*time.Second, 5*time.Millisecond)
	tgt, _ := a.rec.Target()
	assert.Equal(t, uint64(2), tgt.Desired.Revision, "revision 1 after 2 is never taken")
	assert.Equal(t, local, a.rec.Revision())
	assert.Equal(t, "v2", dev.value("app"))
}
