package prometheus_test

import (
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/prometheus"
)

// TestApplyThenGatherIsConsistent runs a real walk next to a Metrics
// registered on a pedantic registry and checks that the registry gathers
// without error and that every family it gathers is converge's, with help
// and a type. The walk reports nothing to the Metrics until the core loops
// take one; then this test checks their families too.
func TestApplyThenGatherIsConsistent(t *testing.T) {
	m, err := prometheus.New(prometheus.Options{})
	require.NoError(t, err)
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))

	g := converge.NewGraph()
	a := &convergetest.Item{Key: "a", Goal: "x"}
	b := &convergetest.Item{Key: "b", Goal: "y"}
	g.Add(a.Node(), converge.Present)
	g.Add(b.Node(), converge.Present, "a")
	rep, err := converge.Apply(t.Context(), g)
	require.NoError(t, err)
	require.Len(t, rep.Items, 2)
	assert.Equal(t, "x", a.Current())
	assert.Equal(t, "y", b.Current())

	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		assert.True(t, strings.HasPrefix(f.GetName(), "converge_"), f.GetName())
		assert.NotEmpty(t, f.GetHelp(), f.GetName())
		assert.NotNil(t, f.Type, f.GetName())
		assert.NotEmpty(t, f.GetMetric(), f.GetName())
	}
}
