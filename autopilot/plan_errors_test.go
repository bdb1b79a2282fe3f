package autopilot_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

func planGroup(name string, concurrent int, nodes ...string) plan.CommandTargets {
	return plan.CommandTargets{Group: name, Concurrent: concurrent, Discovery: plan.CommandDiscovery{Static: nodes}}
}

func planCmd(kind string, groups ...plan.CommandTargets) plan.Command {
	return plan.Command{Kind: kind, Spec: map[string]json.RawMessage{
		"version":   json.RawMessage(`"v2"`),
		"platforms": json.RawMessage(`{"linux-amd64":{"url":"https://example.invalid/v2"}}`),
	}, Targets: groups}
}

func planOf(cmds ...plan.Command) *plan.Document {
	return &plan.Document{Spec: plan.Plan{ID: "p1", Commands: cmds}}
}

// planTarget returns the status of a target of command i.
func planTarget(t *testing.T, doc *plan.Document, i int, group, name string) plan.TargetStatus {
	t.Helper()
	tg := doc.Status.Commands[i].Target(group, name)
	require.NotNil(t, tg, "target %s/%s of command %d", group, name, i)
	return *tg
}

// TestPlanErrorStates drives a plan into every error state of the signal
// handler and checks that the command and the plan stop there, with a reason
// on the plan, the command and the culprit target. The states and target
// states are k0s autopilot's (k0sproject/k0s
// pkg/autopilot/controller/plans/cmdprovider/k0supdate, TestNewPlan cases
// MissingController, MissingWorkerWrongNodePlatform, ExcludedControllers,
// and TestSchedulableWait case SignalNodeApplyFailure, at commit
// dff90cee9a6e8e22c6d0f3efef0f9a77fc223be4); InconsistentTargets is
// converge's own.
func TestPlanErrorStates(t *testing.T) {
	tests := []struct {
		name     string
		doc      *plan.Document
		restrict []string
		nodes    []autopilot.Host
		// act runs after the plan settled once, before it settles again.
		act         func(bus *autopilot.Bus)
		state       plan.State
		command     int
		group, node string
		target      plan.TargetState
		reason      string
	}{
		{name: "IncompleteTargets: a discovered node does not exist",
			doc:   planOf(planCmd("update", planGroup("workers", 1, "worker0", "ghost"))),
			state: plan.StateIncompleteTargets, group: "workers", node: "ghost", target: plan.TargetMissing,
			reason: `node "ghost" does not exist`},
		{name: "Restricted: controllers excluded from plans, the targets stay pending",
			doc:      planOf(planCmd("update", planGroup("workers", 1, "worker0")), planCmd("update", planGroup("controllers", 1, "controller0"))),
			restrict: []string{"controller"}, command: 1,
			state: plan.StateRestricted, group: "controllers", node: "controller0", target: plan.TargetPending,
			reason: `node "controller0" is a controller, and controller nodes are excluded from plans`},
		{name: "IncompleteTargets: a worker in the controllers group",
			doc:   planOf(planCmd("update", planGroup("controllers", 1, "worker0"))),
			state: plan.StateIncompleteTargets, group: "controllers", node: "worker0", target: plan.TargetMissing,
			reason: `node "worker0" is a "worker", group "controllers" takes "controller" nodes`},
		{name: "IncompleteTargets before Restricted",
			doc:      planOf(planCmd("update", planGroup("controllers", 1, "controller0"), planGroup("workers", 1, "ghost"))),
			restrict: []string{"controller"},
			state:    plan.StateIncompleteTargets, group: "workers", node: "ghost", target: plan.TargetMissing,
			reason: `node "ghost" does not exist`},
		{name: "InconsistentTargets: a node listed in two groups",
			doc:   planOf(planCmd("update", planGroup("controllers", 1, "controller0"), plan.CommandTargets{Group: "extra", Discovery: plan.CommandDiscovery{Static: []string{"controller0"}}})),
			state: plan.StateInconsistentTargets, group: "extra", node: "controller0", target: plan.TargetInconsistent,
			reason: `node "controller0" is listed in groups "controllers" and "extra"`},
		{name: "IncompleteTargets: a node changed kind before it was signalled",
			doc: planOf(planCmd("update", planGroup("workers", 1, "worker0", "worker1"))),
			act: func(bus *autopilot.Bus) {
				bus.AddNode(autopilot.Host{Name: "worker1", Kind: "controller", Platform: "linux-amd64"})
				_ = bus.Respond("worker0", plan.TargetCompleted, "")
			},
			state: plan.StateIncompleteTargets, group: "workers", node: "worker1", target: plan.TargetMissing,
			reason: `node "worker1" is a "controller", group "workers" takes "worker" nodes`},
		{name: "IncompleteTargets: no payload for arm64",
			doc:   planOf(planCmd("update", planGroup("workers", 1, "worker0", "arm0"))),
			nodes: []autopilot.Host{{Name: "arm0", Kind: "worker", Platform: "linux-arm64"}},
			state: plan.StateIncompleteTargets, group: "workers", node: "arm0", target: plan.TargetMissingPlatform,
			reason: `no payload for platform "linux-arm64" of node "arm0"`},
		{name: "IncompleteTargets: a node moved to a platform without a payload before it was signalled",
			doc: planOf(planCmd("update", planGroup("workers", 1, "worker0", "worker1"))),
			act: func(bus *autopilot.Bus) {
				bus.AddNode(autopilot.Host{Name: "worker1", Kind: "worker", Platform: "linux-riscv64"})
				_ = bus.Respond("worker0", plan.TargetCompleted, "")
			},
			state: plan.StateIncompleteTargets, group: "workers", node: "worker1", target: plan.TargetMissingPlatform,
			reason: `no payload for platform "linux-riscv64" of node "worker1"`},
		{name: "IncompleteTargets: a node vanished before it was signalled",
			doc: planOf(planCmd("update", planGroup("workers", 1, "worker0", "worker1"))),
			act: func(bus *autopilot.Bus) {
				bus.RemoveNode("worker1")
				_ = bus.Respond("worker0", plan.TargetCompleted, "")
			},
			state: plan.StateIncompleteTargets, group: "workers", node: "worker1", target: plan.TargetMissing,
			reason: `node "worker1" does not exist`},
		{name: "IncompleteTargets: a node vanished while working",
			doc:   planOf(planCmd("update", planGroup("workers", 1, "worker0"))),
			act:   func(bus *autopilot.Bus) { bus.RemoveNode("worker0") },
			state: plan.StateIncompleteTargets, group: "workers", node: "worker0", target: plan.TargetMissing,
			reason: `node "worker0" disappeared while working on the command`},
		{name: "ApplyFailed: a node reports failure",
			doc:   planOf(planCmd("update", planGroup("workers", 1, "worker0"))),
			act:   func(bus *autopilot.Bus) { _ = bus.Respond("worker0", plan.TargetApplyFailed, "disk full") },
			state: plan.StateApplyFailed, group: "workers", node: "worker0", target: plan.TargetApplyFailed,
			reason: `node "worker0" failed: disk full`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bus := autopilot.NewBus(append(planNodes(), append(tc.nodes, planWrk("worker1"))...)...)
			h := &autopilot.CommandHandler{Sender: bus, Restrict: tc.restrict}
			r, err := plan.NewRunner(nil, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{"update": h}, Now: newPlanClock().Now})
			require.NoError(t, err)
			step := planSettle(t, r, tc.doc)
			if tc.act != nil {
				require.False(t, step.Done, "plan failed before the action: %+v", tc.doc.Status)
				tc.act(bus)
				step = planSettle(t, r, tc.doc)
			}
			st := tc.doc.Status
			require.True(t, step.Done)
			assert.Equal(t, tc.state, st.State)
			assert.True(t, st.State.IsError())
			assert.Equal(t, tc.state, st.Commands[tc.command].State)
			assert.Equal(t, tc.reason, st.Commands[tc.command].Reason)
			assert.Contains(t, st.Reason, tc.reason)
			tg := planTarget(t, tc.doc, tc.command, tc.group, tc.node)
			assert.Equal(t, tc.target, tg.State)
			if tc.target != plan.TargetPending {
				assert.True(t, tg.State.IsFailure())
				assert.NotEmpty(t, tg.Reason)
			}
			for i := tc.command + 1; i < len(st.Commands); i++ {
				assert.NotEqual(t, plan.StateCompleted, st.Commands[i].State, "later commands must not run")
			}

			// An error state is final: stepping again changes nothing.
			before := st.Clone()
			again, err := r.Step(context.Background(), tc.doc)
			require.NoError(t, err)
			assert.False(t, again.Changed)
			assert.True(t, again.Done)
			assert.Equal(t, before, tc.doc.Status)
		})
	}
}

