package convergetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/convergekit/converge"
)

// Metrics is a converge.Metrics that records every measurement in memory,
// for tests that check what a walk, a reconciler, a plan runner or a
// controller reported: pass it as the Metrics of their configuration, then
// read the values back by metric name and label values.
//
// It checks the calls as a real adapter would and panics (with a message
// starting "convergetest: ") on misuse: a label count that differs from
// Metric.Labels, Add on a histogram, Set on a counter or a histogram,
// Observe on a counter or a gauge, a negative Add on a counter, or two
// different descriptors with one name. The zero value is ready; it is safe
// for concurrent use. Limits: it keeps every histogram observation, so it
// suits tests, not long-running programs.
type Metrics struct {
	mu     sync.Mutex
	series map[string]*Series
	descs  map[string]*converge.Metric
}

var _ converge.Metrics = (*Metrics)(nil)

// Series is the recorded state of one metric with one set of label values.
type Series struct {
	// Metric is the descriptor the values were reported with.
	Metric *converge.Metric
	// Labels are the label values, in the order of Metric.Labels.
	Labels []string
	// Value is a counter's or a gauge's value.
	Value float64
	// Observations are a histogram's values, in the order they came.
	Observations []float64
}

// String formats s as name{label="value",...} followed by its value, or by
// its number of observations for a histogram.
func (s Series) String() string {
	var b strings.Builder
	b.WriteString(s.Metric.Name)
	if len(s.Labels) > 0 {
		b.WriteByte('{')
		for i, v := range s.Labels {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=%q", s.Metric.Labels[i], v)
		}
		b.WriteByte('}')
	}
	if s.Metric.Kind == converge.MetricHistogram {
		fmt.Fprintf(&b, " count=%d", len(s.Observations))
	} else {
		fmt.Fprintf(&b, " %g", s.Value)
	}
	return b.String()
}

func seriesKey(name string, labels []string) string {
	return name + "\x00" + strings.Join(labels, "\x00")
}

// record finds or creates the series of m and labels after checking the
// call, and runs f on it under the lock.
func (r *Metrics) record(op string, m *converge.Metric, labels []string, f func(*Series)) {
	if m == nil {
		panic("convergetest: " + op + " with a nil *converge.Metric")
	}
	if len(labels) != len(m.Labels) {
		panic(fmt.Sprintf("convergetest: metric %q: %s with %d label values for labels %q", m.Name, op, len(labels), m.Labels))
	}
	ok := map[string][]converge.MetricKind{
		"Add":     {converge.MetricCounter, converge.MetricGauge},
		"Set":     {converge.MetricGauge},
		"Observe": {converge.MetricHistogram},
	}[op]
	if !slices.Contains(ok, m.Kind) {
		panic(fmt.Sprintf("convergetest: metric %q: %s on a %s", m.Name, op, m.Kind))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.series == nil {
		r.series = map[string]*Series{}
		r.descs = map[string]*converge.Metric{}
	}
	if d, seen := r.descs[m.Name]; seen && d != m && (d.Kind != m.Kind || !slices.Equal(d.Labels, m.Labels)) {
		panic(fmt.Sprintf("convergetest: metric %q declared twice, as a %s %q and as a %s %q", m.Name, d.Kind, d.Labels, m.Kind, m.Labels))
	}
	r.descs[m.Name] = m
	key := seriesKey(m.Name, labels)
	s := r.series[key]
	if s == nil {
		s = &Series{Metric: m, Labels: slices.Clone(labels)}
		r.series[key] = s
	}
	f(s)
}

// Add implements converge.Metrics.
func (r *Metrics) Add(m *converge.Metric, delta float64, labels ...string) {
	if m != nil && m.Kind == converge.MetricCounter && delta < 0 {
		panic(fmt.Sprintf("convergetest: metric %q: counter decreased by %g", m.Name, -delta))
	}
	r.record("Add", m, labels, func(s *Series) { s.Value += delta })
}

// Set implements converge.Metrics.
func (r *Metrics) Set(m *converge.Metric, value float64, labels ...string) {
	r.record("Set", m, labels, func(s *Series) { s.Value = value })
}

// Observe implements converge.Metrics.
func (r *Metrics) Observe(m *converge.Metric, value float64, labels ...string) {
	r.record("Observe", m, labels, func(s *Series) { s.Observations = append(s.Observations, value) })
}

func (r *Metrics) get(name string, labels []string) (Series, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.series[seriesKey(name, labels)]
	if !ok {
		return Series{}, false
	}
	c := *s
	c.Observations = slices.Clone(s.Observations)
	return c, true
}

// Value returns the value of the counter or gauge name with the given label
// values, and 0 when nothing was recorded for them.
func (r *Metrics) Value(name string, labels ...string) float64 {
	s, _ := r.get(name, labels)
	return s.Value
}

// Observations returns the values observed by the histogram name with the
// given label values, in order; nil when none.
func (r *Metrics) Observations(name string, labels ...string) []float64 {
	s, _ := r.get(name, labels)
	return s.Observations
}

// Has reports whether anything was recorded for name with the given label
// values.
func (r *Metrics) Has(name string, labels ...string) bool {
	_, ok := r.get(name, labels)
	return ok
}

// Series returns a copy of every recorded series, sorted by name, then by
// label values.
func (r *Metrics) Series() []Series {
	r.mu.Lock()
	out := make([]Series, 0, len(r.series))
	for _, s := range r.series {
		c := *s
		c.Labels = slices.Clone(s.Labels)
		c.Observations = slices.Clone(s.Observations)
		out = append(out, c)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Series) int {
		if c := strings.Compare(a.Metric.Name, b.Metric.Name); c != 0 {
			return c
		}
		return slices.Compare(a.Labels, b.Labels)
	})
	return out
}

// Reset forgets everything recorded.
func (r *Metrics) Reset() {
	r.mu.Lock()
	r.series, r.descs = nil, nil
	r.mu.Unlock()
}
