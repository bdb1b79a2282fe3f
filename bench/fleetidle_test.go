package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/fleet"
)

// fleetIdleSizes are the fleets of BenchmarkFleetIdleMemory and its
// floors; -short runs the first only.
var fleetIdleSizes = []int{1000, 10_000}

// BenchmarkFleetIdleMemory is the memory a fleet server holds for each
// device parked in a long poll: devices raw TCP clients (in a child
// process: a connection that sent its request and waits) each send a
// long poll (GET .../target?wait=60s with the device's credential and the
// ETag of its current target) to one fleet server (a MemStore, the fleet's
// HTTP timeouts); once the server counts them all waiting, the live heap
// (runtime.MemStats.HeapAlloc after a collection) and the goroutine
// stacks (StackInuse) are read and compared with their values before the
// clients connected. B/idle-device is their growth per device, in the
// server's process alone; BenchmarkFleetIdleMemoryConns measures what the
// server's end of each connection holds by itself. Beside it, the floor
// BenchmarkFleetIdleMemoryFloor.
func BenchmarkFleetIdleMemory(b *testing.B) { benchFleetIdleSizes(b, "fleet") }

// BenchmarkFleetIdleMemoryFloor is the floor of BenchmarkFleetIdleMemory:
// the same clients send the same requests to a bare net/http server (the
// same timeouts) whose handler only waits for the request's context.
func BenchmarkFleetIdleMemoryFloor(b *testing.B) { benchFleetIdleSizes(b, "floor") }

// BenchmarkFleetIdleMemoryConns is what the connections alone hold: the
// same clients connect and send the same requests to a listener that
// accepts each connection and keeps it, reading nothing (no HTTP server,
// no goroutine per connection).
func BenchmarkFleetIdleMemoryConns(b *testing.B) { benchFleetIdleSizes(b, "conns") }

func benchFleetIdleSizes(b *testing.B, mode string) {
	forFleetSizes(b, fleetIdleSizes, func(b *testing.B, n int) { benchFleetIdle(b, n, mode) })
}

// idleServer is what a client of benchFleetIdle connects to.
type idleServer struct {
	addr   string
	parked func() int64 // requests (or connections) waiting
	reqs   [][]byte     // the request of each device
}

func startIdleServer(b *testing.B, n int, mode string) idleServer {
	ctx := context.Background()
	reqs := make([][]byte, n)
	request := func(i int, token string, etag string) []byte {
		return fmt.Appendf(nil, "GET /v1/devices/%s/target?wait=60s HTTP/1.1\r\nHost: fleet\r\nAuthorization: Bearer %s\r\nIf-None-Match: %s\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n",
			fleetDeviceID(i), token, etag)
	}
	floorToken := "dev-00000." + fmt.Sprintf("%043d", 0)
	switch mode {
	case "fleet":
		polls := &longPolls{}
		s, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Logger: slog.New(slog.DiscardHandler), Metrics: polls})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		if err := parallel(n, func(i int) error {
			tok, err := s.Enrol(ctx, fleetDeviceID(i), nil)
			if err != nil {
				return err
			}
			rev, err := s.SetTarget(ctx, fleetDeviceID(i), fleetTarget(1))
			reqs[i] = request(i, tok, fleet.ETag(rev))
			return err
		}); err != nil {
			b.Fatal(err)
		}
		base := fleetServe(b, s)
		return idleServer{addr: base[len("http://"):], parked: polls.n.Load, reqs: reqs}
	case "floor":
		var parked atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			parked.Add(1)
			defer parked.Add(-1)
			<-r.Context().Done()
		})
		for i := range reqs {
			reqs[i] = request(i, floorToken, fleet.ETag(1))
		}
		base := fleetServe(b, h)
		return idleServer{addr: base[len("http://"):], parked: parked.Load, reqs: reqs}
	case "conns":
		for i := range reqs {
			reqs[i] = request(i, floorToken, fleet.ETag(1))
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		var (
			mu    sync.Mutex
			conns []net.Conn
			n     atomic.Int64
			done  = make(chan struct{})
		)
		go func() {
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				n.Add(1)
			}
		}()
		b.Cleanup(func() {
			_ = ln.Close()
			<-done
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				_ = c.Close()
			}
		})
		return idleServer{addr: ln.Addr().String(), parked: n.Load, reqs: reqs}
	}
	b.Fatalf("no mode %q", mode)
	return idleServer{}
}

// liveMemory collects garbage and returns the live heap and the stacks
// in use.
func liveMemory() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse
}

func benchFleetIdle(b *testing.B, n int, mode string) {
	srv := startIdleServer(b, n, mode)
	var heap, stack, goroutines float64
	for range b.N {
		b.StopTimer()
		heap0, stack0 := liveMemory()
		g0 := runtime.NumGoroutine()
		base := srv.parked()
		b.StartTimer()
		child := startFleetChild(b, childSpec{Mode: "idle", Addr: srv.addr, Reqs: srv.reqs})
		waitParked(b, srv.parked, base+int64(n), child)
		b.StopTimer()
		heap1, stack1 := liveMemory()
		heap += float64(int64(heap1) - int64(heap0))
		stack += float64(int64(stack1) - int64(stack0))
		goroutines += float64(runtime.NumGoroutine() - g0)
		// The clients leave; a long poll ends with its connection.
		child.stop()
		if mode != "conns" {
			waitParked(b, srv.parked, base, nil)
		}
		b.StartTimer()
	}
	per := float64(b.N * n)
	b.ReportMetric((heap+stack)/per, "B/idle-device")
	b.ReportMetric(heap/per, "heap-B/idle-device")
	b.ReportMetric(stack/per, "stack-B/idle-device")
	b.ReportMetric(goroutines/per, "goroutines/idle-device")
}

