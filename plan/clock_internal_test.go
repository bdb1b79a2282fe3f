package plan

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanClockAnchors checks the anchors of timestamps: one set by the
// runner counts from the moment it was set, one first seen counts from
// then, whatever the wall clock says, and a plan's anchors go when it
// ends, so a long-lived runner does not keep them.
func TestPlanClockAnchors(t *testing.T) {
	wall := time.Date(2026, 5, 11, 19, 13, 2, 0, time.UTC)
	var mono time.Duration
	c := newPlanClock(func() time.Time { return wall }, func() time.Duration { return mono })

	at, m := c.read()
	assert.Equal(t, wall, at)
	c.set("p", at, m)
	mono += time.Minute
	wall = wall.Add(-time.Hour)
	assert.Equal(t, time.Minute, c.since("p", at, mono), "set by the runner: from when it was set")

	foreign := wall.Add(-24 * time.Hour)
	assert.Zero(t, c.since("p", foreign, mono), "first seen: from now")
	mono += time.Second
	assert.Equal(t, time.Second, c.since("p", foreign, mono))
	assert.Zero(t, c.since("q", at, mono), "anchors are per plan")

	c.drop("p")
	assert.Zero(t, c.since("p", at, mono), "dropped")
}

// TestPlanRunnerDropsAnchorsOfEndedPlans runs plans to their end and
// checks that the runner keeps no anchors for them.
func TestPlanRunnerDropsAnchorsOfEndedPlans(t *testing.T) {
	r, err := NewRunner(nil, RunnerConfig{Handlers: map[string]CommandHandler{"k": CommandHandlerFuncs{}}})
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "c"} {
		doc := &Document{Spec: Plan{ID: id, Commands: []Command{{Kind: "k", Targets: []CommandTargets{{Group: "g", Discovery: CommandDiscovery{Static: []string{"n"}}}}}}}}
		for range 10 {
			step, err := r.Step(context.Background(), doc)
			require.NoError(t, err)
			if step.Done {
				break
			}
		}
		require.Equal(t, StateCompleted, doc.Status.State)
	}
	r.clock.mu.Lock()
	defer r.clock.mu.Unlock()
	assert.Empty(t, r.clock.anchors)
}
