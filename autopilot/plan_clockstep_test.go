package autopilot_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// monoClock is a manual monotonic clock.
type monoClock struct{ d time.Duration }

func (m *monoClock) Elapsed() time.Duration  { return m.d }
func (m *monoClock) Advance(d time.Duration) { m.d += d }
func newMonoClock() *monoClock               { return &monoClock{d: 42 * time.Hour} }

// Step sets the wall clock forward (or back, for a negative d).
func (c *planClock) Step(d time.Duration) { c.t = c.t.Add(d) }

// TestPlanTimeoutsIgnoreWallClockSteps steps the wall clock forward and
// back by hours (NTP on a device without a real-time clock) while less
// than the timeout passes on the monotonic clock: neither the target nor
// the command timeout fires until the timeout has passed on the
// monotonic clock, and then it does. The timestamps in the status stay
// wall-clock times, for people.
func TestPlanTimeoutsIgnoreWallClockSteps(t *testing.T) {
	tests := []struct {
		name    string
		cmd     func(*plan.Command)
		timeout time.Duration
		reason  string
	}{
		{name: "target", cmd: func(c *plan.Command) { c.TargetTimeout = 5 * time.Minute }, timeout: 5 * time.Minute,
			reason: `node "worker0" did not complete within 5m0s`},
		{name: "command", cmd: func(c *plan.Command) { c.Timeout = 10 * time.Minute }, timeout: 10 * time.Minute,
			reason: "command did not complete within 10m0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wall, mono := newPlanClock(), newMonoClock()
			bus := autopilot.NewBus(planNodes()...)
			r := planRunner(t, nil, bus, plan.RunnerConfig{Now: wall.Now, Monotonic: mono.Elapsed})
			cmd := planCmd("update", planGroup("workers", 1, "worker0"))
			tc.cmd(&cmd)
			doc := planOf(cmd)
			planSettle(t, r, doc)
			tg := planTarget(t, doc, 0, "workers", "worker0")
			require.Equal(t, plan.TargetSent, tg.State)
			assert.Equal(t, wall.Now(), tg.LastUpdatedTimestamp, "stamped with the wall clock")
			assert.Equal(t, wall.Now(), doc.Status.Commands[0].Started)

			for _, s := range []struct{ wall, mono time.Duration }{
				{3 * time.Hour, time.Minute},
				{-6 * time.Hour, time.Minute},
				{24 * time.Hour, tc.timeout - 2*time.Minute - time.Nanosecond},
				{-30 * 24 * time.Hour, 0},
			} {
				wall.Step(s.wall)
				mono.Advance(s.mono)
				planSettle(t, r, doc)
				require.Equal(t, plan.StateSchedulableWait, doc.Status.State, "fired early after a wall step of %s", s.wall)
				require.Equal(t, plan.TargetSent, planTarget(t, doc, 0, "workers", "worker0").State)
			}
			mono.Advance(time.Nanosecond)
			planSettle(t, r, doc)
			assert.Equal(t, plan.StateTimedOut, doc.Status.State)
			assert.Equal(t, tc.reason, doc.Status.Commands[0].Reason)
			tg = planTarget(t, doc, 0, "workers", "worker0")
			assert.Equal(t, plan.TargetTimedOut, tg.State)
			assert.Equal(t, wall.Now(), tg.LastUpdatedTimestamp)
		})
	}
}

// TestPlanTimeoutsIgnoreReplicaSkew hands a plan signalled by one runner
// to another whose wall clock is a day ahead (a replica taking over): the
// second counts the timeout from when it first sees the plan, on its own
// monotonic clock, so the skew never fires it early.
func TestPlanTimeoutsIgnoreReplicaSkew(t *testing.T) {
	wallA, monoA := newPlanClock(), newMonoClock()
	bus := autopilot.NewBus(planNodes()...)
	a := planRunner(t, nil, bus, plan.RunnerConfig{Now: wallA.Now, Monotonic: monoA.Elapsed})
	cmd := planCmd("update", planGroup("workers", 1, "worker0"))
	cmd.TargetTimeout = 5 * time.Minute
	doc := planOf(cmd)
	planSettle(t, a, doc)
	require.Equal(t, plan.TargetSent, planTarget(t, doc, 0, "workers", "worker0").State)

	wallB, monoB := newPlanClock(), &monoClock{}
	wallB.Step(24 * time.Hour)
	b := planRunner(t, nil, bus, plan.RunnerConfig{Now: wallB.Now, Monotonic: monoB.Elapsed})
	planSettle(t, b, doc)
	require.Equal(t, plan.StateSchedulableWait, doc.Status.State, "fired on the replica's skew")
	monoB.Advance(5*time.Minute - time.Nanosecond)
	planSettle(t, b, doc)
	require.Equal(t, plan.StateSchedulableWait, doc.Status.State)
	monoB.Advance(time.Nanosecond)
	planSettle(t, b, doc)
	assert.Equal(t, plan.StateTimedOut, doc.Status.State)
}
