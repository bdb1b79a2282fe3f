package prometheus_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/prometheus"
)

// newRegistry returns a fresh Metrics registered on a fresh registry.
func newRegistry(t *testing.T, opts prometheus.Options) (*prometheus.Metrics, *prom.Registry) {
	t.Helper()
	m, err := prometheus.New(opts)
	require.NoError(t, err)
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(m)
	return m, reg
}

// panicError runs f and returns the *MetricError it panicked with.
func panicError(t *testing.T, f func()) (got *prometheus.MetricError) {
	t.Helper()
	defer func() {
		t.Helper()
		v := recover()
		require.NotNil(t, v, "no panic")
		err, ok := v.(error)
		require.True(t, ok, "panicked with %T, not an error", v)
		require.ErrorAs(t, err, &got)
	}()
	f()
	return nil
}

func TestCounterGaugeHistogramAreExposedWithHelpTypeLabelsAndValues(t *testing.T) {
	items := &converge.Metric{Name: "converge_test_items_total", Help: "Items processed.",
		Kind: converge.MetricCounter, Labels: []string{"kind", "outcome"}}
	running := &converge.Metric{Name: "converge_test_running", Help: "Walks running.",
		Kind: converge.MetricGauge, Labels: []string{"mode"}}
	took := &converge.Metric{Name: "converge_test_walk_seconds", Help: "How long a walk took.",
		Kind: converge.MetricHistogram, Labels: []string{"mode"}, Buckets: []float64{0.1, 1}}
	m, reg := newRegistry(t, prometheus.Options{})

	m.Add(items, 1, "file", "changed")
	m.Add(items, 2, "file", "changed")
	m.Add(items, 1, "file", "unchanged")
	m.Add(running, 3, "apply")
	m.Add(running, -1, "apply")
	m.Set(running, 7, "clean")
	m.Observe(took, 0.05, "apply")
	m.Observe(took, 0.5, "apply")
	m.Observe(took, 5, "apply")

	want := `
# HELP converge_test_items_total Items processed.
# TYPE converge_test_items_total counter
converge_test_items_total{kind="file",outcome="changed"} 3
converge_test_items_total{kind="file",outcome="unchanged"} 1
# HELP converge_test_running Walks running.
# TYPE converge_test_running gauge
converge_test_running{mode="apply"} 2
converge_test_running{mode="clean"} 7
# HELP converge_test_walk_seconds How long a walk took.
# TYPE converge_test_walk_seconds histogram
converge_test_walk_seconds_bucket{mode="apply",le="0.1"} 1
converge_test_walk_seconds_bucket{mode="apply",le="1"} 2
converge_test_walk_seconds_bucket{mode="apply",le="+Inf"} 3
converge_test_walk_seconds_sum{mode="apply"} 5.55
converge_test_walk_seconds_count{mode="apply"} 3
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
	require.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(want)),
		"the collector alone gives the same text")
}

func TestLabelValuesGoToLabelsInDescriptorOrder(t *testing.T) {
	// Labels not in alphabetical order: the values follow Labels, whatever
	// order the exposition prints the labels in.
	d := &converge.Metric{Name: "converge_test_order_total", Help: "Order.",
		Kind: converge.MetricCounter, Labels: []string{"outcome", "kind"}}
	m, reg := newRegistry(t, prometheus.Options{})
	m.Add(d, 1, "changed", "file")
	m.Add(d, 5, "file", "changed")

	want := `
# HELP converge_test_order_total Order.
# TYPE converge_test_order_total counter
converge_test_order_total{kind="file",outcome="changed"} 1
converge_test_order_total{kind="changed",outcome="file"} 5
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}

