package prometheus

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/convergekit/converge"
)

var (
	// ErrInvalidMetric matches a *MetricError for a descriptor that cannot
	// become a Prometheus metric: nil, an invalid or empty name or label
	// name, a repeated label, an unknown kind, buckets that are not
	// ascending or set on a metric that is not a histogram.
	ErrInvalidMetric = errors.New("invalid")
	// ErrConflict matches a *MetricError for a descriptor whose name was
	// first declared with another kind, other labels (or the same labels
	// in another order), another help text or other buckets.
	ErrConflict = errors.New("declared twice differently")
	// ErrMisuse matches a *MetricError for a call that does not fit the
	// metric: Set on a counter or histogram, Add on a histogram, Observe
	// on a counter or gauge, a negative Add to a counter, or label values
	// whose number differs from the descriptor's labels or that are not
	// valid UTF-8.
	ErrMisuse = errors.New("misused")
)

// MetricError is a programmer error about one metric: Register returns it,
// and Add, Set and Observe panic with it. Err is ErrInvalidMetric,
// ErrConflict or ErrMisuse.
type MetricError struct {
	// Name is the metric's name; empty for a nil descriptor.
	Name string
	// Err is the sentinel the error matches.
	Err error
	// Reason says what is wrong.
	Reason string
}

// Error describes the problem, naming the metric.
func (e *MetricError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("prometheus: unnamed metric %v: %s", e.Err, e.Reason)
	}
	return fmt.Sprintf("prometheus: metric %q %v: %s", e.Name, e.Err, e.Reason)
}

// Unwrap returns Err.
func (e *MetricError) Unwrap() error { return e.Err }

// secondsBuckets are the default buckets of a histogram named "..._seconds":
// controller-runtime's reconcile-time buckets, 5ms to one minute, dense
// below five seconds.
var secondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45,
	0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10,
	15, 20, 25, 30, 40, 50, 60}

// Options tunes a Metrics. The zero value is ready: a histogram whose
// descriptor has no Buckets uses controller-runtime's reconcile-time
// buckets (5ms to 60s) when its name ends in "_seconds", and
// prometheus.DefBuckets otherwise.
type Options struct {
	// Buckets are the upper bounds, ascending, of every histogram whose
	// descriptor has no Buckets; nil means the defaults above.
	Buckets []float64
}

// Validate reports Buckets that are not strictly ascending as a
// *converge.ConfigError.
func (o Options) Validate() error {
	if reason := bucketsProblem(o.Buckets); reason != "" {
		return &converge.ConfigError{Field: "Buckets", Reason: reason}
	}
	return nil
}

// Metrics is a converge.Metrics that keeps its values in client_golang
// metrics, and a prometheus.Collector that exposes them: register it on
// your own registry (reg.MustRegister(m)). The zero value is ready and
// uses the zero Options. It is safe for concurrent use.
//
// A metric is created from its descriptor when it is first used or
// declared with Register; from then on the descriptor is found by its
// pointer, so a descriptor must not be changed after its first use.
// Several descriptors may share a name if they are identical; a name
// declared again differently is an ErrConflict.
//
// Metrics is an unchecked collector: Describe sends nothing, because the
// metrics are created at run time, as the loops report them, and a
// checked collector must describe at registration everything it will ever
// collect. The registry therefore does not check at registration that
// names do not collide with those of other collectors; a collision shows
// as an error from the registry's Gather.
type Metrics struct {
	opts Options

	// byPtr maps each descriptor seen to its family. It is copied on
	// write, so the hot path reads it without a lock.
	byPtr atomic.Pointer[map[*converge.Metric]*family]

	mu     sync.Mutex         // serializes declarations; guards the fields below
	byName map[string]*family // every family by metric name
	fams   []*family          // every family, in declaration order

	handlerState
}

var (
	_ converge.Metrics = (*Metrics)(nil)
	_ prom.Collector   = (*Metrics)(nil)
)

// New validates opts and returns an empty Metrics that uses them.
func New(opts Options) (*Metrics, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Buckets = slices.Clone(opts.Buckets)
	return &Metrics{opts: opts}, nil
}

