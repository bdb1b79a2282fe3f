package convergetest_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

var (
	testCounter = &converge.Metric{Name: "t_total", Kind: converge.MetricCounter, Labels: []string{"a"}}
	testGauge   = &converge.Metric{Name: "t_gauge", Kind: converge.MetricGauge}
	testHist    = &converge.Metric{Name: "t_seconds", Kind: converge.MetricHistogram, Labels: []string{"a"}}
)

func TestMetricsRecordsValuesPerLabelValues(t *testing.T) {
	var m convergetest.Metrics
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { m.Add(testCounter, 1, "x") })
	}
	wg.Wait()
	m.Add(testCounter, 2, "y")
	m.Add(testGauge, 5)
	m.Add(testGauge, -2)
	m.Observe(testHist, 0.5, "x")
	m.Observe(testHist, 1.5, "x")

	assert.Equal(t, 10.0, m.Value("t_total", "x"))
	assert.Equal(t, 2.0, m.Value("t_total", "y"))
	assert.Equal(t, 0.0, m.Value("t_total", "z"))
	assert.False(t, m.Has("t_total", "z"))
	assert.Equal(t, 3.0, m.Value("t_gauge"))
	m.Set(testGauge, 7)
	assert.Equal(t, 7.0, m.Value("t_gauge"))
	assert.Equal(t, []float64{0.5, 1.5}, m.Observations("t_seconds", "x"))

	var got []string
	for _, s := range m.Series() {
		got = append(got, s.String())
	}
	assert.Equal(t, []string{`t_gauge 7`, `t_seconds{a="x"} count=2`, `t_total{a="x"} 10`, `t_total{a="y"} 2`}, got)
	m.Reset()
	assert.Empty(t, m.Series())
}

func TestMetricsPanicsOnMisuse(t *testing.T) {
	for name, f := range map[string]func(m *convergetest.Metrics){
		"label count":       func(m *convergetest.Metrics) { m.Add(testCounter, 1) },
		"counter decreases": func(m *convergetest.Metrics) { m.Add(testCounter, -1, "x") },
		"set on a counter":  func(m *convergetest.Metrics) { m.Set(testCounter, 1, "x") },
		"add to histogram":  func(m *convergetest.Metrics) { m.Add(testHist, 1, "x") },
		"observe a gauge":   func(m *convergetest.Metrics) { m.Observe(testGauge, 1) },
		"nil metric":        func(m *convergetest.Metrics) { m.Add(nil, 1) },
		"declared twice": func(m *convergetest.Metrics) {
			m.Add(testCounter, 1, "x")
			m.Add(&converge.Metric{Name: "t_total", Kind: converge.MetricGauge, Labels: []string{"a"}}, 1, "x")
		},
	} {
		t.Run(name, func(t *testing.T) {
			var m convergetest.Metrics
			assert.Panics(t, func() { f(&m) })
		})
	}
}

func TestMetricsTakeEveryCoreMetric(t *testing.T) {
	var m convergetest.Metrics
	for _, d := range converge.AllMetrics() {
		labels := make([]string, len(d.Labels))
		require.NotPanics(t, func() {
			if d.Kind == converge.MetricHistogram {
				m.Observe(d, 1, labels...)
			} else {
				m.Add(d, 1, labels...)
			}
		}, d.Name)
	}
	assert.Len(t, m.Series(), len(converge.AllMetrics()))
}