// TestTheLastSeriesIsFoundAgainOnlyForTheSameLabelValues checks the cache
// of the series a metric used last: a caller that reuses its slice with
// other values, alternating series, and a gauge and a histogram sharing
// nothing with the counter all land on their own series.
func TestTheLastSeriesIsFoundAgainOnlyForTheSameLabelValues(t *testing.T) {
	c := &converge.Metric{Name: "converge_test_cache_total", Help: "Cache.", Kind: converge.MetricCounter, Labels: []string{"kind"}}
	g := &converge.Metric{Name: "converge_test_cache_gauge", Help: "Cache.", Kind: converge.MetricGauge, Labels: []string{"kind"}}
	m, reg := newRegistry(t, prometheus.Options{})
	labels := []string{"file"}
	m.Add(c, 1, labels...)
	labels[0] = "container" // the caller's slice, reused
	m.Add(c, 2, labels...)
	m.Add(c, 4, "file")
	m.Add(c, 8, "file")
	m.Set(g, 3, "file")
	m.Set(g, 5, labels...)
	m.Add(g, 1, "file")

	want := `
# HELP converge_test_cache_total Cache.
# TYPE converge_test_cache_total counter
converge_test_cache_total{kind="container"} 2
converge_test_cache_total{kind="file"} 13
# HELP converge_test_cache_gauge Cache.
# TYPE converge_test_cache_gauge gauge
converge_test_cache_gauge{kind="container"} 5
converge_test_cache_gauge{kind="file"} 4
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}

func TestRegisterShowsUnlabelledMetricsAtZeroAndLabelledOnesOnFirstUse(t *testing.T) {
	count := &converge.Metric{Name: "converge_test_a_total", Help: "A.", Kind: converge.MetricCounter}
	gauge := &converge.Metric{Name: "converge_test_b", Help: "B.", Kind: converge.MetricGauge}
	hist := &converge.Metric{Name: "converge_test_c", Help: "C.", Kind: converge.MetricHistogram, Buckets: []float64{1}}
	labelled := &converge.Metric{Name: "converge_test_d_total", Help: "D.", Kind: converge.MetricCounter, Labels: []string{"kind"}}
	m, reg := newRegistry(t, prometheus.Options{})

	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Zero(t, n, "nothing before Register")

	require.NoError(t, m.Register(count, gauge, hist, labelled))
	want := `
# HELP converge_test_a_total A.
# TYPE converge_test_a_total counter
converge_test_a_total 0
# HELP converge_test_b B.
# TYPE converge_test_b gauge
converge_test_b 0
# HELP converge_test_c C.
# TYPE converge_test_c histogram
converge_test_c_bucket{le="1"} 0
converge_test_c_bucket{le="+Inf"} 0
converge_test_c_sum 0
converge_test_c_count 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
	n, err = testutil.GatherAndCount(reg, labelled.Name)
	require.NoError(t, err)
	assert.Zero(t, n, "a labelled metric has no series before its first label values")

	m.Add(labelled, 1, "file")
	n, err = testutil.GatherAndCount(reg, labelled.Name)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

// bucketBounds gathers the upper bounds of the histogram called name.
func bucketBounds(t *testing.T, reg prom.Gatherer, name string) []float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		require.Len(t, f.GetMetric(), 1)
		var bounds []float64
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		return bounds
	}
	require.Failf(t, "no such family", "%s", name)
	return nil
}

func TestHistogramDefaultBuckets(t *testing.T) {
	controllerRuntime := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45,
		0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10,
		15, 20, 25, 30, 40, 50, 60}
	tests := []struct {
		name    string
		opts    prometheus.Options
		metric  string
		buckets []float64
		want    []float64
	}{
		{name: "seconds use controller-runtime's", metric: "converge_test_seconds", want: controllerRuntime},
		{name: "others use DefBuckets", metric: "converge_test_bytes", want: prom.DefBuckets},
		{name: "options override both", opts: prometheus.Options{Buckets: []float64{1, 2}},
			metric: "converge_test_seconds", want: []float64{1, 2}},
		{name: "the descriptor's override options", opts: prometheus.Options{Buckets: []float64{1, 2}},
			metric: "converge_test_seconds", buckets: []float64{3}, want: []float64{3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newRegistry(t, tt.opts)
			m.Observe(&converge.Metric{Name: tt.metric, Help: "H.", Kind: converge.MetricHistogram, Buckets: tt.buckets}, 1)
			assert.Equal(t, tt.want, bucketBounds(t, reg, tt.metric))
		})
	}
}

