package prometheus_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/prometheus"
)

// The descriptors of a walk-like loop: what a walk reports, in the shape
// the core's descriptors have, under names of this test's own.
var (
	loopItems = &converge.Metric{Name: "converge_loop_items_total", Help: "Items a walk finished, by outcome.",
		Kind: converge.MetricCounter, Labels: []string{"outcome"}}
	loopInFlight = &converge.Metric{Name: "converge_loop_items_in_flight", Help: "Items being processed.",
		Kind: converge.MetricGauge}
	loopWalks = &converge.Metric{Name: "converge_loop_walks_total", Help: "Walks finished, by mode and result.",
		Kind: converge.MetricCounter, Labels: []string{"mode", "result"}}
	loopWalkSeconds = &converge.Metric{Name: "converge_loop_walk_seconds", Help: "How long a walk took.",
		Kind: converge.MetricHistogram, Labels: []string{"mode"}}
)

// reportingWalker is a walk-like loop that knows only the converge.Metrics
// contract: it runs real walks and reports their progress events and
// their result to metrics.
func reportingWalker(t *testing.T, metrics converge.Metrics) *converge.Walker {
	t.Helper()
	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 2, Observer: converge.ObserverFunc(func(e converge.Event) {
		switch e.Kind {
		case converge.EventChecking:
			metrics.Add(loopInFlight, 1)
		case converge.EventDone, converge.EventFailed:
			metrics.Add(loopInFlight, -1)
			metrics.Add(loopItems, 1, e.Outcome.String())
		case converge.EventSkipped:
			metrics.Add(loopItems, 1, e.Outcome.String())
		}
	})})
	require.NoError(t, err)
	return w
}

func TestWalkLikeLoopIsScrapedThroughTheMetricsContract(t *testing.T) {
	m, reg := newRegistry(t, prometheus.Options{})
	require.NoError(t, m.Register(loopItems, loopInFlight, loopWalks, loopWalkSeconds))

	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "create", Goal: "x"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "keep", Value: "x", Goal: "x"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "broken", Goal: "x"}).FailAt(converge.PhaseApply, -1, nil).Node(), converge.Present, "create")
	g.Add((&convergetest.Item{Key: "after", Goal: "x"}).Node(), converge.Present, "broken")

	w := reportingWalker(t, m)
	rep, err := w.Apply(t.Context(), g)
	require.Error(t, err, "the broken item fails the walk")
	m.Add(loopWalks, 1, rep.Mode.String(), "failed")
	m.Observe(loopWalkSeconds, rep.Duration.Seconds(), rep.Mode.String())
	rep2, err := w.Apply(t.Context(), converge.NewGraph())
	require.NoError(t, err)
	m.Add(loopWalks, 1, rep2.Mode.String(), "ok")
	m.Observe(loopWalkSeconds, rep2.Duration.Seconds(), rep2.Mode.String())

	// The expected text follows from the report: one series per outcome
	// that occurred, each counting its items.
	byOutcome := map[string]int{}
	for _, it := range rep.Items {
		byOutcome[it.Outcome.String()]++
	}
	require.Len(t, rep.Items, 4)
	outcomes := make([]string, 0, len(byOutcome))
	for o := range byOutcome {
		outcomes = append(outcomes, o)
	}
	sort.Strings(outcomes)
	var want strings.Builder
	fmt.Fprintf(&want, "# HELP %s %s\n# TYPE %s counter\n", loopItems.Name, loopItems.Help, loopItems.Name)
	for _, o := range outcomes {
		fmt.Fprintf(&want, "%s{outcome=%q} %d\n", loopItems.Name, o, byOutcome[o])
	}
	fmt.Fprintf(&want, `# HELP converge_loop_items_in_flight Items being processed.
# TYPE converge_loop_items_in_flight gauge
converge_loop_items_in_flight 0
# HELP converge_loop_walks_total Walks finished, by mode and result.
# TYPE converge_loop_walks_total counter
converge_loop_walks_total{mode=%[1]q,result="failed"} 1
converge_loop_walks_total{mode=%[1]q,result="ok"} 1
`, rep.Mode.String())
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want.String()),
		loopItems.Name, loopInFlight.Name, loopWalks.Name))
	assert.Contains(t, outcomes, "changed")
	assert.Contains(t, outcomes, "unchanged")
	assert.Contains(t, outcomes, "failed")

	// The histogram: durations vary, their number does not.
	fams, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
		if f.GetName() == loopWalkSeconds.Name {
			require.Len(t, f.GetMetric(), 1)
			h := f.GetMetric()[0].GetHistogram()
			assert.Equal(t, uint64(2), h.GetSampleCount())
			assert.Len(t, h.GetBucket(), 40, "controller-runtime's buckets for a _seconds histogram")
		}
	}
	assert.Equal(t, []string{loopInFlight.Name, loopItems.Name, loopWalkSeconds.Name, loopWalks.Name}, names)
}
