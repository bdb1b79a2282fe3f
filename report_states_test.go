package converge_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// TestResultStatesHaveTheirRealType checks that a typed item's states come
// out of a walk's result with their own type, and that asking for another
// type, or a result without states, says so.
func TestResultStatesHaveTheirRealType(t *testing.T) {
	file := &convergetest.Item{Key: "file", Value: "old", Goal: "new"}
	g := converge.NewGraph()
	g.Add(file.Node(), converge.Present)
	rep, err := converge.Apply(context.Background(), g)
	require.NoError(t, err)
	res, ok := rep.Item("file")
	require.True(t, ok)

	before, after, ok := converge.ResultStates[string](res)
	require.True(t, ok)
	assert.Equal(t, "old", before)
	assert.Equal(t, "new", after)

	_, _, ok = converge.ResultStates[int](res)
	assert.False(t, ok, "states are strings, not ints")

	tests := []struct {
		name          string
		res           converge.ItemResult
		before, after string
		ok            bool
	}{
		{name: "unknown before", res: converge.ItemResult{Unknown: true, After: "x"}, after: "x", ok: true},
		{name: "not run", res: converge.ItemResult{Outcome: converge.OutcomeNotRun}},
		{name: "after of another type", res: converge.ItemResult{Before: "a", After: 3}},
		{name: "before of another type", res: converge.ItemResult{Before: 3, After: "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, after, ok := converge.ResultStates[string](tc.res)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.before, before)
			assert.Equal(t, tc.after, after)
		})
	}
}