func TestZeroMetricsIsReady(t *testing.T) {
	var m prometheus.Metrics
	d := &converge.Metric{Name: "converge_test_zero_total", Help: "Z.", Kind: converge.MetricCounter}
	m.Add(d, 2)
	want := `
# HELP converge_test_zero_total Z.
# TYPE converge_test_zero_total counter
converge_test_zero_total 2
`
	require.NoError(t, testutil.CollectAndCompare(&m, strings.NewReader(want)))
}

func TestNewRejectsBucketsNotAscending(t *testing.T) {
	for _, b := range [][]float64{{2, 1}, {1, 1}, {1, math.NaN()}} {
		_, err := prometheus.New(prometheus.Options{Buckets: b})
		require.ErrorIs(t, err, converge.ErrInvalidConfig, "%v", b)
		var ce *converge.ConfigError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "Buckets", ce.Field)
	}
}

func TestDescriptorsWithTheSameNameAndDefinitionShareSeries(t *testing.T) {
	a := &converge.Metric{Name: "converge_test_shared_total", Help: "S.", Kind: converge.MetricCounter, Labels: []string{"kind"}}
	b := *a // another pointer, the same definition
	m, reg := newRegistry(t, prometheus.Options{})
	m.Add(a, 1, "x")
	m.Add(&b, 2, "x")
	want := `
# HELP converge_test_shared_total S.
# TYPE converge_test_shared_total counter
converge_test_shared_total{kind="x"} 3
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}

func TestNameReusedDifferentlyIsAConflictNamingTheMetric(t *testing.T) {
	first := converge.Metric{Name: "converge_test_conflict_seconds", Help: "First.",
		Kind: converge.MetricHistogram, Labels: []string{"kind", "mode"}, Buckets: []float64{1, 2}}
	tests := []struct {
		name   string
		change func(d *converge.Metric)
	}{
		{"another kind", func(d *converge.Metric) { d.Kind = converge.MetricGauge; d.Buckets = nil }},
		{"fewer labels", func(d *converge.Metric) { d.Labels = []string{"kind"} }},
		{"labels in another order", func(d *converge.Metric) { d.Labels = []string{"mode", "kind"} }},
		{"another help", func(d *converge.Metric) { d.Help = "Second." }},
		{"other buckets", func(d *converge.Metric) { d.Buckets = []float64{1, 3} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newRegistry(t, prometheus.Options{})
			d1 := first
			m.Observe(&d1, 1, "a", "b")
			d2 := first
			d2.Labels = append([]string(nil), first.Labels...)
			tt.change(&d2)

			err := m.Register(&d2)
			require.ErrorIs(t, err, prometheus.ErrConflict)
			var me *prometheus.MetricError
			require.ErrorAs(t, err, &me)
			assert.Equal(t, first.Name, me.Name)

			got := panicError(t, func() { m.Add(&d2, 1, "a") })
			assert.ErrorIs(t, got, prometheus.ErrConflict)
			assert.Equal(t, first.Name, got.Name)

			m.Observe(&d1, 1, "a", "b") // the first declaration still works
			n, err := testutil.GatherAndCount(reg, first.Name)
			require.NoError(t, err)
			assert.Equal(t, 1, n)
		})
	}
}

func TestInvalidDescriptorIsRejectedNamingTheMetric(t *testing.T) {
	tests := []struct {
		name string
		d    *converge.Metric
	}{
		{"nil", nil},
		{"empty name", &converge.Metric{Kind: converge.MetricCounter}},
		{"dash in name", &converge.Metric{Name: "converge-test", Kind: converge.MetricCounter}},
		{"digit first", &converge.Metric{Name: "1converge", Kind: converge.MetricCounter}},
		{"no kind", &converge.Metric{Name: "converge_test_kind"}},
		{"unknown kind", &converge.Metric{Name: "converge_test_kind", Kind: 9}},
		{"reserved label", &converge.Metric{Name: "converge_test", Kind: converge.MetricCounter, Labels: []string{"__name"}}},
		{"colon in label", &converge.Metric{Name: "converge_test", Kind: converge.MetricCounter, Labels: []string{"a:b"}}},
		{"le on a histogram", &converge.Metric{Name: "converge_test", Kind: converge.MetricHistogram, Labels: []string{"le"}}},
		{"repeated label", &converge.Metric{Name: "converge_test", Kind: converge.MetricGauge, Labels: []string{"kind", "kind"}}},
		{"buckets on a counter", &converge.Metric{Name: "converge_test", Kind: converge.MetricCounter, Buckets: []float64{1}}},
		{"buckets descending", &converge.Metric{Name: "converge_test", Kind: converge.MetricHistogram, Buckets: []float64{2, 1}}},
		{"NaN bucket", &converge.Metric{Name: "converge_test", Kind: converge.MetricHistogram, Buckets: []float64{math.NaN()}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newRegistry(t, prometheus.Options{})
			err := m.Register(tt.d)
			require.ErrorIs(t, err, prometheus.ErrInvalidMetric)
			var me *prometheus.MetricError
			require.ErrorAs(t, err, &me)
			if tt.d != nil {
				assert.Equal(t, tt.d.Name, me.Name)
				if tt.d.Name != "" {
					assert.Contains(t, err.Error(), fmt.Sprintf("%q", tt.d.Name))
				}
			}
			got := panicError(t, func() { m.Add(tt.d, 1) })
			assert.ErrorIs(t, got, prometheus.ErrInvalidMetric)

			n, err := testutil.GatherAndCount(reg)
			require.NoError(t, err)
			assert.Zero(t, n, "an invalid descriptor leaves no metric behind")
		})
	}
}

func TestRegisterDeclaresTheValidDescriptorsAndJoinsTheErrors(t *testing.T) {
	ok := &converge.Metric{Name: "converge_test_ok", Help: "OK.", Kind: converge.MetricGauge}
	bad1 := &converge.Metric{Name: "converge-bad", Kind: converge.MetricGauge}
	bad2 := &converge.Metric{Name: "converge_test_ok", Help: "OK.", Kind: converge.MetricCounter}
	m, reg := newRegistry(t, prometheus.Options{})
	err := m.Register(bad1, ok, bad2)
	assert.ErrorIs(t, err, prometheus.ErrInvalidMetric)
	assert.ErrorIs(t, err, prometheus.ErrConflict)
	n, err := testutil.GatherAndCount(reg, ok.Name)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

func TestCallThatDoesNotFitTheMetricPanicsWithMisuse(t *testing.T) {
	counter := &converge.Metric{Name: "converge_test_c_total", Help: "C.", Kind: converge.MetricCounter, Labels: []string{"kind"}}
	gauge := &converge.Metric{Name: "converge_test_g", Help: "G.", Kind: converge.MetricGauge, Labels: []string{"kind"}}
	hist := &converge.Metric{Name: "converge_test_h_seconds", Help: "H.", Kind: converge.MetricHistogram, Labels: []string{"kind"}}
	tests := []struct {
		name string
		d    *converge.Metric
		call func(m *prometheus.Metrics)
	}{
		{"Set on a counter", counter, func(m *prometheus.Metrics) { m.Set(counter, 1, "x") }},
		{"Observe on a counter", counter, func(m *prometheus.Metrics) { m.Observe(counter, 1, "x") }},
		{"negative Add to a counter", counter, func(m *prometheus.Metrics) { m.Add(counter, -1, "x") }},
		{"NaN Add to a counter", counter, func(m *prometheus.Metrics) { m.Add(counter, math.NaN(), "x") }},
		{"too few label values", counter, func(m *prometheus.Metrics) { m.Add(counter, 1) }},
		{"too many label values", gauge, func(m *prometheus.Metrics) { m.Set(gauge, 1, "x", "y") }},
		{"label value not UTF-8", gauge, func(m *prometheus.Metrics) { m.Add(gauge, 1, "\xff") }},
		{"Observe on a gauge", gauge, func(m *prometheus.Metrics) { m.Observe(gauge, 1, "x") }},
		{"Add on a histogram", hist, func(m *prometheus.Metrics) { m.Add(hist, 1, "x") }},
		{"Set on a histogram", hist, func(m *prometheus.Metrics) { m.Set(hist, 1, "x") }},
		{"wrong label count on a histogram", hist, func(m *prometheus.Metrics) { m.Observe(hist, 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newRegistry(t, prometheus.Options{})
			got := panicError(t, func() { tt.call(m) })
			assert.ErrorIs(t, got, prometheus.ErrMisuse)
			assert.Equal(t, tt.d.Name, got.Name)
			msg := got.Error()
			assert.Equal(t, 1, strings.Count(msg, "prometheus: "), msg)
			assert.Equal(t, 1, strings.Count(msg, tt.d.Name), msg)
			n, err := testutil.GatherAndCount(reg, tt.d.Name)
			require.NoError(t, err)
			assert.Zero(t, n, "a misuse records nothing")
		})
	}
}

func TestGaugeAcceptsNegativeAdd(t *testing.T) {
	d := &converge.Metric{Name: "converge_test_g", Help: "G.", Kind: converge.MetricGauge}
	m, reg := newRegistry(t, prometheus.Options{})
	m.Add(d, -2)
	want := "# HELP converge_test_g G.\n# TYPE converge_test_g gauge\nconverge_test_g -2\n"
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}

func TestSeriesAreTheDistinctLabelValueSetsUsed(t *testing.T) {
	d := &converge.Metric{Name: "converge_test_series_total", Help: "S.", Kind: converge.MetricCounter,
		Labels: []string{"kind", "outcome"}}
	m, reg := newRegistry(t, prometheus.Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[[2]string]bool{}
	for range 5000 {
		lv := [2]string{fmt.Sprint("k", rng.IntN(20)), fmt.Sprint("o", rng.IntN(7))}
		seen[lv] = true
		m.Add(d, 1, lv[0], lv[1])
	}
	n, err := testutil.GatherAndCount(reg, d.Name)
	require.NoError(t, err)
	assert.Equal(t, len(seen), n)
	assert.Equal(t, float64(5000), sumCounter(t, reg, d.Name))
}

// sumCounter gathers the sum of every series of counter name.
func sumCounter(t *testing.T, reg prom.Gatherer, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, s := range f.GetMetric() {
				sum += s.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func TestConcurrentReportsDeclarationsAndScrapes(t *testing.T) {
	m, reg := newRegistry(t, prometheus.Options{})
	const workers, perWorker, descs = 8, 500, 5
	// Every worker uses its own pointers to the same definitions, so that
	// first uses and declarations race with each other and with scrapes.
	def := func(i int) *converge.Metric {
		return &converge.Metric{Name: fmt.Sprintf("converge_test_race_%d_total", i), Help: "R.",
			Kind: converge.MetricCounter, Labels: []string{"worker"}}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	scrapes := make(chan error, 1)
	go func() {
		var err error
		for {
			select {
			case <-stop:
				scrapes <- err
				return
			default:
			}
			if _, e := reg.Gather(); e != nil && err == nil {
				err = e
			}
		}
	}()
	for w := range workers {
		wg.Go(func() {
			mine := make([]*converge.Metric, descs)
			for i := range mine {
				mine[i] = def(i)
			}
			for i := range perWorker {
				m.Add(mine[i%descs], 1, fmt.Sprint(w%2))
			}
		})
	}
	wg.Wait()
	close(stop)
	require.NoError(t, <-scrapes)
	for i := range descs {
		assert.Equal(t, float64(workers*perWorker/descs), sumCounter(t, reg, def(i).Name))
		n, err := testutil.GatherAndCount(reg, def(i).Name)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
	}
}

func TestDescribeSendsNothingSoTheCollectorIsUnchecked(t *testing.T) {
	m, err := prometheus.New(prometheus.Options{})
	require.NoError(t, err)
	require.NoError(t, m.Register(&converge.Metric{Name: "converge_test_u", Help: "U.", Kind: converge.MetricGauge}))
	ch := make(chan *prom.Desc, 10)
	m.Describe(ch)
	close(ch)
	assert.Empty(t, ch)
}

func TestNameCollidingWithAnotherCollectorFailsGather(t *testing.T) {
	m, reg := newRegistry(t, prometheus.Options{})
	theirs := prom.NewCounter(prom.CounterOpts{Name: "converge_test_taken_total", Help: "Theirs."})
	reg.MustRegister(theirs)
	m.Add(&converge.Metric{Name: "converge_test_taken_total", Help: "Ours.", Kind: converge.MetricCounter}, 1)
	_, err := reg.Gather()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "converge_test_taken_total")
}

func TestMetricErrorUnwrapsToItsSentinel(t *testing.T) {
	err := error(&prometheus.MetricError{Name: "converge_x", Err: prometheus.ErrConflict, Reason: "r"})
	assert.True(t, errors.Is(err, prometheus.ErrConflict))
	assert.False(t, errors.Is(err, prometheus.ErrMisuse))
}

func TestReportingToAnExistingSeriesDoesNotAllocate(t *testing.T) {
	m, _ := newRegistry(t, prometheus.Options{})
	counter := &converge.Metric{Name: "converge_test_alloc_total", Help: "A.", Kind: converge.MetricCounter, Labels: []string{"kind", "outcome"}}
	gauge := &converge.Metric{Name: "converge_test_alloc", Help: "A.", Kind: converge.MetricGauge, Labels: []string{"kind"}}
	hist := &converge.Metric{Name: "converge_test_alloc_seconds", Help: "A.", Kind: converge.MetricHistogram, Labels: []string{"kind"}}
	m.Add(counter, 1, "file", "changed")
	m.Set(gauge, 1, "file")
	m.Observe(hist, 1, "file")
	allocs := testing.AllocsPerRun(100, func() {
		m.Add(counter, 1, "file", "changed")
		m.Set(gauge, 2, "file")
		m.Observe(hist, 0.5, "file")
	})
	assert.Zero(t, allocs)
}

func TestObserverRecordsIntoTheSeriesObserveUses(t *testing.T) {
	hist := &converge.Metric{Name: "converge_test_run_seconds", Help: "Runs.", Kind: converge.MetricHistogram,
		Labels: []string{"kind", "state"}, Buckets: []float64{0.1, 1}}
	m, reg := newRegistry(t, prometheus.Options{})
	labels := []string{"vm", "ready"}
	observe, err := m.Observer(hist, labels...)
	require.NoError(t, err)
	labels[1] = "gone" // the caller's slice, reused: the series stays resolved
	observe(0.05)
	observe(0.5)
	m.Observe(hist, 2, "vm", "ready")

	want := `
# HELP converge_test_run_seconds Runs.
# TYPE converge_test_run_seconds histogram
converge_test_run_seconds_bucket{kind="vm",state="ready",le="0.1"} 1
converge_test_run_seconds_bucket{kind="vm",state="ready",le="1"} 2
converge_test_run_seconds_bucket{kind="vm",state="ready",le="+Inf"} 3
converge_test_run_seconds_sum{kind="vm",state="ready"} 2.55
converge_test_run_seconds_count{kind="vm",state="ready"} 3
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}