// waitParked waits until parked reports want, at most fleetRolloutLimit,
// failing if child (when not nil), the process of the clients, exits.
func waitParked(b *testing.B, parked func() int64, want int64, child *fleetChild) {
	b.Helper()
	deadline := time.Now().Add(fleetRolloutLimit)
	for parked() != want {
		if child != nil && child.failed() {
			b.Fatal("the clients' process exited")
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d waiting, want %d, after %s", parked(), want, fleetRolloutLimit)
		}
		time.Sleep(time.Millisecond)
	}
}

const (
	// fleetPollAgents is how many idle agents BenchmarkFleetAgentPoll
	// runs, fleetPollWait the wait of their long polls: short, so that
	// a run sees many polls (the CPU of a poll does not depend on how
	// long it waited: a parked request costs only memory).
	fleetPollAgents = 100
	fleetPollWait   = 200 * time.Millisecond
)

// pollCounter counts the answers to GETs of a target that it passes on.
type pollCounter struct {
	h http.Handler
	n atomic.Int64
}

func (p *pollCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.h.ServeHTTP(w, r)
	if r.Method == http.MethodGet {
		p.n.Add(1)
	}
}

// BenchmarkFleetAgentPoll is the cost of an idle agent's long poll:
// fleetPollAgents agents (fleet.Agent on a TargetReconciler with no
// periodic pass, in a child process) converged to their target
// keep long-polling one fleet server (a MemStore, its rate limit set high
// enough to refuse nothing) with a wait of fleetPollWait, which the
// server answers 304 Not Modified when it runs out; the run lasts until
// b.N polls were answered. cpu-µs/poll is the CPU per poll of the
// server's process and the agents' (server-cpu-µs/poll,
// client-cpu-µs/poll); an agent at the default wait
// (fleet.DefaultAgentWait, 30 s) polls twice a minute. Beside its floor,
// BenchmarkFleetAgentPollFloor.
func BenchmarkFleetAgentPoll(b *testing.B) { benchFleetAgentPoll(b, false) }

// BenchmarkFleetAgentPollFloor is the floor of BenchmarkFleetAgentPoll:
// as many goroutines, sharing the same kind of transport, each in a loop
// of GETs with the same headers to a bare net/http handler that waits
// fleetPollWait and answers 304.
func BenchmarkFleetAgentPollFloor(b *testing.B) { benchFleetAgentPoll(b, true) }

func benchFleetAgentPoll(b *testing.B, floor bool) {
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	ids := make([]string, fleetPollAgents)
	tokens := make([]string, fleetPollAgents)
	var counter *pollCounter
	var child *fleetChild
	if floor {
		counter = &pollCounter{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t := time.NewTimer(fleetPollWait)
			defer t.Stop()
			select {
			case <-t.C:
				w.Header().Set("ETag", r.Header.Get("If-None-Match"))
				w.WriteHeader(http.StatusNotModified)
			case <-r.Context().Done():
			}
		})}
		base := fleetServe(b, counter)
		for i := range ids {
			ids[i], tokens[i] = fleetDeviceID(i), fleetDeviceID(i)+"."+strings.Repeat("x", 43)
		}
		child = startFleetChild(b, childSpec{Mode: "pollfloor", Base: base, IDs: ids, Tokens: tokens, Wait: fleetPollWait})
	} else {
		s, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Logger: logger, Rate: 1e9, Burst: 1e9})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		counter = &pollCounter{h: s}
		rw := newReadyWatch(s, fleetPollAgents)
		mux := http.NewServeMux()
		mux.Handle("PUT /v1/devices/{id}/report", rw)
		mux.Handle("/", counter)
		base := fleetServe(b, mux)
		ready := rw.expect(1)
		for i := range ids {
			ids[i] = fleetDeviceID(i)
			if tokens[i], err = s.Enrol(ctx, ids[i], nil); err != nil {
				b.Fatal(err)
			}
			if _, err := s.SetTarget(ctx, ids[i], fleetTarget(1)); err != nil {
				b.Fatal(err)
			}
		}
		child = startFleetChild(b, childSpec{Mode: "agents", Base: base, IDs: ids, Tokens: tokens, Wait: fleetPollWait})
		waitReady(b, ready, child)
	}
	// Let every agent settle into its polls before the count starts.
	time.Sleep(2 * fleetPollWait)
	start := counter.n.Load()
	server0, agents0 := clientCPU(), child.cpu()
	b.ResetTimer()
	for counter.n.Load()-start < int64(b.N) {
		if child.failed() {
			b.Fatal("the clients' process exited")
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	server, agents := clientCPU()-server0, child.cpu()-agents0
	polls := float64(counter.n.Load() - start)
	b.ReportMetric(float64((server+agents).Microseconds())/polls, "cpu-µs/poll")
	b.ReportMetric(float64(server.Microseconds())/polls, "server-cpu-µs/poll")
	b.ReportMetric(float64(agents.Microseconds())/polls, "client-cpu-µs/poll")
}
