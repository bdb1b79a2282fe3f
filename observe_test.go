package converge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines decodes the JSON log lines written to s.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

// withMsg returns the log lines whose message is msg.
func withMsg(lines []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

func debugLogger(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestIDKindIsTheShortPrefixBeforeTheColon(t *testing.T) {
	for id, want := range map[converge.ID]string{
		"file:/etc/hostname":                      "file",
		"container:web/app":                       "container",
		"docker-project:web":                      "docker-project",
		"configkey:/boot/c.txt:a=b":               "configkey",
		"item-00001":                              "item",
		":empty":                                  "item",
		"/etc/some path:with colon":               "item",
		"averyveryverylongprefixthatisnotakind:x": "item",
	} {
		assert.Equal(t, want, id.Kind(), "ID %q", id)
	}
}

// metricsGraph is a walk with one changed, one unchanged and one failed
// item, and one item waiting on the failed one.
func metricsGraph() *converge.Graph {
	changed := &convergetest.Item{Key: "file:/a", Goal: "x", Latency: 2 * time.Second}
	unchanged := &convergetest.Item{Key: "file:/b", Value: "y", Goal: "y"}
	failed := (&convergetest.Item{Key: "container:web", Goal: "up"}).FailAt(converge.PhaseApply, -1, nil)
	waiting := &convergetest.Item{Key: "after-web", Goal: "z"}
	g := converge.NewGraph()
	g.Add(changed.Node(), converge.Present)
	g.Add(unchanged.Node(), converge.Present)
	g.Add(failed.Node(), converge.Present)
	g.Add(waiting.Node(), converge.Present, failed.Key)
	return g
}

func TestWalkReportsItemsByKindAndOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &convergetest.Metrics{}
		w, err := converge.NewWalker(converge.WalkerConfig{Metrics: m})
		require.NoError(t, err)
		_, err = w.Apply(context.Background(), metricsGraph())
		require.Error(t, err)

		items := converge.MetricWalkItems.Name
		assert.Equal(t, 1.0, m.Value(items, "", "file", "changed"))
		assert.Equal(t, 1.0, m.Value(items, "", "file", "unchanged"))
		assert.Equal(t, 1.0, m.Value(items, "", "container", "failed"))
		assert.Equal(t, 1.0, m.Value(items, "", "item", "waiting"))
		assert.Equal(t, 1.0, m.Value(converge.MetricWalkItemFailures.Name, "", "container", "apply"))
		assert.Equal(t, []float64{2}, m.Observations(converge.MetricWalkApplyDuration.Name, "", "file"))
		assert.Equal(t, []float64{0}, m.Observations(converge.MetricWalkApplyDuration.Name, "", "container"), "a failed Apply is observed too")
		assert.Equal(t, 1.0, m.Value(converge.MetricWalks.Name, "", "apply", "error"))
		assert.Equal(t, []float64{2}, m.Observations(converge.MetricWalkDuration.Name, "", "apply"))
		for _, s := range m.Series() {
			for _, v := range s.Labels {
				assert.NotContains(t, v, "/", "%s: no item ID in a label", s)
			}
		}

		m.Reset()
		_, err = w.ApplyDry(context.Background(), metricsGraph())
		require.Error(t, err)
		assert.Equal(t, 1.0, m.Value(items, "", "file", "would-change"))
		assert.Equal(t, 1.0, m.Value(converge.MetricWalks.Name, "", "apply-dry", "error"))
	})
}

func TestWalkReportsAnInterruptedWalk(t *testing.T) {
	m := &convergetest.Metrics{}
	w, err := converge.NewWalker(converge.WalkerConfig{Metrics: m})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "file:/a", Goal: "x"}).Node(), converge.Present)
	_, err = w.Apply(ctx, g)
	require.ErrorIs(t, err, converge.ErrNotRun)
	assert.Equal(t, 1.0, m.Value(converge.MetricWalkItems.Name, "", "file", "not-run"))
	assert.Equal(t, 1.0, m.Value(converge.MetricWalks.Name, "", "apply", "interrupted"))
}

