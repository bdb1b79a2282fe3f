package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/fleet"
)

// fleetRolloutSizes are the fleets of BenchmarkFleetRollout and its floor;
// -short runs the first only.
var fleetRolloutSizes = []int{1000, 10_000}

// fleetRolloutLimit bounds the wait of one rollout.
const fleetRolloutLimit = 10 * time.Minute

// readyWatch wraps the handler of a fleet server or a floor and counts
// the devices whose report for revision want the handler accepted (204):
// the simulated devices report a pass only when it converged, so the
// server holds every device ready at want when the count reaches the
// fleet's size. The floor and the server are wrapped alike.
type readyWatch struct {
	h    http.Handler
	mu   sync.Mutex
	want []byte // `"revision":N,` of the revision waited for
	seen []bool // by device index, reported at want
	left int
	done chan struct{}
}

func newReadyWatch(h http.Handler, devices int) *readyWatch {
	return &readyWatch{h: h, seen: make([]bool, devices)}
}

// expect starts waiting for every device's report at revision rev; the
// returned channel is closed when they all came.
func (rw *readyWatch) expect(rev uint64) <-chan struct{} {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.want = []byte(`"revision":` + strconv.FormatUint(rev, 10) + `,`)
	clear(rw.seen)
	rw.left = len(rw.seen)
	rw.done = make(chan struct{})
	return rw.done
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (rw *readyWatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		rw.h.ServeHTTP(w, r)
		return
	}
	var body bytes.Buffer
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(r.Body, &body), r.Body}
	sr := &statusRecorder{ResponseWriter: w}
	rw.h.ServeHTTP(sr, r)
	if sr.code != http.StatusNoContent {
		return
	}
	// The handler's pattern is "/v1/devices/{id}/report".
	i := fleetDeviceIndex(r.PathValue("id"))
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if i < 0 || i >= len(rw.seen) || rw.seen[i] || rw.want == nil || !bytes.Contains(body.Bytes(), rw.want) {
		return
	}
	rw.seen[i] = true
	rw.left--
	if rw.left == 0 {
		close(rw.done)
	}
}

// simDevice is a simulated device: a TargetReconciler whose fleetItems
// in-memory items (convergetest.Item) take the target's payload as their
// value.
type simDevice struct {
	mu    sync.Mutex
	items map[converge.ID]*convergetest.Item
}

func (d *simDevice) build(_ context.Context, t fleet.Target) ([]converge.TargetStage, error) {
	var p struct {
		Version string `json:"version"`
	}
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
			d.items[di.ID] = it
		}
		it.Goal = p.Version
		g.Add(it.Node(), di.Presence)
	}
	return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
}

// startSimAgent runs a simulated device's reconciler and its fleet.Agent
// until ctx ends; wg counts them.
func startSimAgent(ctx context.Context, wg *sync.WaitGroup, base, id, token string, client *http.Client, wait time.Duration, logger *slog.Logger) error {
	d := &simDevice{}
	rec, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[fleet.Target]{
		Name: "fleet", Build: d.build, Store: converge.NewMemStore(),
		Walk: converge.WalkerConfig{Logger: logger},
	})
	if err != nil {
		return err
	}
	ag, err := fleet.NewAgent(fleet.AgentConfig{Server: base, Device: id, Token: token, Reconciler: rec, Client: client, Wait: wait, Logger: logger})
	if err != nil {
		return err
	}
	wg.Add(2)
	go func() { defer wg.Done(); _ = rec.Run(ctx) }()
	go func() { defer wg.Done(); _ = ag.Run(ctx) }()
	return nil
}

// BenchmarkFleetRollout is a rollout without waves: devices simulated
// devices (fleet.Agent on a TargetReconciler of fleetItems in-memory
// items, each on its own MemStore, all in one child process sharing one
// transport, at most fleetChildIdleConns connections idle) long-poll one
// fleet server (a MemStore, its default rate limit and waits) over
// loopback HTTP. Every device is at a first target, ready; then each
// round sets a new target on every device (Server.SetTarget, one device
// after another, as a program or a wave does) and ends when the server
// holds every device ready at it (each device's agent was woken from its
// long poll, read the target, its reconciler converged it, and the
// agent's report was taken). ns/op is the wall time of one round;
// cpu-µs/device the CPU of the server's process and of the devices'
// (server-cpu-µs/device, client-cpu-µs/device) per device. Beside its
// floor, BenchmarkFleetRolloutFloor.
func BenchmarkFleetRollout(b *testing.B) { forFleetSizes(b, fleetRolloutSizes, benchFleetRollout) }