// family is the client_golang vector of one metric name.
type family struct {
	name    string
	help    string
	kind    converge.MetricKind
	labels  []string
	buckets []float64 // effective buckets; histograms only

	counter   *prom.CounterVec
	gauge     *prom.GaugeVec
	histogram *prom.HistogramVec
	collector prom.Collector

	// last is the series last used, found again without hashing its
	// label values when the next call has the same ones: a loop reports
	// the same few series over and over.
	last atomic.Pointer[series]
}

// series is one series of a family and a copy of its label values.
type series struct {
	labels    []string
	counter   prom.Counter
	gauge     prom.Gauge
	histogram prom.Observer
}

// lookup returns the series of f with label values labels, from f.last
// when they are the same, else from client_golang (and remembers it). It
// returns an error from client_golang, such as for values that are not
// valid UTF-8.
func (f *family) lookup(labels []string) (*series, error) {
	if s := f.last.Load(); s != nil && sameLabels(s.labels, labels) {
		return s, nil
	}
	s := &series{labels: append([]string(nil), labels...)}
	var err error
	switch f.kind {
	case converge.MetricCounter:
		s.counter, err = f.counter.GetMetricWithLabelValues(labels...)
	case converge.MetricGauge:
		s.gauge, err = f.gauge.GetMetricWithLabelValues(labels...)
	default:
		s.histogram, err = f.histogram.GetMetricWithLabelValues(labels...)
	}
	if err != nil {
		return nil, err
	}
	f.last.Store(s)
	return s, nil
}