func TestAllMetricsFollowPrometheusNaming(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range converge.AllMetrics() {
		assert.False(t, seen[d.Name], "%s declared twice", d.Name)
		seen[d.Name] = true
		assert.True(t, strings.HasPrefix(d.Name, "converge_"), d.Name)
		assert.NotEmpty(t, d.Help, d.Name)
		switch d.Kind {
		case converge.MetricCounter:
			assert.True(t, strings.HasSuffix(d.Name, "_total"), d.Name)
		case converge.MetricHistogram:
			assert.True(t, strings.HasSuffix(d.Name, "_seconds"), d.Name)
		case converge.MetricGauge:
			assert.False(t, strings.HasSuffix(d.Name, "_total"), d.Name)
		default:
			t.Errorf("%s: kind %d", d.Name, d.Kind)
		}
		for _, l := range d.Labels {
			assert.NotContains(t, []string{"id", "item", "key", "plan"}, l, "%s: unbounded label", d.Name)
		}
	}
}

func TestWalkLogsFailuresAndSummaryWithoutStates(t *testing.T) {
	var buf syncBuffer
	w, err := converge.NewWalker(converge.WalkerConfig{Logger: debugLogger(&buf)})
	require.NoError(t, err)
	secret := (&convergetest.Item{Key: "file:/etc/token", Value: "s3cret-old", Goal: "s3cret-new"}).FailAt(converge.PhaseApply, -1, nil)
	plain := &convergetest.Item{Key: "file:/etc/motd", Goal: "hello"}
	g := converge.NewGraph()
	g.Add(secret.Node(), converge.Present)
	g.Add(plain.Node(), converge.Present)
	rep, err := w.Apply(context.Background(), g)
	require.Error(t, err)

	assert.NotContains(t, buf.String(), "s3cret", "states never reach the log")
	lines := buf.lines(t)
	failed := withMsg(lines, "item failed")
	require.Len(t, failed, 1)
	assert.Equal(t, "WARN", failed[0]["level"])
	assert.Equal(t, "file:/etc/token", failed[0]["item"])
	assert.Equal(t, string(rep.Walk), failed[0]["walk"])
	assert.Equal(t, "apply", failed[0]["phase"])
	assert.Equal(t, "failed", failed[0]["outcome"])
	assert.Contains(t, failed[0]["error"], "injected")

	changed := withMsg(lines, "item changed")
	require.Len(t, changed, 1)
	assert.Equal(t, "file:/etc/motd", changed[0]["item"])

	done := withMsg(lines, "walk finished")
	require.Len(t, done, 1)
	assert.Equal(t, "INFO", done[0]["level"])
	assert.Equal(t, string(rep.Walk), done[0]["walk"])
	assert.Equal(t, "failed", done[0]["result"])
	assert.EqualValues(t, 1, done[0]["changed"])
	assert.EqualValues(t, 1, done[0]["failed"])
}

