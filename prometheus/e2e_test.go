package prometheus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/prometheus"
)

// TestWalkIsScrapedWithItsItemsAndResult runs a real walk reporting into
// a Metrics registered on a pedantic registry, then checks the exposition
// text of the walk's families (names, help, types, labels, values) and that
// every family gathered is converge's.
func TestWalkIsScrapedWithItsItemsAndResult(t *testing.T) {
	m, err := prometheus.New(prometheus.Options{})
	require.NoError(t, err)
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))

	g := converge.NewGraph()
	a := &convergetest.Item{Key: "file:/a", Goal: "x"}
	b := &convergetest.Item{Key: "file:/b", Goal: "y"}
	bad := (&convergetest.Item{Key: "svc:c", Goal: "z"}).FailAt(converge.PhaseApply, -1, errors.New("boom"))
	g.Add(a.Node(), converge.Present)
	g.Add(b.Node(), converge.Present, "file:/a")
	g.Add(bad.Node(), converge.Present)
	w, err := converge.NewWalker(converge.WalkerConfig{Name: "edge", Metrics: m})
	require.NoError(t, err)
	rep, err := w.Apply(t.Context(), g)
	require.Error(t, err)
	require.Len(t, rep.Items, 3)

	want := fmt.Sprintf(`
# HELP converge_walk_items_total %s
# TYPE converge_walk_items_total counter
converge_walk_items_total{kind="file",outcome="changed",target="edge"} 2
converge_walk_items_total{kind="svc",outcome="failed",target="edge"} 1
# HELP converge_walk_item_failures_total %s
# TYPE converge_walk_item_failures_total counter
converge_walk_item_failures_total{kind="svc",phase="apply",target="edge"} 1
# HELP converge_walks_total %s
# TYPE converge_walks_total counter
converge_walks_total{mode="apply",result="error",target="edge"} 1
`, converge.MetricWalkItems.Help, converge.MetricWalkItemFailures.Help, converge.MetricWalks.Help)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"converge_walk_items_total", "converge_walk_item_failures_total", "converge_walks_total"))

	fams, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
		assert.True(t, strings.HasPrefix(f.GetName(), "converge_"), f.GetName())
		assert.NotEmpty(t, f.GetHelp(), f.GetName())
		assert.NotEmpty(t, f.GetMetric(), f.GetName())
	}
	assert.True(t, names["converge_walk_apply_duration_seconds"], "apply durations are observed")
	assert.True(t, names["converge_walk_duration_seconds"], "walk durations are observed")
}

// TestControllerRunIsScrapedWithItsStates runs a controller whose handler
// moves three objects from "new" to "ready", reporting into a Metrics on a
// pedantic registry, and checks the exposition text of its state families.
func TestControllerRunIsScrapedWithItsStates(t *testing.T) {
	m, err := prometheus.New(prometheus.Options{})
	require.NoError(t, err)
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))

	ready := make(chan string, 3)
	c, err := controller.New(controller.Config{
		Kind: "host", Workers: 2, Metrics: m,
		Handler: controller.HandlerFunc(func(_ context.Context, obj controller.Object) (controller.Result, error) {
			if obj.State == "new" {
				return controller.Transition("ready"), nil
			}
			ready <- obj.Key
			return controller.NoChange(), nil
		}),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	for _, k := range []string{"h1", "h2", "h3"} {
		require.NoError(t, c.Add(ctx, k, "new", nil))
	}
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	for range 3 {
		<-ready
	}
	cancel()
	require.NoError(t, <-stopped)

	want := fmt.Sprintf(`
# HELP converge_controller_objects %s
# TYPE converge_controller_objects gauge
converge_controller_objects{controller="host",state="new"} 0
converge_controller_objects{controller="host",state="ready"} 3
# HELP converge_controller_state_entered_total %s
# TYPE converge_controller_state_entered_total counter
converge_controller_state_entered_total{controller="host",state="new"} 3
converge_controller_state_entered_total{controller="host",state="ready"} 3
# HELP converge_controller_state_exited_total %s
# TYPE converge_controller_state_exited_total counter
converge_controller_state_exited_total{controller="host",state="new"} 3
`, controller.MetricObjects.Help, controller.MetricStateEntered.Help, controller.MetricStateExited.Help)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"converge_controller_objects", "converge_controller_state_entered_total", "converge_controller_state_exited_total"))
	n, err := testutil.GatherAndCount(reg, "converge_controller_handler_duration_seconds")
	require.NoError(t, err)
	assert.Equal(t, 2, n, "handler durations per state: new and ready")

	fams, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			key := f.GetName()
			for _, l := range s.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = s.GetCounter().GetValue() + s.GetGauge().GetValue()
		}
	}
	assert.GreaterOrEqual(t, got["converge_controller_reconciles_total,controller=host,result=success"], 3.0,
		"the three transitions at least (the last runs may end with the controller)")
	assert.NotContains(t, got, "converge_controller_reconciles_total,controller=host,result=error")
	assert.InDelta(t, float64(time.Now().Unix()), got["converge_controller_last_success_timestamp_seconds,controller=host"], 60,
		"the last success is a Unix time in seconds")
}

// TestControllerDurationsAreAllScrapedWhileItIdles runs a controller on
// its own, whose workers hold their runs' figures and hand them over in
// batches, through hundreds of runs in two states: once it idles, before
// Run returns, a scrape counts every run in its state's handler
// durations, in the queue durations and in the reconciles.
func TestControllerDurationsAreAllScrapedWhileItIdles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := prometheus.New(prometheus.Options{})
		require.NoError(t, err)
		reg := prom.NewPedanticRegistry()
		require.NoError(t, reg.Register(m))
		c, err := controller.New(controller.Config{
			Kind: "host", Workers: 3, Metrics: m, Resync: time.Hour,
			Handler: controller.HandlerFunc(func(_ context.Context, obj controller.Object) (controller.Result, error) {
				time.Sleep(time.Microsecond)
				if obj.State == "new" {
					return controller.Transition("ready"), nil
				}
				return controller.NoChange(), nil
			}),
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		const n = 201
		for i := range n {
			require.NoError(t, c.Add(ctx, fmt.Sprintf("h%03d", i), "new", nil))
		}
		stopped := make(chan error, 1)
		go func() { stopped <- c.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()

		fams, err := reg.Gather()
		require.NoError(t, err)
		counts := map[string]uint64{}
		for _, f := range fams {
			for _, s := range f.GetMetric() {
				key := f.GetName()
				for _, l := range s.GetLabel() {
					key += "," + l.GetValue()
				}
				counts[key] = s.GetHistogram().GetSampleCount() + uint64(s.GetCounter().GetValue())
			}
		}
		assert.Equal(t, uint64(n), counts["converge_controller_handler_duration_seconds,host,new"])
		assert.Equal(t, uint64(n), counts["converge_controller_handler_duration_seconds,host,ready"])
		assert.Equal(t, uint64(2*n), counts["converge_controller_queue_duration_seconds,host"])
		assert.Equal(t, uint64(2*n), counts["converge_controller_reconciles_total,host,success"])
		cancel()
		require.NoError(t, <-stopped)
	})
}