func TestObserverOfWhatObserveRejectsIsAnError(t *testing.T) {
	counter := &converge.Metric{Name: "converge_test_oc_total", Help: "C.", Kind: converge.MetricCounter, Labels: []string{"kind"}}
	hist := &converge.Metric{Name: "converge_test_oh_seconds", Help: "H.", Kind: converge.MetricHistogram, Labels: []string{"kind"}}
	tests := []struct {
		name   string
		d      *converge.Metric
		labels []string
		want   error
	}{
		{"a counter", counter, []string{"x"}, prometheus.ErrMisuse},
		{"too few label values", hist, nil, prometheus.ErrMisuse},
		{"too many label values", hist, []string{"x", "y"}, prometheus.ErrMisuse},
		{"label value not UTF-8", hist, []string{"\xff"}, prometheus.ErrMisuse},
		{"an invalid name", &converge.Metric{Name: "bad name", Kind: converge.MetricHistogram}, nil, prometheus.ErrInvalidMetric},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newRegistry(t, prometheus.Options{})
			observe, err := m.Observer(tt.d, tt.labels...)
			assert.Nil(t, observe)
			var me *prometheus.MetricError
			require.ErrorAs(t, err, &me)
			assert.ErrorIs(t, err, tt.want)
			assert.Equal(t, tt.d.Name, me.Name)
			n, err := testutil.GatherAndCount(reg, tt.d.Name)
			require.NoError(t, err)
			assert.Zero(t, n, "an error creates no series")
		})
	}
}
