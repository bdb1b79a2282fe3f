package converge_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

func TestMetricKindReadsAndWritesByName(t *testing.T) {
	for _, k := range []converge.MetricKind{converge.MetricCounter, converge.MetricGauge, converge.MetricHistogram} {
		b, err := k.MarshalText()
		require.NoError(t, err)
		assert.Equal(t, k.String(), string(b))
		var got converge.MetricKind
		require.NoError(t, got.UnmarshalText(b))
		assert.Equal(t, k, got)
	}
	var k converge.MetricKind
	assert.ErrorIs(t, k.UnmarshalText([]byte("summary")), converge.ErrUnknownName)
	_, err := converge.MetricKind(0).MarshalText()
	assert.ErrorIs(t, err, converge.ErrUnknownName, "the zero kind has no name")
}

func TestMetricsNopAcceptsEverything(t *testing.T) {
	var m converge.Metrics = converge.MetricsNop{}
	d := &converge.Metric{Name: "converge_test_total", Kind: converge.MetricCounter, Labels: []string{"a"}}
	assert.NotPanics(t, func() {
		m.Add(d, 1, "x")
		m.Set(d, 2, "x")
		m.Observe(d, 3, "x")
	})
}
