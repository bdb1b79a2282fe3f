package autopilot_test

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// TestPlanTimeoutsFireOnTime checks that a command or target timeout that
// is not a whole number of seconds never fires before its duration has
// passed, whatever fraction of a second the plan starts at (times are not
// truncated to the second), and fires within a poll interval after it.
func TestPlanTimeoutsFireOnTime(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	const poll = 100 * time.Millisecond
	tests := []struct {
		name string
		set  func(*plan.Command)
	}{
		{name: "target", set: func(c *plan.Command) { c.TargetTimeout = timeout }},
		{name: "command", set: func(c *plan.Command) { c.Timeout = timeout }},
	}
	for _, tc := range tests {
		for _, offset := range []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond} {
			t.Run(tc.name+"/"+offset.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					time.Sleep(offset) // start at this fraction of a second
					bus := autopilot.NewBus(planWrk("worker0"))
					var signalled time.Time
					bus.OnSignal = func(string, autopilot.Signal) { signalled = time.Now() }
					r := planRunner(t, converge.NewMemStore(), bus, plan.RunnerConfig{PollInterval: poll})
					cmd := planCmd("update", planGroup("workers", 1, "worker0"))
					tc.set(&cmd)
					planCreate(t, r, planOf(cmd))
					start := time.Now()
					_, err := r.Run(context.Background(), "p1")
					var pe *plan.Error
					require.ErrorAs(t, err, &pe)
					assert.Equal(t, plan.StateTimedOut, pe.State)
					require.False(t, signalled.IsZero())
					from := start // the command is active from the first step
					if tc.name == "target" {
						from = signalled
					}
					elapsed := time.Since(from)
					assert.GreaterOrEqual(t, elapsed, timeout, "fired early")
					assert.LessOrEqual(t, elapsed, timeout+poll, "fired late")
				})
			})
		}
	}
}

// TestPlanTimestampsStayRFC3339 checks that the precise times the runner
// keeps are written as RFC 3339 (what k0s reads), with the fraction of a
// second, and read back to the nanosecond.
func TestPlanTimestampsStayRFC3339(t *testing.T) {
	at := time.Date(2026, 5, 11, 19, 13, 2, 500_000_000, time.UTC)
	doc := planOf(planCmd("update", planGroup("workers", 1, "worker0")))
	doc.Status = &plan.Status{State: plan.StateSchedulableWait, Commands: []plan.CommandStatus{{
		Kind: "update", State: plan.StateSchedulableWait, Started: at,
		Targets: map[string][]plan.TargetStatus{"workers": {{Name: "worker0", State: plan.TargetSent, LastUpdatedTimestamp: at}}},
	}}}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	var wire struct {
		Status struct {
			Commands []map[string]json.RawMessage `json:"commands"`
		} `json:"status"`
	}
	require.NoError(t, json.Unmarshal(b, &wire))
	var started string
	require.NoError(t, json.Unmarshal(wire.Status.Commands[0]["startedTimestamp"], &started))
	var targets map[string][]struct {
		LastUpdatedTimestamp string `json:"lastUpdatedTimestamp"`
	}
	require.NoError(t, json.Unmarshal(wire.Status.Commands[0]["update"], &targets))
	for _, s := range []string{started, targets["workers"][0].LastUpdatedTimestamp} {
		assert.Equal(t, "2026-05-11T19:13:02.5Z", s)
		parsed, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err, "k0s parses it with time.RFC3339")
		assert.Equal(t, at, parsed)
	}
	y, err := autopilot.Encode(doc)
	require.NoError(t, err)
	back, err := autopilot.Decode(y)
	require.NoError(t, err)
	assert.Equal(t, at, back.Status.Commands[0].Target("workers", "worker0").LastUpdatedTimestamp)
	assert.Equal(t, at, back.Status.Commands[0].Started)
}
