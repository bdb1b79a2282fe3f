package converge

// MetricKind says how the values of a metric combine.
type MetricKind uint8

const (
	// MetricCounter only grows: Add with a delta of zero or more.
	MetricCounter MetricKind = iota + 1
	// MetricGauge goes up and down: Add a delta, or Set a value.
	MetricGauge
	// MetricHistogram records a distribution of values with Observe.
	MetricHistogram
)

var metricKindNames = [...]string{"", "counter", "gauge", "histogram"}

// String returns "counter", "gauge" or "histogram".
func (k MetricKind) String() string { return enumString("metric kind", metricKindNames[:], uint8(k)) }

// Metric describes one metric a loop reports. The packages that report
// metrics declare theirs as package-level variables (MetricWalkItems and
// its siblings here, more in controller and docker), so that an adapter can
// register them before the first value arrives and a test can name them.
//
// Names follow Prometheus conventions: a "converge_" prefix, the unit
// ("_seconds"), and "_total" for counters. Label values come from small,
// bounded sets (an item kind, an outcome, a state, a controller's kind) and
// never from item IDs, object keys or plan IDs, so the number of series
// stays bounded however many objects there are.
type Metric struct {
	// Name is the metric's full name, such as "converge_walk_items_total".
	Name string
	// Help is one sentence saying what is measured.
	Help string
	// Kind says how values combine.
	Kind MetricKind
	// Labels are the names of the metric's labels, in the order their
	// values are passed to Metrics.
	Labels []string
	// Buckets are the upper bounds of a histogram's buckets, ascending;
	// nil means the adapter's default.
	Buckets []float64
}

// Metrics receives the measurements of every loop: walks, target
// reconcilers, plan runners, controllers and adapters. Label values are
// given in the order of Metric.Labels. Implementations must be safe for
// concurrent use and cheap: they are called on the loops' hot paths.
// converge has no implementation beyond MetricsNop; the prometheus module
// provides one on client_golang.
type Metrics interface {
	// Add adds delta to a counter or a gauge.
	Add(m *Metric, delta float64, labels ...string)
	// Set sets a gauge to value.
	Set(m *Metric, value float64, labels ...string)
	// Observe records one value of a histogram.
	Observe(m *Metric, value float64, labels ...string)
}

// MetricsNop is the Metrics that records nothing, used wherever no Metrics
// is configured. The zero value is ready.
type MetricsNop struct{}

var _ Metrics = MetricsNop{}

// Add implements Metrics and does nothing.
func (MetricsNop) Add(*Metric, float64, ...string) {}

// Set implements Metrics and does nothing.
func (MetricsNop) Set(*Metric, float64, ...string) {}

// Observe implements Metrics and does nothing.
func (MetricsNop) Observe(*Metric, float64, ...string) {}

// MarshalText encodes k by name; an undeclared value is a *NameError.
func (k MetricKind) MarshalText() ([]byte, error) {
	return enumMarshal("metric kind", metricKindNames[:], uint8(k))
}

// UnmarshalText decodes a name written by MarshalText; an unknown name is a
// *NameError.
func (k *MetricKind) UnmarshalText(b []byte) error {
	return enumUnmarshal(k, "metric kind", metricKindNames[:], b)
}
