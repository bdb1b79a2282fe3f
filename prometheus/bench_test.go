package prometheus_test

import (
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/prometheus"
)

var (
	benchCounter = &converge.Metric{Name: "converge_bench_items_total", Help: "B.",
		Kind: converge.MetricCounter, Labels: []string{"kind", "outcome"}}
	benchGauge = &converge.Metric{Name: "converge_bench_objects", Help: "B.",
		Kind: converge.MetricGauge, Labels: []string{"kind", "state"}}
	benchHist = &converge.Metric{Name: "converge_bench_item_seconds", Help: "B.",
		Kind: converge.MetricHistogram, Labels: []string{"kind"}}
)

// benchMetrics returns a Metrics whose benchmark series exist, seen as a
// loop sees it: through the converge.Metrics interface.
func benchMetrics(b *testing.B) converge.Metrics {
	m, err := prometheus.New(prometheus.Options{})
	if err != nil {
		b.Fatal(err)
	}
	m.Add(benchCounter, 1, "file", "changed")
	m.Add(benchGauge, 1, "machine", "ready")
	m.Observe(benchHist, 1, "file")
	return m
}

// BenchmarkAdd is the hot path of a loop: a counter series that exists.
// It allocates nothing.
func BenchmarkAdd(b *testing.B) {
	m := benchMetrics(b).(*prometheus.Metrics)
	b.ReportAllocs()
	for b.Loop() {
		m.Add(benchCounter, 1, "file", "changed")
	}
}

// BenchmarkAddViaInterface is BenchmarkAdd called through
// converge.Metrics, as the loops call it. The one allocation is the
// caller's: the compiler cannot tell that the label values passed to an
// interface method do not escape, so it puts their slice on the heap. A
// caller that passes a slice it keeps (labels...) avoids it.
func BenchmarkAddViaInterface(b *testing.B) {
	m := benchMetrics(b)
	b.ReportAllocs()
	for b.Loop() {
		m.Add(benchCounter, 1, "file", "changed")
	}
}

// BenchmarkAddViaInterfaceKeptLabels passes a slice of label values the
// caller keeps: no allocation through the interface either.
func BenchmarkAddViaInterfaceKeptLabels(b *testing.B) {
	m := benchMetrics(b)
	labels := []string{"file", "changed"}
	b.ReportAllocs()
	for b.Loop() {
		m.Add(benchCounter, 1, labels...)
	}
}

// BenchmarkAddParallel is BenchmarkAdd from every P at once.
func BenchmarkAddParallel(b *testing.B) {
	m := benchMetrics(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Add(benchCounter, 1, "file", "changed")
		}
	})
}

// BenchmarkSet sets a gauge series that exists.
func BenchmarkSet(b *testing.B) {
	m := benchMetrics(b)
	b.ReportAllocs()
	for b.Loop() {
		m.Set(benchGauge, 3, "machine", "ready")
	}
}

// BenchmarkObserve observes into a histogram series that exists.
func BenchmarkObserve(b *testing.B) {
	m := benchMetrics(b)
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(benchHist, 0.3, "file")
	}
}

// BenchmarkClientGolangAdd is the floor: client_golang's own
// CounterVec.WithLabelValues(...).Add, which Add wraps.
func BenchmarkClientGolangAdd(b *testing.B) {
	v := prom.NewCounterVec(prom.CounterOpts{Name: "converge_bench_raw_total", Help: "B."}, []string{"kind", "outcome"})
	b.ReportAllocs()
	for b.Loop() {
		v.WithLabelValues("file", "changed").Add(1)
	}
}

// BenchmarkObserveKeptLabelsParallel is how a controller's workers time
// their handler runs: one histogram series, observed through
// converge.Metrics with a label slice the caller keeps, from every P at
// once.
func BenchmarkObserveKeptLabelsParallel(b *testing.B) {
	m := benchMetrics(b)
	labels := []string{"file"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Observe(benchHist, 1e-6, labels...)
		}
	})
}

// BenchmarkClientGolangObserveParallel is the floor of
// BenchmarkObserveKeptLabelsParallel: client_golang's own histogram
// series, resolved once, observed from every P at once.
func BenchmarkClientGolangObserveParallel(b *testing.B) {
	h := prom.NewHistogram(prom.HistogramOpts{Name: "converge_bench_raw_seconds", Help: "B."})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Observe(1e-6)
		}
	})
}
