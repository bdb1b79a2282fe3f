// Package prometheus exposes the metrics of converge's loops (walks, target
// reconcilers, plan runners, controllers, the docker adapter) to Prometheus
// through client_golang.
//
// A *Metrics implements converge.Metrics, which the loops report to, and
// prometheus.Collector, which a registry gathers from. Register it on your
// own registry, never on the global one, and pass it to the loops:
//
//	m, err := prometheus.New(prometheus.Options{})
//	...
//	reg := prom.NewRegistry()
//	reg.MustRegister(m)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Each converge.Metric descriptor becomes a CounterVec, GaugeVec or
// HistogramVec with the descriptor's name, help, labels and buckets, when
// it is first used. Register declares descriptors up front, so that a
// scrape shows them before their first value: a metric without labels at 0
// at once, one with labels from its first set of label values on, as
// client_golang does. A histogram without buckets of its own uses
// controller-runtime's buckets (5ms to 60s) when its name ends in
// "_seconds", prometheus.DefBuckets otherwise, or Options.Buckets when
// set.
//
// The descriptors follow controller-runtime's habits: a "converge_"
// prefix, "_total" counters, "_seconds" histograms, and labels whose
// values come from small sets (a kind, a state, an outcome), never an item
// ID or object key, so the number of series stays bounded. Metrics keeps
// one series per distinct set of label values it is given, and never
// forgets one. Every series names its loop with a bounded label: "target"
// (a target reconciler's Name, on its passes and its walks) or
// "controller" (a controller's Kind), so two loops in one program are
// told apart; results read "success" and "error", as in
// controller-runtime. The operating guide's "Alerts an operator writes" (docs/operating.md) shows
// three alert rules on these names.
//
// A descriptor that cannot be a Prometheus metric (ErrInvalidMetric), a
// name declared twice with another kind, labels, help or buckets
// (ErrConflict), and a call that does not fit the metric, such as Set on a
// counter (ErrMisuse), are programmer errors: Register returns them and
// Add, Set and Observe panic with them, as a *MetricError naming the
// metric.
//
// Metrics is an unchecked collector (its Describe sends nothing): its
// metrics are created while the loops run, and a checked collector would
// have to describe them all when it is registered. The cost is that a
// name colliding with another collector's is caught by the registry's
// Gather rather than by its Register.
//
// Add, Set and Observe on a series that exists take a lock-free lookup of
// the descriptor and, when the label values are those of the series the
// metric used last, no lookup of the series either (a loop reports the
// same few series over and over); otherwise client_golang's lookup of
// the label values. They allocate nothing when the series is the last
// one: compare BenchmarkAdd with BenchmarkClientGolangAdd. Called through
// the converge.Metrics interface with label values written out, the
// caller allocates their slice (one allocation, 16 bytes per label), since
// the compiler cannot see that it does not escape; passing a slice the
// caller keeps avoids that. A caller that observes one histogram series
// over and over can find it once with Observer and call the function it
// returns, which is client_golang's own Observe (compare
// BenchmarkObserveKeptLabelsParallel with
// BenchmarkClientGolangObserveParallel): a controller times its handler
// runs that way.
package prometheus
