package prometheus_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/prometheus"
)

// readmeAlerts returns the section "Alerts an operator writes" of the
// operating guide (docs/operating.md) and its YAML block.
func readmeAlerts(t *testing.T) (section, block string) {
	t.Helper()
	b, err := os.ReadFile("../docs/operating.md")
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "## Alerts an operator writes")
	require.NotEqual(t, -1, i, "docs/operating.md has no section on alerts")
	s = s[i:]
	if j := strings.Index(s[1:], "\n## "); j != -1 {
		section = s[:j+1]
	}
	i = strings.Index(s, "```yaml\n")
	require.NotEqual(t, -1, i, "the section has no YAML block")
	s = s[i+len("```yaml\n"):]
	j := strings.Index(s, "```")
	require.NotEqual(t, -1, j)
	return section, s[:j]
}

// TestOperatingAlertsNameRealMetrics gives every metric the root package and
// the controller report one series, gathers them from a registry, and
// checks that each metric the operating guide's alert rules name is gathered, and
// that each label they match, group by or print belongs to one of the
// metrics the rule names. It fails when a metric or a label is renamed
// and the rules are not.
func TestOperatingAlertsNameRealMetrics(t *testing.T) {
	m, err := prometheus.New(prometheus.Options{})
	require.NoError(t, err)
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	labelsOf := map[string][]string{}
	for _, d := range append(converge.AllMetrics(), controller.AllMetrics()...) {
		values := make([]string, len(d.Labels))
		for i := range values {
			values[i] = "x"
		}
		switch d.Kind {
		case converge.MetricHistogram:
			m.Observe(d, 1, values...)
		default:
			m.Add(d, 1, values...)
		}
	}
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		labelsOf[f.GetName()] = labels
	}

	section, rules := readmeAlerts(t)
	metricName := regexp.MustCompile(`\bconverge_[a-z_]+\b`)
	// family is the metric a series name belongs to: a histogram's
	// buckets, sum and count are its own.
	family := func(n string) string {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f, ok := strings.CutSuffix(n, suffix); ok {
				if _, known := labelsOf[f]; known {
					return f
				}
			}
		}
		return n
	}
	for _, n := range metricName.FindAllString(section, -1) {
		assert.Contains(t, labelsOf, family(n), "the section names %s, which the loops do not report", n)
	}
	exprs := regexp.MustCompile(`(?s)expr: (\|\n.*?|[^\n]*\n)\s+(?:for|annotations):`).FindAllStringSubmatch(rules, -1)
	summaries := regexp.MustCompile(`summary: ([^\n]*)`).FindAllStringSubmatch(rules, -1)
	require.Len(t, exprs, 9, "nine rules")
	require.Len(t, summaries, 9)
	for i, e := range exprs {
		expr := e[1]
		names := metricName.FindAllString(expr, -1)
		require.NotEmpty(t, names, "rule %d names no metric", i+1)
		var ruleLabels []string
		for _, n := range names {
			labels, ok := labelsOf[family(n)]
			if assert.True(t, ok, "rule %d: %s is not a metric the loops report", i+1, n) {
				ruleLabels = append(ruleLabels, labels...)
			}
			if strings.HasSuffix(n, "_bucket") {
				ruleLabels = append(ruleLabels, "le") // a bucket's bound
			}
		}
		var used []string
		for _, by := range regexp.MustCompile(`by \(([^)]*)\)`).FindAllStringSubmatch(expr, -1) {
			for _, l := range strings.Split(by[1], ",") {
				used = append(used, strings.TrimSpace(l))
			}
		}
		for _, l := range regexp.MustCompile(`\{([a-z_]+)=`).FindAllStringSubmatch(expr, -1) {
			used = append(used, l[1])
		}
		for _, l := range regexp.MustCompile(`\$labels\.([a-z_]+)`).FindAllStringSubmatch(summaries[i][1], -1) {
			used = append(used, l[1])
		}
		for _, l := range used {
			assert.True(t, slices.Contains(ruleLabels, l), "rule %d uses the label %q, which none of %v has", i+1, l, names)
		}
	}
}
