package prometheus_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
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
	w, err := converge.NewWalker(converge.Config{Metrics: m})
	require.NoError(t, err)
	rep, err := w.Apply(t.Context(), g)
	require.Error(t, err)
	require.Len(t, rep.Items, 3)

	want := fmt.Sprintf(`
# HELP converge_walk_items_total %s
# TYPE converge_walk_items_total counter
converge_walk_items_total{kind="file",outcome="changed"} 2
converge_walk_items_total{kind="svc",outcome="failed"} 1
# HELP converge_walk_item_failures_total %s
# TYPE converge_walk_item_failures_total counter
converge_walk_item_failures_total{kind="svc",phase="apply"} 1
# HELP converge_walks_total %s
# TYPE converge_walks_total counter
converge_walks_total{mode="apply",result="failed"} 1
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
