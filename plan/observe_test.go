package plan_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/plan"
)

// logRecorder is a slog.Handler (at every level) that keeps each record
// as a map of its message ("msg"), level ("level") and attributes, in
// order and by message.
type logRecorder struct {
	mu    sync.Mutex
	recs  []map[string]any
	byMsg map[string][]map[string]any
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	m := map[string]any{"msg": r.Message, "level": r.Level.String()}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.Any()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, m)
	if h.byMsg == nil {
		h.byMsg = map[string][]map[string]any{}
	}
	h.byMsg[r.Message] = append(h.byMsg[r.Message], m)
	return nil
}

// all returns the records kept so far.
func (h *logRecorder) all() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// withMsg returns the records kept so far whose message is msg.
func (h *logRecorder) withMsg(msg string) []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.byMsg[msg])
}

// failingSecondHost is a handler that completes the first target of its
// command and fails the second.
var failingSecondHost = plan.CommandHandlerFuncs{
	NewPlanFunc: func(_ context.Context, c *plan.CommandContext) (plan.State, error) {
		for _, h := range c.Command.Targets[0].Discovery.Static {
			c.SetTarget("workers", h, plan.TargetPending, "")
		}
		return plan.StateSchedulableWait, nil
	},
	SchedulableWaitFunc: func(context.Context, *plan.CommandContext) (plan.State, error) {
		return plan.StateSchedulable, nil
	},
	SchedulableFunc: func(_ context.Context, c *plan.CommandContext) (plan.State, error) {
		hosts := c.Command.Targets[0].Discovery.Static
		c.SetTarget("workers", hosts[0], plan.TargetCompleted, "")
		c.SetTarget("workers", hosts[1], plan.TargetApplyFailed, "disk full")
		c.Status.Reason = hosts[1] + " failed"
		return plan.StateApplyFailed, nil
	},
}

func secretPlan(id string) *plan.Document {
	doc := examplePlan(id, "h1", "h2")
	doc.Spec.Commands[0].Spec = map[string]json.RawMessage{"token": json.RawMessage(`"s3cret"`)}
	return doc
}

func TestRunnerReportsStepsAndTransitions(t *testing.T) {
	m := &convergetest.Metrics{}
	logs := &logRecorder{}
	r, err := plan.NewRunner(converge.NewMemStore(), plan.RunnerConfig{
		Handlers: map[string]plan.CommandHandler{"update": failingSecondHost},
		Metrics:  m, Logger: slog.New(logs),
	})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, r.Create(ctx, secretPlan("p1")))
	_, err = r.Run(ctx, "p1")
	require.ErrorIs(t, err, plan.ErrFailed)

	plans := converge.MetricPlanTransitions.Name
	for _, s := range []string{"NewPlan", "SchedulableWait", "Schedulable", "ApplyFailed"} {
		assert.Equal(t, 1.0, m.Value(plans, s), "plan entered %s", s)
	}
	cmds := converge.MetricPlanCommandTransitions.Name
	for _, s := range []string{"SchedulableWait", "Schedulable", "ApplyFailed"} {
		assert.Equal(t, 1.0, m.Value(cmds, "update", s), "command entered %s", s)
	}
	targets := converge.MetricPlanTargetTransitions.Name
	assert.Equal(t, 2.0, m.Value(targets, "update", "SignalPending"))
	assert.Equal(t, 1.0, m.Value(targets, "update", "SignalCompleted"))
	assert.Equal(t, 1.0, m.Value(targets, "update", "SignalApplyFailed"))
	assert.Equal(t, 3.0, m.Value(converge.MetricPlanSteps.Name, "changed"))
	assert.Len(t, m.Observations(converge.MetricPlanStepDuration.Name), 3)

	assert.NotContains(t, fmt.Sprint(logs.all()), "s3cret", "command specs never reach the log")
	cmdLines := logs.withMsg("command state changed")
	require.Len(t, cmdLines, 3)
	last := cmdLines[2]
	assert.Equal(t, "p1", last["plan"])
	assert.EqualValues(t, 0, last["command"])
	assert.Equal(t, "update", last["kind"])
	assert.Equal(t, "Schedulable", last["from"])
	assert.Equal(t, "ApplyFailed", last["to"])
	assert.Equal(t, "h2 failed", last["reason"])
	var failedHosts []map[string]any
	for _, l := range logs.withMsg("target state changed") {
		if l["level"] == "WARN" {
			failedHosts = append(failedHosts, l)
		}
	}
	require.Len(t, failedHosts, 1)
	assert.Equal(t, "h2", failedHosts[0]["host"])
	assert.Equal(t, "disk full", failedHosts[0]["reason"])
	assert.Len(t, logs.withMsg("plan state changed"), 3)
	assert.Len(t, logs.withMsg("plan stopped"), 0, "a failed plan is a result, not a runner error")

	require.NoError(t, r.Retry(ctx, "p1"))
	assert.Equal(t, 2.0, m.Value(plans, "SchedulableWait"), "a retry is a transition too")
	assert.Equal(t, 3.0, m.Value(targets, "update", "SignalPending"), "the failed host goes back to pending, not the completed one")
}

func TestStepReportsTheTransitionsItReturns(t *testing.T) {
	m := &convergetest.Metrics{}
	r, err := plan.NewRunner(nil, plan.RunnerConfig{
		Handlers: map[string]plan.CommandHandler{"update": failingSecondHost},
		Metrics:  m,
	})
	require.NoError(t, err)
	doc := secretPlan("p2")
	step, err := r.Step(context.Background(), doc)
	require.NoError(t, err)
	require.True(t, step.Changed)
	assert.Equal(t, 1.0, m.Value(converge.MetricPlanTransitions.Name, "SchedulableWait"))
	assert.Equal(t, 2.0, m.Value(converge.MetricPlanTargetTransitions.Name, "update", "SignalPending"))
	assert.Equal(t, 1.0, m.Value(converge.MetricPlanSteps.Name, "changed"))

	doc.Spec.Commands[0].Kind = "unknown"
	_, err = r.Step(context.Background(), doc)
	require.Error(t, err)
	assert.Equal(t, 1.0, m.Value(converge.MetricPlanSteps.Name, "error"))
}
