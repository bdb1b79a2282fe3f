package statuspage_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/statuspage"
)

func TestQuarantinedObjectsComeFirst(t *testing.T) {
	h, c, _ := newHandler(t, false)
	// Above its SLA at once, and first by key.
	require.NoError(t, c.Add(t.Context(), "a-wait", stateWaiting, nil))

	var sv statuspage.StateView
	getJSON(t, h, "/controllers/host/objects", &sv)
	keys := make([]string, len(sv.Objects))
	for i, o := range sv.Objects {
		keys[i] = o.Key
	}
	assert.Equal(t, []string{"bad-1", "<script>alert(1)</script>", "a-wait", "ready-1", "ready-2", "ready-3", "ready-a/b", "term-1", "wait-1", "wait-2"}, keys,
		"the quarantined first, then the others by key")

	assert.Equal(t, []string{
		"bad-1: " + statuspage.ProblemQuarantined, "a-wait: " + statuspage.ProblemAboveSLA, "term-1: " + statuspage.ProblemTerminal,
		"wait-1: " + statuspage.ProblemAboveSLA, "wait-2: " + statuspage.ProblemAboveSLA,
		"rollout: " + statuspage.ProblemPlanFailed,
	}, problems(attention(t, h, "viewer")), "Needs attention: the quarantined first")
}

func TestPlansLinkOnlyWhereThereArePlans(t *testing.T) {
	withPlans, _, _ := newHandler(t, false)
	noPlans, err := statuspage.New(statuspage.Options{Controllers: []statuspage.Controller{{Controller: fleet(t), States: []controller.State{stateNew}}}})
	require.NoError(t, err)
	tests := []struct {
		name string
		h    *statuspage.Handler
		want bool
	}{
		{"with plans", withPlans, true},
		{"without plans", noPlans, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/", "/controllers/host", "/controllers/host/objects/bad-1"} {
				code, body := get(t, tt.h, path, false)
				require.Equal(t, 200, code, body)
				if tt.want {
					assert.Contains(t, body, `plans</a>`, path)
				} else {
					assert.NotContains(t, body, `plans</a>`, path)
				}
			}
		})
	}
}