// sameLabels reports whether a and b hold the same label values.
func sameLabels(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Register declares metrics up front, so that a scrape shows them before
// their first value, as client_golang does for metrics it creates: a
// metric without labels appears at once with the value 0 (a histogram
// with empty buckets); one with labels has no series until a set of label
// values is first used. It returns every problem as a *MetricError
// (ErrInvalidMetric, ErrConflict), joined; the valid descriptors are
// declared anyway.
func (m *Metrics) Register(descs ...*converge.Metric) error {
	var errs []error
	for _, d := range descs {
		f, err := m.family(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(f.labels) == 0 {
			f.touch()
		}
	}
	return errors.Join(errs...)
}

// Add adds delta to a counter or a gauge. It panics with a *MetricError
// if d is invalid or conflicts with an earlier declaration, if d is a
// histogram, if delta is negative for a counter, or if labels do not
// match d.Labels.
func (m *Metrics) Add(d *converge.Metric, delta float64, labels ...string) {
	f := m.mustFamily(d)
	switch f.kind {
	case converge.MetricCounter:
		if !(delta >= 0) {
			panic(f.misuse(fmt.Sprintf("Add(%v) to a counter; a counter only grows", delta)))
		}
		s, err := f.lookup(f.checkLabels(labels))
		if err != nil {
			panic(f.misuse(err.Error()))
		}
		s.counter.Add(delta)
	case converge.MetricGauge:
		s, err := f.lookup(f.checkLabels(labels))
		if err != nil {
			panic(f.misuse(err.Error()))
		}
		s.gauge.Add(delta)
	default:
		panic(f.misuse("Add on a histogram; use Observe"))
	}
}

// Set sets a gauge to value. It panics with a *MetricError if d is
// invalid or conflicts with an earlier declaration, if d is not a gauge,
// or if labels do not match d.Labels.
func (m *Metrics) Set(d *converge.Metric, value float64, labels ...string) {
	f := m.mustFamily(d)
	if f.kind != converge.MetricGauge {
		panic(f.misuse(fmt.Sprintf("Set on a %s; only a gauge is set", f.kind)))
	}
	s, err := f.lookup(f.checkLabels(labels))
	if err != nil {
		panic(f.misuse(err.Error()))
	}
	s.gauge.Set(value)
}

// Observe records one value of a histogram. It panics with a *MetricError
// if d is invalid or conflicts with an earlier declaration, if d is not a
// histogram, or if labels do not match d.Labels.
func (m *Metrics) Observe(d *converge.Metric, value float64, labels ...string) {
	f := m.mustFamily(d)
	if f.kind != converge.MetricHistogram {
		panic(f.misuse(fmt.Sprintf("Observe on a %s; only a histogram observes", f.kind)))
	}
	s, err := f.lookup(f.checkLabels(labels))
	if err != nil {
		panic(f.misuse(err.Error()))
	}
	s.histogram.Observe(value)
}

// Observer returns a function that records one value of the histogram
// d's series with the label values labels, as Observe does, the series
// being found once, here, rather than on every call: for a caller that
// observes the same series over and over, such as a controller timing its
// handler runs (the controller package calls it when its Config.Metrics
// has it). The series exists from this call on, empty until the first
// value. It returns a *MetricError (ErrInvalidMetric, ErrConflict,
// ErrMisuse) where Observe would panic with one, and then creates nothing.
func (m *Metrics) Observer(d *converge.Metric, labels ...string) (func(float64), error) {
	f, err := m.family(d)
	if err != nil {
		return nil, err
	}
	if f.kind != converge.MetricHistogram {
		return nil, f.misuse(fmt.Sprintf("Observer of a %s; only a histogram observes", f.kind))
	}
	if err := f.wrongLabels(labels); err != nil {
		return nil, err
	}
	s, err := f.lookup(labels)
	if err != nil {
		return nil, f.misuse(err.Error())
	}
	return s.histogram.Observe, nil
}

// Describe implements prometheus.Collector. It sends nothing, which makes
// Metrics an unchecked collector (see Metrics).
func (m *Metrics) Describe(chan<- *prom.Desc) {}

// Collect implements prometheus.Collector: it sends every series of every
// metric declared or used so far.
func (m *Metrics) Collect(ch chan<- prom.Metric) {
	m.mu.Lock()
	fams := m.fams
	m.mu.Unlock()
	for _, f := range fams {
		f.collector.Collect(ch)
	}
}

// mustFamily is family for the hot path: it panics instead of returning an
// error.
func (m *Metrics) mustFamily(d *converge.Metric) *family {
	f, err := m.family(d)
	if err != nil {
		panic(err)
	}
	return f
}

// family returns the family of d, creating it on first use.
func (m *Metrics) family(d *converge.Metric) (*family, error) {
	if p := m.byPtr.Load(); p != nil {
		if f, ok := (*p)[d]; ok {
			return f, nil
		}
	}
	return m.declare(d)
}

// declare validates a descriptor seen for the first time and finds or
// creates its family.
func (m *Metrics) declare(d *converge.Metric) (*family, error) {
	if d == nil {
		return nil, &MetricError{Err: ErrInvalidMetric, Reason: "the descriptor is nil"}
	}
	if reason := metricProblem(d); reason != "" {
		return nil, &MetricError{Name: d.Name, Err: ErrInvalidMetric, Reason: reason}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.byPtr.Load()
	if old != nil {
		if f, ok := (*old)[d]; ok {
			return f, nil // declared while we waited for the lock
		}
	}
	want := m.newFamily(d)
	f := m.byName[d.Name]
	if f == nil {
		f = want
		f.build()
		if m.byName == nil {
			m.byName = make(map[string]*family)
		}
		m.byName[f.name] = f
		m.fams = append(slices.Clip(m.fams), f)
	} else if reason := f.differs(want); reason != "" {
		return nil, &MetricError{Name: d.Name, Err: ErrConflict, Reason: reason}
	}
	next := make(map[*converge.Metric]*family, len(m.fams)+1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[d] = f
	m.byPtr.Store(&next)
	return f, nil
}

// newFamily copies what matters of d, with the effective buckets.
func (m *Metrics) newFamily(d *converge.Metric) *family {
	f := &family{name: d.Name, help: d.Help, kind: d.Kind, labels: slices.Clone(d.Labels)}
	if d.Kind == converge.MetricHistogram {
		switch {
		case len(d.Buckets) > 0:
			f.buckets = slices.Clone(d.Buckets)
		case m.opts.Buckets != nil:
			f.buckets = m.opts.Buckets
		case strings.HasSuffix(d.Name, "_seconds"):
			f.buckets = secondsBuckets
		default:
			f.buckets = prom.DefBuckets
		}
	}
	return f
}

// build creates the client_golang vector of f.
func (f *family) build() {
	switch f.kind {
	case converge.MetricCounter:
		f.counter = prom.NewCounterVec(prom.CounterOpts{Name: f.name, Help: f.help}, f.labels)
		f.collector = f.counter
	case converge.MetricGauge:
		f.gauge = prom.NewGaugeVec(prom.GaugeOpts{Name: f.name, Help: f.help}, f.labels)
		f.collector = f.gauge
	default:
		f.histogram = prom.NewHistogramVec(prom.HistogramOpts{Name: f.name, Help: f.help, Buckets: f.buckets}, f.labels)
		f.collector = f.histogram
	}
}

// touch creates the only series of a family without labels.
func (f *family) touch() {
	switch f.kind {
	case converge.MetricCounter:
		f.counter.WithLabelValues()
	case converge.MetricGauge:
		f.gauge.WithLabelValues()
	default:
		f.histogram.WithLabelValues()
	}
}

// differs says how want differs from f, or "" when they are the same.
func (f *family) differs(want *family) string {
	switch {
	case f.kind != want.kind || !slices.Equal(f.labels, want.labels):
		return fmt.Sprintf("first a %s with labels %q, now a %s with labels %q", f.kind, f.labels, want.kind, want.labels)
	case f.help != want.help:
		return fmt.Sprintf("first with help %q, now %q", f.help, want.help)
	case !slices.Equal(f.buckets, want.buckets):
		return fmt.Sprintf("first with buckets %v, now %v", f.buckets, want.buckets)
	}
	return ""
}

// checkLabels returns labels, panicking when their number is not that of
// the family's labels.
func (f *family) checkLabels(labels []string) []string {
	if err := f.wrongLabels(labels); err != nil {
		panic(err)
	}
	return labels
}

// wrongLabels returns the *MetricError of label values that do not fit
// f's labels, or nil.
func (f *family) wrongLabels(labels []string) error {
	if len(labels) == len(f.labels) {
		return nil
	}
	// A copy, so that labels does not escape on the hot path.
	vals := append([]string(nil), labels...)
	return f.misuse(fmt.Sprintf("%d label values %q for the labels %q", len(vals), vals, f.labels))
}

func (f *family) misuse(reason string) *MetricError {
	return &MetricError{Name: f.name, Err: ErrMisuse, Reason: reason}
}

// metricProblem says why d cannot be a Prometheus metric, or "".
func metricProblem(d *converge.Metric) string {
	if !validName(d.Name, true) {
		return "the name must match [a-zA-Z_:][a-zA-Z0-9_:]*"
	}
	switch d.Kind {
	case converge.MetricCounter, converge.MetricGauge, converge.MetricHistogram:
	default:
		return fmt.Sprintf("unknown kind %d", d.Kind)
	}
	for i, l := range d.Labels {
		switch {
		case !validName(l, false) || strings.HasPrefix(l, "__"):
			return fmt.Sprintf("label %q must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __", l)
		case d.Kind == converge.MetricHistogram && l == "le":
			return `a histogram cannot have the label "le"`
		case slices.Contains(d.Labels[:i], l):
			return fmt.Sprintf("label %q is repeated", l)
		}
	}
	if len(d.Buckets) > 0 && d.Kind != converge.MetricHistogram {
		return fmt.Sprintf("a %s has no buckets", d.Kind)
	}
	return bucketsProblem(d.Buckets)
}

// bucketsProblem says why b are not histogram buckets, or "".
func bucketsProblem(b []float64) string {
	for i, v := range b {
		if math.IsNaN(v) {
			return "buckets must not be NaN"
		}
		if i > 0 && v <= b[i-1] {
			return fmt.Sprintf("buckets must be strictly ascending, got %v", b)
		}
	}
	return ""
}

// validName reports whether s is a classic Prometheus metric name (colon
// allowed) or label name.
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
			i > 0 && c >= '0' && c <= '9' || colon && c == ':'
		if !ok {
			return false
		}
	}
	return true
}