func TestReconcilerReportsAFailedThenASucceededPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &convergetest.Metrics{}
		var buf syncBuffer
		item := (&convergetest.Item{Key: "file:/app", Value: "s3cret-0"}).FailAt(converge.PhaseApply, 1, nil)
		r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
			Name: "device",
			Build: func(_ context.Context, target string) ([]converge.TargetStage, error) {
				item.Goal = target
				g := converge.NewGraph()
				g.Add(item.Node(), converge.Present)
				return []converge.TargetStage{{Name: "app", Graph: g}}, nil
			},
			Walk:    converge.WalkerConfig{Metrics: m, Logger: debugLogger(&buf)},
			Backoff: converge.Backoff{Base: 10 * time.Second},
		})
		require.NoError(t, err)
		var ev events
		r.Subscribe(ev.add)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		require.NoError(t, r.SetTarget(ctx, "s3cret-1"))

		synctest.Wait()
		require.Len(t, ev.of(converge.TargetPassFailed), 1)
		assert.Equal(t, 1.0, m.Value(converge.MetricTargetPasses.Name, "device", "error"))
		assert.Equal(t, 1.0, m.Value(converge.MetricTargetFailures.Name, "device"))
		assert.Equal(t, 10.0, m.Value(converge.MetricTargetBackoff.Name, "device"))
		assert.Equal(t, 1.0, m.Value(converge.MetricTargetRevision.Name, "device"))
		assert.Equal(t, 0.0, m.Value(converge.MetricTargetLocked.Name, "device"))
		assert.True(t, m.Has(converge.MetricTargetLocked.Name, "device"))
		assert.False(t, m.Has(converge.MetricTargetLastSuccess.Name, "device"), "no success yet")

		time.Sleep(10 * time.Second) // the backoff, in the bubble's clock
		synctest.Wait()
		require.Len(t, ev.of(converge.TargetPassFinished), 1)
		assert.Equal(t, 1.0, m.Value(converge.MetricTargetPasses.Name, "device", "success"))
		assert.Equal(t, float64(time.Now().UnixNano())/1e9, m.Value(converge.MetricTargetLastSuccess.Name, "device"))
		assert.Equal(t, 0.0, m.Value(converge.MetricTargetFailures.Name, "device"))
		assert.Equal(t, 0.0, m.Value(converge.MetricTargetBackoff.Name, "device"))
		assert.Len(t, m.Observations(converge.MetricTargetPassDuration.Name, "device"), 2)
		assert.Equal(t, 2.0, m.Value(converge.MetricWalks.Name, "device", "apply", "success"), "the walks (apply, then check) report through the same Metrics")

		cancel()
		require.NoError(t, <-done)

		assert.NotContains(t, buf.String(), "s3cret")
		lines := buf.lines(t)
		failed := withMsg(lines, "pass failed")
		require.Len(t, failed, 1)
		assert.Equal(t, "WARN", failed[0]["level"])
		assert.Equal(t, "device", failed[0]["target"])
		assert.EqualValues(t, 1, failed[0]["revision"])
		assert.NotEmpty(t, failed[0]["error"])
		itemFailed := withMsg(lines, "item failed")
		require.Len(t, itemFailed, 1)
		assert.Equal(t, "device", itemFailed[0]["target"], "walk lines name the reconciler")
		assert.EqualValues(t, 1, itemFailed[0]["revision"])
		require.Len(t, withMsg(lines, "pass finished"), 1)
	})
}

func TestTwoReconcilersAreToldApartByTheirName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &convergetest.Metrics{}
		ctx, cancel := context.WithCancel(context.Background())
		var done []chan error
		for _, name := range []string{"edge", "core"} {
			item := &convergetest.Item{Key: converge.ID("file:/" + name)}
			if name == "core" {
				item.FailAt(converge.PhaseApply, -1, nil)
			}
			r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
				Name: name,
				Build: func(_ context.Context, target string) ([]converge.TargetStage, error) {
					item.Goal = target
					g := converge.NewGraph()
					g.Add(item.Node(), converge.Present)
					return []converge.TargetStage{{Name: "app", Graph: g}}, nil
				},
				Walk:    converge.WalkerConfig{Metrics: m},
				Backoff: converge.Backoff{Base: time.Hour},
			})
			require.NoError(t, err)
			d := make(chan error)
			go func() { d <- r.Run(ctx) }()
			done = append(done, d)
			require.NoError(t, r.SetTarget(ctx, "v1"))
		}
		synctest.Wait()

		assert.Equal(t, 1.0, m.Value(converge.MetricTargetPasses.Name, "edge", "success"))
		assert.Equal(t, 1.0, m.Value(converge.MetricTargetPasses.Name, "core", "error"))
		assert.True(t, m.Has(converge.MetricTargetLastSuccess.Name, "edge"))
		assert.False(t, m.Has(converge.MetricTargetLastSuccess.Name, "core"), "a reconciler that never succeeded has no last success")
		assert.Equal(t, 1.0, m.Value(converge.MetricWalks.Name, "core", "apply", "error"))
		assert.Equal(t, 0.0, m.Value(converge.MetricWalks.Name, "edge", "apply", "error"), "the walks of one reconciler are not counted under the other")
		assert.Equal(t, 1.0, m.Value(converge.MetricWalkItems.Name, "core", "file", "failed"))
		assert.Equal(t, 1.0, m.Value(converge.MetricWalkItems.Name, "edge", "file", "changed"))
		for _, s := range m.Series() {
			if s.Metric.Labels[0] == "target" {
				assert.Contains(t, []string{"edge", "core"}, s.Labels[0], "%s carries the reconciler's name", s)
			}
		}
		cancel()
		for _, d := range done {
			require.NoError(t, <-d)
		}
	})
}