// TestPlanHandlerErrors covers the handler contract: its own error states,
// transient errors, invalid transitions and unknown kinds.
func TestPlanHandlerErrors(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		h       plan.CommandHandler
		kind    string
		wantErr error
		state   plan.State
	}{
		{name: "a handler-defined error state stops the plan", kind: "custom",
			h: plan.CommandHandlerFuncs{SchedulableWaitFunc: func(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
				c.Status.Reason = "version v2 is older than the running v3"
				return "DowngradeRefused", nil
			}}, state: "DowngradeRefused"},
		{name: "a transient error leaves the status unchanged", kind: "custom", wantErr: errBoom,
			h: plan.CommandHandlerFuncs{NewPlanFunc: func(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
				c.Status.Reason = "half-done"
				return plan.StateSchedulableWait, errBoom
			}}, state: plan.StateNewPlan},
		{name: "NewPlan from SchedulableWait is an invalid transition", kind: "custom", wantErr: plan.ErrTransition,
			h: plan.CommandHandlerFuncs{SchedulableWaitFunc: func(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
				return plan.StateNewPlan, nil
			}}, state: plan.StateSchedulableWait},
		// k0sproject/k0s pkg/autopilot/controller/plans/core
		// planstatehandler_test.go TestHandle, cases HappyK0sUpdate and
		// SkipCompletedCommand (commit dff90cee9a6e): Schedulable may
		// complete a command.
		{name: "Completed from Schedulable completes the command", kind: "custom",
			h: plan.CommandHandlerFuncs{
				SchedulableWaitFunc: func(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
					return plan.StateSchedulable, nil
				},
				SchedulableFunc: func(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
					return plan.StateCompleted, nil
				},
			}, state: plan.StateCompleted},
		{name: "NewPlan from Schedulable is an invalid transition", kind: "custom", wantErr: plan.ErrTransition,
			h: plan.CommandHandlerFuncs{
				SchedulableWaitFunc: func(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
					return plan.StateSchedulable, nil
				},
				SchedulableFunc: func(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
					return plan.StateNewPlan, nil
				},
			}, state: plan.StateSchedulable},
		{name: "a kind without handler", kind: "unknown", wantErr: plan.ErrUnknownCommand, state: plan.StateNewPlan},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			handlers := map[string]plan.CommandHandler{}
			if tc.h != nil {
				handlers["custom"] = tc.h
			}
			r, err := plan.NewRunner(nil, plan.RunnerConfig{Handlers: handlers})
			require.NoError(t, err)
			doc := planOf(plan.Command{Kind: tc.kind, Targets: []plan.CommandTargets{planGroup("workers", 1, "w0")}})
			var stepErr error
			for i := 0; i < 10 && stepErr == nil; i++ {
				var step plan.Step
				step, stepErr = r.Step(context.Background(), doc)
				if step.Done {
					break
				}
			}
			if tc.wantErr != nil {
				require.ErrorIs(t, stepErr, tc.wantErr)
				var ce *plan.CommandError
				require.ErrorAs(t, stepErr, &ce)
				assert.Equal(t, 0, ce.Command)
				assert.Equal(t, tc.kind, ce.Kind)
			} else {
				require.NoError(t, stepErr)
			}
			state := plan.StateNewPlan
			if doc.Status != nil {
				state = doc.Status.State
				assert.NotEqual(t, "half-done", doc.Status.Commands[0].Reason)
			}
			assert.Equal(t, tc.state, state)
			if tc.state.IsError() {
				assert.Equal(t, "version v2 is older than the running v3", doc.Status.Commands[0].Reason)
			}
		})
	}
}

