package bench

import (
	"io"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/prometheus"
)

// observed returns what a program that watches its loops passes them: the
// prometheus module's Metrics, registered on a registry (with every
// metric declared up front), and a logger at Info writing text into
// io.Discard, so that every line a loop logs at Info or above is
// formatted and thrown away.
func observed(b *testing.B) (*prometheus.Metrics, *slog.Logger) {
	m, err := prometheus.New(prometheus.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Register(append(converge.AllMetrics(), controller.AllMetrics()...)...); err != nil {
		b.Fatal(err)
	}
	prom.NewRegistry().MustRegister(m)
	return m, slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// BenchmarkWalkNoop10kObserved is BenchmarkWalkNoop10k with metrics
// through the prometheus module and a logger at Info: compare its ns/item
// with BenchmarkWalkNoop10k's in the same run (goal: within 10%).
func BenchmarkWalkNoop10kObserved(b *testing.B) {
	m, log := observed(b)
	benchNoopWalkWith(b, converge.WalkerConfig{Parallelism: noopPar, Name: "bench", Metrics: m, Logger: log})
}

// BenchmarkControllerThroughputObserved is BenchmarkControllerThroughput
// with metrics through the prometheus module and a logger at Info:
// compare its cpu-ns/reconcile with BenchmarkControllerThroughput's in
// the same run (goal: at most 150 ns more, what watching costs a handler
// run; a clock reading alone is about 30 ns).
func BenchmarkControllerThroughputObserved(b *testing.B) { benchThroughputTwin(b, true) }

// benchThroughputTwin runs the throughput load of
// BenchmarkControllerThroughput, observed (metrics through the prometheus
// module and a logger at Info) when observe is set: both twins go through
// it, so their setup (outside the timer) and what is timed (the drain,
// see measureBatches) are the same, and the controller's Config differs
// by its Metrics and Logger only.
func benchThroughputTwin(b *testing.B, observe bool) {
	var cfg controller.Config
	if observe {
		cfg.Metrics, cfg.Logger = observed(b)
	}
	benchControllerThroughput(b, cfg, false, nil)
}

// BenchmarkControllerThroughputWork10us is BenchmarkControllerThroughput
// with a handler that does about 10 µs of work per run (work10us): the
// plain twin of BenchmarkControllerThroughputObservedWork10us.
func BenchmarkControllerThroughputWork10us(b *testing.B) { benchThroughputWorkTwin(b, false) }

// BenchmarkControllerThroughputObservedWork10us is
// BenchmarkControllerThroughputObserved with a handler that does about
// 10 µs of work per run: compare its reconciles/s with
// BenchmarkControllerThroughputWork10us's in the same run (goal: within
// 3%), what watching costs a controller whose handlers do some work.
func BenchmarkControllerThroughputObservedWork10us(b *testing.B) { benchThroughputWorkTwin(b, true) }

// benchThroughputWorkTwin is benchThroughputTwin with the handler's work
// of work10us. It reports the work's own calibrated length as
// work-ns/reconcile, the same for both twins of one process.
func benchThroughputWorkTwin(b *testing.B, observe bool) {
	var cfg controller.Config
	if observe {
		cfg.Metrics, cfg.Logger = observed(b)
	}
	rounds, perRound := work10us()
	benchControllerThroughput(b, cfg, false, func() {
		if spin(rounds) == 0 {
			panic("bench: spin came to zero") // never: keeps the loop from being optimised away
		}
	})
	b.ReportMetric(float64(rounds)*perRound, "work-ns/reconcile")
}

// work10us returns how many rounds of spin take 10 µs on this machine,
// and the nanoseconds one round takes: calibrated once per process (the
// fastest of several timings, so that a neighbour's burst does not
// lengthen it), so that both twins of a run do the same work.
var work10us = sync.OnceValues(func() (int, float64) {
	const n = 1 << 20
	best := time.Duration(math.MaxInt64)
	for range 7 {
		start := time.Now()
		if spin(n) == 0 {
			panic("bench: spin came to zero")
		}
		best = min(best, time.Since(start))
	}
	perRound := float64(best) / n
	return int(10_000 / perRound), perRound
})

// spin runs n rounds of a xorshift generator: work on the CPU alone, no
// memory, no allocation. Its result is never zero.
func spin(n int) uint64 {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}