func TestNameMustBeAShortLabelValue(t *testing.T) {
	build := func(context.Context, string) ([]converge.TargetStage, error) { return nil, nil }
	for _, name := range []string{"a/b", "has space", "ünicode", strings.Repeat("x", 64)} {
		_, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{Name: name, Build: build})
		var ce *converge.ConfigError
		require.ErrorAs(t, err, &ce, "TargetReconcilerConfig.Name %q", name)
		assert.Equal(t, "Name", ce.Field)
		assert.ErrorIs(t, err, converge.ErrInvalidConfig)

		_, err = converge.NewWalker(converge.WalkerConfig{Name: name})
		require.ErrorAs(t, err, &ce, "WalkerConfig.Name %q", name)
		assert.Equal(t, "Name", ce.Field)
	}
	for _, name := range []string{"", "edge-1", "site_a.rack.2", strings.Repeat("x", 63)} {
		_, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{Name: name, Build: build})
		assert.NoError(t, err, "TargetReconcilerConfig.Name %q", name)
		_, err = converge.NewWalker(converge.WalkerConfig{Name: name})
		assert.NoError(t, err, "WalkerConfig.Name %q", name)
	}
	_, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{Name: "edge", Build: build, Walk: converge.WalkerConfig{Name: "a/b"}})
	assert.NoError(t, err, "Walk.Name is replaced by Name, so it is not checked")
}

func TestReconcilerReportsALockedPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &convergetest.Metrics{}
		d := newDevice()
		d.app.setLocked(true)
		r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[spec]{
			Build: d.build, Walk: converge.WalkerConfig{Metrics: m}, Backoff: converge.Backoff{Base: time.Minute},
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		require.NoError(t, r.SetTarget(ctx, spec{Host: "h", App: "a"}))
		synctest.Wait()
		assert.Equal(t, 1.0, m.Value(converge.MetricTargetLocked.Name, converge.TargetDefaultName))
		d.app.setLocked(false)
		require.NoError(t, r.SetTarget(ctx, spec{Host: "h", App: "b"}))
		synctest.Wait()
		assert.Equal(t, 0.0, m.Value(converge.MetricTargetLocked.Name, converge.TargetDefaultName))
		assert.Equal(t, 2.0, m.Value(converge.MetricTargetRevision.Name, converge.TargetDefaultName))
		cancel()
		require.NoError(t, <-done)
	})
}

// countMetrics counts calls; unlike MetricsNop, the walk cannot skip it.
type countMetrics struct{ n atomic.Int64 }

func (c *countMetrics) Add(*converge.Metric, float64, ...string)     { c.n.Add(1) }
func (c *countMetrics) Set(*converge.Metric, float64, ...string)     { c.n.Add(1) }
func (c *countMetrics) Observe(*converge.Metric, float64, ...string) { c.n.Add(1) }

