package autopilot_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
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
		set  func(*converge.Command)
	}{
		{name: "target", set: func(c *converge.Command) { c.TargetTimeout = timeout }},
		{name: "command", set: func(c *converge.Command) { c.Timeout = timeout }},
	}
	for _, tc := range tests {
		for _, offset := range []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond} {
			t.Run(tc.name+"/"+offset.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					time.Sleep(offset) // start at this fraction of a second
					bus := autopilot.NewBus(planWrk("worker0"))
					var signalled time.Time
					bus.OnSignal = func(string, autopilot.Signal) { signalled = time.Now() }
					r := planRunner(t, converge.NewMemStore(), bus, converge.PlanConfig{PollInterval: poll})
					cmd := planCmd("update", planGroup("workers", 1, "worker0"))
					tc.set(&cmd)
					planCreate(t, r, planOf(cmd))
					start := time.Now()
					_, err := r.Run(context.Background(), "p1")
					var pe *converge.PlanError
					require.ErrorAs(t, err, &pe)
					assert.Equal(t, converge.PlanTimedOut, pe.State)
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
