package converge_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// TestReportItemOfAReportNoWalkMade: Item finds the items of a report read
// back from JSON, or built by hand, as it finds those of a walk's report,
// and a graph drawn with such a report shows their outcomes.
func TestReportItemOfAReportNoWalkMade(t *testing.T) {
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "a", Goal: "x"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "b", Goal: "y"}).Node(), converge.Present, "a")
	rep, err := converge.Apply(t.Context(), g)
	require.NoError(t, err)
	raw, err := json.Marshal(rep)
	require.NoError(t, err)
	var back converge.Report
	require.NoError(t, json.Unmarshal(raw, &back))
	hand := &converge.Report{Items: []converge.ItemResult{{ID: "a", Outcome: converge.OutcomeFailed}, {ID: "b", Outcome: converge.OutcomeWaiting}}}

	for name, r := range map[string]*converge.Report{"walked": rep, "decoded": &back, "by hand": hand} {
		t.Run(name, func(t *testing.T) {
			for _, id := range []converge.ID{"a", "b"} {
				it, ok := r.Item(id)
				require.True(t, ok, "item %s", id)
				assert.Equal(t, id, it.ID)
			}
			_, ok := r.Item("c")
			assert.False(t, ok)
		})
	}
	var dot strings.Builder
	require.NoError(t, g.WriteDOT(&dot, hand))
	assert.Contains(t, dot.String(), `"a" [label="a\nfailed", fillcolor="#ffc2c2"]`)
}