func TestWalkMetricsAllocateNothingPerItem(t *testing.T) {
	const n = 2000
	g := converge.NewGraph()
	for k := range n {
		g.Add((&convergetest.Item{Key: converge.ID(fmt.Sprintf("file:/%d", k)), Value: "v", Goal: "v"}).Node(), converge.Present)
	}
	allocs := func(cfg converge.WalkerConfig) float64 {
		w, err := converge.NewWalker(cfg)
		require.NoError(t, err)
		_, err = w.Apply(context.Background(), g) // compiles the graph and its kinds
		require.NoError(t, err)
		return testing.AllocsPerRun(5, func() { _, _ = w.Apply(context.Background(), g) })
	}
	var c countMetrics
	without, with := allocs(converge.WalkerConfig{}), allocs(converge.WalkerConfig{Metrics: &c})
	assert.Positive(t, c.n.Load(), "the metrics were called")
	assert.Less(t, c.n.Load(), int64(7*10), "7 walks of %d converged items call Metrics a few times each, not once per item", n)
	assert.Less(t, with-without, float64(n)/20, "allocations per walk: %v without metrics, %v with", without, with)
}

func TestReconcilerCountsAPreemptedPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &convergetest.Metrics{}
		var buf syncBuffer
		d := newDevice()
		d.app.latency = 10 * time.Second
		r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[spec]{
			Build: d.build, Walk: converge.WalkerConfig{Metrics: m, Logger: debugLogger(&buf)},
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		require.NoError(t, r.SetTarget(ctx, spec{Host: "h", App: "a"}))
		synctest.Wait() // the app applies for 10s
		require.NoError(t, r.SetTarget(ctx, spec{Host: "h", App: "b"}))
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, 1.0, m.Value(converge.MetricTargetPasses.Name, converge.TargetDefaultName, "preempted"))
		assert.Equal(t, 1.0, m.Value(converge.MetricTargetPasses.Name, converge.TargetDefaultName, "success"))
		assert.Equal(t, 0.0, m.Value(converge.MetricTargetPasses.Name, converge.TargetDefaultName, "error"), "a preempted pass is no failure")
		assert.Equal(t, 2.0, m.Value(converge.MetricTargetRevision.Name, converge.TargetDefaultName))
		cancel()
		require.NoError(t, <-done)
		pre := withMsg(buf.lines(t), "pass preempted")
		require.Len(t, pre, 1)
		assert.EqualValues(t, 1, pre[0]["revision"])
	})
}

// slowRevision is a Metrics that takes a second, in the bubble's clock, to
// record a new target revision, so that other goroutines run in between.
type slowRevision struct{ *convergetest.Metrics }

func (m slowRevision) Set(metric *converge.Metric, value float64, labels ...string) {
	if metric == converge.MetricTargetRevision {
		time.Sleep(time.Second)
	}
	m.Metrics.Set(metric, value, labels...)
}

// TestTargetSetIsReportedBeforeItsPass: the metrics SetTarget resets (the
// failures in a row, the backoff) are reset before a pass of the new
// target can report, however slowly they are recorded: a pass that fails
// at once leaves its failure counted.
func TestTargetSetIsReportedBeforeItsPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &convergetest.Metrics{}
		item := (&convergetest.Item{Key: "file:/app", Value: "v0"}).FailAt(converge.PhaseApply, 1, nil)
		r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
			Name: "device",
			Build: func(_ context.Context, target string) ([]converge.TargetStage, error) {
				item.Goal = target
				g := converge.NewGraph()
				g.Add(item.Node(), converge.Present)
				return []converge.TargetStage{{Name: "app", Graph: g}}, nil
			},
			Walk:    converge.WalkerConfig{Metrics: slowRevision{m}},
			Backoff: converge.Backoff{Base: 10 * time.Second},
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		require.NoError(t, r.SetTarget(ctx, "v1"))
		synctest.Wait()
		assert.Equal(t, 1.0, m.Value(converge.MetricTargetPasses.Name, "device", "error"))
		assert.Equal(t, 1.0, m.Value(converge.MetricTargetFailures.Name, "device"))
		assert.Equal(t, 10.0, m.Value(converge.MetricTargetBackoff.Name, "device"))
		cancel()
		require.NoError(t, <-done)
	})
}