// TestPlanTimeouts checks the target and command timeouts with a fake clock.
func TestPlanTimeouts(t *testing.T) {
	tests := []struct {
		name    string
		cmd     func(c *plan.Command)
		cfg     plan.RunnerConfig
		elapsed time.Duration
		state   plan.State
		reason  string
	}{
		{name: "target timeout from the command", cmd: func(c *plan.Command) { c.TargetTimeout = 5 * time.Minute },
			elapsed: 5 * time.Minute, state: plan.StateTimedOut, reason: `node "worker0" did not complete within 5m0s`},
		{name: "target timeout from the runner default", cfg: plan.RunnerConfig{TargetTimeout: time.Minute},
			elapsed: time.Minute, state: plan.StateTimedOut, reason: `node "worker0" did not complete within 1m0s`},
		{name: "under the target timeout", cmd: func(c *plan.Command) { c.TargetTimeout = 5 * time.Minute },
			elapsed: 4*time.Minute + 59*time.Second, state: plan.StateSchedulableWait},
		{name: "command timeout", cmd: func(c *plan.Command) { c.Timeout = 10 * time.Minute },
			elapsed: 10 * time.Minute, state: plan.StateTimedOut, reason: "command did not complete within 10m0s"},
		{name: "command timeout from the runner default", cfg: plan.RunnerConfig{CommandTimeout: time.Hour},
			elapsed: time.Hour, state: plan.StateTimedOut, reason: "command did not complete within 1h0m0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newPlanClock()
			bus := autopilot.NewBus(planNodes()...)
			tc.cfg.Now = clock.Now
			r := planRunner(t, nil, bus, tc.cfg)
			cmd := planCmd("update", planGroup("workers", 1, "worker0"))
			if tc.cmd != nil {
				tc.cmd(&cmd)
			}
			doc := planOf(cmd)
			planSettle(t, r, doc)
			require.Equal(t, plan.TargetSent, planTarget(t, doc, 0, "workers", "worker0").State)
			clock.Advance(tc.elapsed)
			planSettle(t, r, doc)
			assert.Equal(t, tc.state, doc.Status.State)
			if tc.reason != "" {
				assert.Equal(t, tc.reason, doc.Status.Commands[0].Reason)
				tg := planTarget(t, doc, 0, "workers", "worker0")
				assert.Equal(t, plan.TargetTimedOut, tg.State)
				assert.Equal(t, tc.reason, tg.Reason)
			}
		})
	}
}
