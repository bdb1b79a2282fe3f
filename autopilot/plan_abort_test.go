package autopilot_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planHistoryHas reports whether hist has an entry from>to whose reason
// contains reason.
func planHistoryHas(hist []converge.HistoryEntry, from, to, reason string) bool {
	for _, h := range hist {
		if h.From == from && h.To == to && strings.Contains(h.Reason, reason) {
			return true
		}
	}
	return false
}

// TestPlanRunnerAbortLetsSignalledTargetsFinish aborts a running plan
// while two workers work: they finish, nothing else is signalled, the plan
// ends in Aborted with the reason on the command and on every target that
// never ran; a retry then runs what was left, and the history keeps why.
func TestPlanRunnerAbortLetsSignalledTargetsFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const reason = "maintenance window closed"
		ws := []string{"w0", "w1", "w2", "w3", "w4"}
		var hosts []autopilot.Host
		for _, w := range ws {
			hosts = append(hosts, planWrk(w))
		}
		bus := planAutoBus(time.Minute, nil, hosts...)
		r := planRunner(t, converge.NewMemStore(), bus, plan.RunnerConfig{})
		planCreate(t, r, planOf(planCmd("update", planGroup("workers", 2, ws...)), planCmd("update", planGroup("workers", 1, "w0"))))
		ctx := context.Background()

		start := time.Now()
		var st *plan.Status
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			st, err = r.Run(ctx, "p1")
		}()
		synctest.Wait() // the runner waits for w0 and w1
		require.Equal(t, map[string]int{"w0 p1/0/0": 1, "w1 p1/0/0": 1}, planDeliveries(bus))
		require.NoError(t, r.Abort(ctx, "p1", reason))
		<-done

		var pe *plan.Error
		require.ErrorAs(t, err, &pe)
		require.ErrorIs(t, err, plan.ErrFailed)
		assert.Equal(t, plan.StateAborted, pe.State)
		assert.Equal(t, 0, pe.Command)
		assert.Equal(t, reason, pe.Reason)
		assert.GreaterOrEqual(t, time.Since(start), time.Minute, "the signalled workers finished first")
		assert.Equal(t, plan.StateAborted, st.State)
		assert.Equal(t, reason, st.Abort)
		assert.Equal(t, plan.StateAborted, st.Commands[0].State)
		assert.Equal(t, reason, st.Commands[0].Reason)
		assert.Equal(t, plan.StateSchedulableWait, st.Commands[1].State, "the next command never started")
		for _, w := range ws {
			tg := st.Commands[0].Target("workers", w)
			if w == "w0" || w == "w1" {
				assert.Equal(t, plan.TargetCompleted, tg.State, w)
				continue
			}
			assert.Equal(t, plan.TargetAborted, tg.State, w)
			assert.Equal(t, reason, tg.Reason, w)
		}
		assert.Len(t, bus.Sent(), 2, "nothing was signalled after the abort")
		hist, err := r.History(ctx, "p1")
		require.NoError(t, err)
		assert.True(t, planHistoryHas(hist, "SchedulableWait", "SchedulableWait", "abort requested: "+reason), "%+v", hist)
		assert.True(t, planHistoryHas(hist, "SchedulableWait", "Aborted", "stopped: command 0 (update): "+reason), "%+v", hist)
		require.ErrorIs(t, r.Abort(ctx, "p1", "again"), plan.ErrFinished)

		require.NoError(t, r.Retry(ctx, "p1"))
		hist, err = r.History(ctx, "p1")
		require.NoError(t, err)
		for _, w := range []string{"w2", "w3", "w4"} {
			assert.True(t, planHistoryHas(hist, "SignalAborted", "SignalPending", "workers/"+w+" attempt 0: "+reason), "%s: %+v", w, hist)
		}
		st, err = r.Run(ctx, "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		assert.Empty(t, st.Abort)
		assert.Equal(t, map[string]int{"w0 p1/0/0": 1, "w1 p1/0/0": 1, "w2 p1/0/1": 1, "w3 p1/0/1": 1, "w4 p1/0/1": 1, "w0 p1/1/0": 1},
			planDeliveries(bus), "the retry signals only the aborted workers, then the next command")
		require.ErrorIs(t, r.Abort(ctx, "p1", "late"), plan.ErrFinished)
	})
}

// TestPlanRunnerAbortBeforeStart aborts a plan nobody ran yet: it ends at
// once, signalling nothing, and a retry starts it from the beginning.
func TestPlanRunnerAbortBeforeStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := planAutoBus(time.Second, nil, planNodes()...)
		r := planRunner(t, converge.NewMemStore(), bus, plan.RunnerConfig{})
		planCreate(t, r, planOf(planCmd("update", planGroup("workers", 1, "worker0"))))
		ctx := context.Background()
		require.NoError(t, r.Abort(ctx, "p1", ""))
		err := r.Abort(ctx, "p1", "second")
		require.ErrorIs(t, err, plan.ErrAborted, "an abort under way keeps its reason")
		assert.NotErrorIs(t, err, plan.ErrFinished, "the plan has not ended yet")
		assert.Contains(t, err.Error(), `"aborted"`, "the first reason")
		st, err := r.Run(ctx, "p1")
		var pe *plan.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, plan.StateAborted, pe.State)
		assert.Equal(t, "aborted", pe.Reason)
		err = r.Abort(ctx, "p1", "third")
		require.ErrorIs(t, err, plan.ErrAborted, "an aborted plan")
		require.ErrorIs(t, err, plan.ErrFinished)
		assert.Equal(t, plan.StateAborted, st.Commands[0].State)
		assert.Empty(t, bus.Sent())

		require.NoError(t, r.Retry(ctx, "p1"))
		doc, _, err := r.Get(ctx, "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateNewPlan, doc.Status.State, "the command never started: discovery runs again")
		st, err = r.Run(ctx, "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		assert.Len(t, bus.Sent(), 1)
	})
}

// TestPlanRunnerAbortFailureWins aborts a plan whose signalled worker then
// fails: the plan ends in Failed, as without the abort, and a retry clears
// the abort and finishes the plan.
func TestPlanRunnerAbortFailureWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := planAutoBus(time.Minute, func(node string, s autopilot.Signal) (plan.TargetState, string) {
			if node == "w0" && s.Attempt == 0 {
				return plan.TargetApplyFailed, "disk full"
			}
			return plan.TargetCompleted, ""
		}, planWrk("w0"), planWrk("w1"))
		r := planRunner(t, converge.NewMemStore(), bus, plan.RunnerConfig{})
		planCreate(t, r, planOf(planCmd("update", planGroup("workers", 1, "w0", "w1"))))
		ctx := context.Background()
		var st *plan.Status
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			st, err = r.Run(ctx, "p1")
		}()
		synctest.Wait()
		require.NoError(t, r.Abort(ctx, "p1", "stop"))
		<-done
		var pe *plan.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, plan.StateApplyFailed, pe.State)
		assert.Equal(t, "stop", st.Abort, "the abort is still asked")
		assert.Equal(t, plan.TargetApplyFailed, st.Commands[0].Target("workers", "w0").State)
		assert.Equal(t, plan.TargetPending, st.Commands[0].Target("workers", "w1").State, "w1 was never signalled")

		require.NoError(t, r.Retry(ctx, "p1"))
		st, err = r.Run(ctx, "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		assert.Equal(t, map[string]int{"w0 p1/0/0": 1, "w0 p1/0/1": 1, "w1 p1/0/0": 1}, planDeliveries(bus))
	})
}
