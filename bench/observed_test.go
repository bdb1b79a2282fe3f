package bench

import (
	"io"
	"log/slog"
	"testing"

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
// compare its reconciles/s with BenchmarkControllerThroughput's in the
// same run (goal: within 10%).
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
	benchControllerThroughput(b, cfg, false)
}