func benchFleetRollout(b *testing.B, n int) {
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	polls := &longPolls{}
	s, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Logger: logger, Metrics: polls})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	rw := newReadyWatch(s, n)
	mux := http.NewServeMux()
	mux.Handle("PUT /v1/devices/{id}/report", rw)
	mux.Handle("/", s)
	base := fleetServe(b, mux)
	ids := make([]string, n)
	tokens := make([]string, n)
	if err := parallel(n, func(i int) error {
		ids[i] = fleetDeviceID(i)
		tok, err := s.Enrol(ctx, ids[i], nil)
		tokens[i] = tok
		return err
	}); err != nil {
		b.Fatal(err)
	}
	setAll := func(v int) (uint64, error) {
		var rev uint64
		for _, id := range ids {
			r, err := s.SetTarget(ctx, id, fleetTarget(v))
			if err != nil {
				return 0, err
			}
			if rev != 0 && r != rev {
				return 0, fmt.Errorf("device %s at revision %d, others at %d", id, r, rev)
			}
			rev = r
		}
		return rev, nil
	}
	// The first target, set before the agents start: they read it at
	// once.
	if _, err := setAll(1); err != nil {
		b.Fatal(err)
	}
	ready := rw.expect(1)
	child := startFleetChild(b, childSpec{Mode: "agents", Base: base, IDs: ids, Tokens: tokens})
	waitReady(b, ready, child)
	// The agents park their long polls.
	waitParked(b, polls.n.Load, int64(n), child)

	var server, devices time.Duration
	b.ResetTimer()
	for round := range b.N {
		server0, devices0 := clientCPU(), child.cpu()
		ready = rw.expect(uint64(round + 2))
		rev, err := setAll(round + 2)
		if err != nil {
			b.Fatal(err)
		}
		if rev != uint64(round+2) {
			b.Fatalf("revision %d, want %d", rev, round+2)
		}
		waitReady(b, ready, child)
		b.StopTimer()
		server += clientCPU() - server0
		devices += child.cpu() - devices0
		checkAllReady(b, s, n, rev)
		waitParked(b, polls.n.Load, int64(n), child)
		b.StartTimer()
	}
	b.StopTimer()
	reportDeviceCPU(b, n, server, devices)
}

// reportDeviceCPU reports the CPU per device of the server and of the
// devices (or the floor's clients), and their sum.
func reportDeviceCPU(b *testing.B, n int, server, devices time.Duration) {
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N*n) }
	b.ReportMetric(per(server+devices), "cpu-µs/device")
	b.ReportMetric(per(server), "server-cpu-µs/device")
	b.ReportMetric(per(devices), "client-cpu-µs/device")
}

// forFleetSizes runs fn(b, n) as a sub-benchmark "devices=n" for each
// fleet size n of sizes; -short runs the first only.
func forFleetSizes(b *testing.B, sizes []int, fn func(b *testing.B, n int)) {
	for i, n := range sizes {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			if i > 0 && testing.Short() {
				b.Skip("the large fleet: not in -short")
			}
			fn(b, n)
		})
	}
}

// waitReady waits for ready, at most fleetRolloutLimit, failing if the
// child process of the clients exits.
func waitReady(b *testing.B, ready <-chan struct{}, child *fleetChild) {
	b.Helper()
	deadline := time.After(fleetRolloutLimit)
	for {
		select {
		case <-ready:
			return
		case <-child.exited:
			b.Fatal("the clients' process exited")
		case <-deadline:
			b.Fatalf("devices not ready after %s", fleetRolloutLimit)
		}
	}
}

// checkAllReady checks that the server counts all n devices ready at rev.
func checkAllReady(b *testing.B, s *fleet.Server, n int, rev uint64) {
	b.Helper()
	c, err := s.Counts(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	want := []fleet.RevisionCount{{Revision: rev, State: fleet.StateReady, Devices: n}}
	if fmt.Sprint(c.Revisions) != fmt.Sprint(want) {
		b.Fatalf("counts %+v, want %+v", c.Revisions, want)
	}
}

// longPolls is the Metrics of a fleet server in the benchmarks: it keeps
// only the gauge of long polls waiting (fleet.MetricLongPolls).
type longPolls struct {
	converge.MetricsNop
	n atomic.Int64
}

func (l *longPolls) Add(m *converge.Metric, delta float64, _ ...string) {
	if m == fleet.MetricLongPolls {
		l.n.Add(int64(delta))
	}
}

// BenchmarkFleetRolloutFloor is the floor of BenchmarkFleetRollout: devices
// clients (goroutines of one child process sharing one transport, as the
// agents do) each park one GET of a target on a bare net/http handler; each round
// releases them all at once (the new target), each client reads a body as
// large as the fleet server's target, then sends one PUT of a report as
// large as an agent's, which the handler writes as one row, in batches
// (floorSink), to a MemStore, answering once it is written; the round
// ends when every report is answered. The same readyWatch counts them.
func BenchmarkFleetRolloutFloor(b *testing.B) {
	forFleetSizes(b, fleetRolloutSizes, benchFleetRolloutFloor)
}

// rolloutFloor is the handler of BenchmarkFleetRolloutFloor.
type rolloutFloor struct {
	sink   *floorSink
	target []byte
	mu     sync.Mutex
	etag   string
	next   chan struct{} // closed when the target changes
	parked atomic.Int64
}

func (f *rolloutFloor) getTarget(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	etag, next := f.etag, f.next
	f.mu.Unlock()
	if r.Header.Get("If-None-Match") == etag {
		f.parked.Add(1)
		select {
		case <-next:
		case <-r.Context().Done():
			f.parked.Add(-1)
			return
		}
		f.parked.Add(-1)
		f.mu.Lock()
		etag = f.etag
		f.mu.Unlock()
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(f.target)
}

// release sets a new target (its ETag) and wakes the parked GETs.
func (f *rolloutFloor) release(etag string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.etag = etag
	close(f.next)
	f.next = make(chan struct{})
}

func benchFleetRolloutFloor(b *testing.B, n int) {
	sink := newFloorSink(converge.NewMemStore())
	b.Cleanup(sink.close)
	f := &rolloutFloor{sink: sink, target: fleetTargetBody(b, 1), etag: fleet.ETag(1), next: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/devices/{id}/target", f.getTarget)
	mux.HandleFunc("PUT /v1/devices/{id}/report", sink.floorReport)
	rw := newReadyWatch(mux, n)
	route := http.NewServeMux()
	route.Handle("PUT /v1/devices/{id}/report", rw)
	route.Handle("/", mux)
	base := fleetServe(b, route)
	ids := make([]string, n)
	tokens := make([]string, n)
	for i := range ids {
		ids[i], tokens[i] = fleetDeviceID(i), fleetDeviceID(i)+"."+strings.Repeat("x", 43)
	}
	child := startFleetChild(b, childSpec{Mode: "floor", Base: base, IDs: ids, Tokens: tokens})
	// Each client parks a GET for the target after rev-1, then sends
	// the report of rev.
	park := func(rev uint64) {
		child.send(b, "round "+strconv.FormatUint(rev, 10))
		waitParked(b, f.parked.Load, int64(n), child)
	}
	park(2)
	var server, clients time.Duration
	b.ResetTimer()
	for r := range b.N {
		server0, clients0 := clientCPU(), child.cpu()
		rev := uint64(r + 2)
		ready := rw.expect(rev)
		f.release(fleet.ETag(rev))
		waitReady(b, ready, child)
		b.StopTimer()
		server += clientCPU() - server0
		clients += child.cpu() - clients0
		if r+1 < b.N {
			park(rev + 1)
		}
		b.StartTimer()
	}
	b.StopTimer()
	reportDeviceCPU(b, n, server, clients)
}
