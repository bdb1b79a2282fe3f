package autopilot_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// The behaviours of k0s autopilot's plan controllers that these tests
// mirror are those of k0sproject/k0s at commit
// dff90cee9a6e8e22c6d0f3efef0f9a77fc223be4: its Plan CRD
// (static/_crds/autopilot/autopilot.k0sproject.io_plans.yaml), the core
// handlers (pkg/autopilot/controller/plans/core, planstatehandler_test.go
// TestHandle) and the k0supdate provider
// (pkg/autopilot/controller/plans/cmdprovider/k0supdate, newplan_test.go
// TestNewPlan, schedulable_test.go TestSchedulable,
// schedulablewait_test.go TestSchedulableWait).

// planRun runs doc to its end on a bus of nodes and returns the status.
func planRun(t *testing.T, doc *plan.Document, bus *autopilot.Bus, h *autopilot.CommandHandler) (*plan.Status, error) {
	t.Helper()
	if h == nil {
		h = &autopilot.CommandHandler{Sender: bus}
	}
	r, err := plan.NewRunner(converge.NewMemStore(), plan.RunnerConfig{Owner: "test", PollInterval: 1,
		Handlers: map[string]plan.CommandHandler{"k0supdate": h, "airgapupdate": h, "update": h}})
	require.NoError(t, err)
	require.NoError(t, r.Create(context.Background(), doc))
	return r.Run(context.Background(), doc.Spec.ID)
}

// TestK0sAcceptsAndCompletes: documents that k0s's CRD accepts decode, and
// those that leave nothing to do complete as k0s completes them, without
// signalling anyone: TestHandle cases NoPlanCommands and MarkCompletedEmpty
// (a plan without commands), and k0s's discovery that finds nothing when
// a group has no discovery or an empty static list.
func TestK0sAcceptsAndCompletes(t *testing.T) {
	const head = "apiVersion: autopilot.k0sproject.io/v1beta2\nkind: Plan\nmetadata: {name: autopilot}\nspec:\n  id: id123\n  timestamp: now\n  commands:\n"
	tests := []struct{ name, commands string }{
		{"no commands", "    []\n"},
		{"no commands (JSON)", ""},
		{"no target groups", "  - k0supdate: {version: v0.0.0, platforms: {linux-amd64: {url: http://localhost/dist/k0s}}, targets: {}}\n"},
		{"an empty static list", "  - k0supdate: {version: v0.0.0, platforms: {linux-amd64: {url: u}}, targets: {workers: {discovery: {static: {nodes: []}}}}}\n"},
		{"static without nodes", "  - k0supdate: {version: v0.0.0, platforms: {linux-amd64: {url: u}}, targets: {workers: {discovery: {static: {}}}}}\n"},
		{"a group without discovery", "  - k0supdate: {version: v0.0.0, platforms: {linux-amd64: {url: u}}, targets: {controllers: {discovery: {}}}}\n"},
		{"an airgap update of no workers", "  - airgapupdate: {version: v99.99.99, platforms: {theOS-theArch: {url: ''}}, workers: {discovery: {static: {nodes: []}}}}\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := head + tc.commands
			if tc.commands == "" {
				in = `{"apiVersion":"autopilot.k0sproject.io/v1beta2","kind":"Plan","spec":{"id":"id123","timestamp":"now","commands":[]}}`
			}
			doc, err := autopilot.Decode([]byte(in))
			require.NoError(t, err)
			bus := autopilot.NewBus(planNodes()...)
			st, err := planRun(t, doc, bus, nil)
			require.NoError(t, err)
			assert.Equal(t, plan.StateCompleted, st.State)
			for _, cs := range st.Commands {
				assert.Equal(t, plan.StateCompleted, cs.State)
			}
			assert.Empty(t, bus.Sent(), "nothing to signal")
		})
	}
}

// TestK0sAcceptsAtDecode: what the CRD accepts and k0s checks only while
// the plan runs decodes; the check becomes the state k0s sets.
func TestK0sAcceptsAtDecode(t *testing.T) {
	const head = "spec:\n  id: id123\n  timestamp: now\n  commands:\n  - k0supdate:\n"
	tests := []struct {
		name, body string
		nodes      []autopilot.Host
		state      plan.State
		target     plan.TargetState
	}{
		// The placeholder versions of k0s's integration tests
		// (inttest/ap-single, inttest/ap-removedapis) and its unit tests.
		{"version v0.0.0", "      version: v0.0.0\n      forceupdate: true\n      platforms: {linux-amd64: {url: http://localhost/dist/k0s}}\n      targets: {controllers: {discovery: {static: {nodes: [controller0]}}}}\n",
			nil, plan.StateCompleted, plan.TargetCompleted},
		{"version v99.99.99", "      version: v99.99.99\n      platforms: {linux-amd64: {url: http://localhost/dist/k0s}}\n      targets: {controllers: {discovery: {static: {nodes: [controller0]}}}}\n",
			nil, plan.StateCompleted, plan.TargetCompleted},
		{"version v1.2.3 of TestHandle", "      version: v1.2.3\n      targets: {workers: {discovery: {static: {nodes: [worker0]}}}}\n",
			nil, plan.StateCompleted, plan.TargetCompleted},
		// TestNewPlan's platform key, with the empty resource its cases use.
		{"platform theOS-theArch", "      version: v0.0.0\n      platforms: {theOS-theArch: {url: ''}}\n      targets: {workers: {discovery: {static: {nodes: [w]}}}}\n",
			[]autopilot.Host{{Name: "w", Kind: "worker", Platform: "theOS-theArch"}}, plan.StateCompleted, plan.TargetCompleted},
		// TestNewPlan case MissingWorkerWrongNodePlatform.
		{"a node on another platform", "      version: v0.0.0\n      platforms: {theOS-theArch: {url: ''}}\n      targets: {workers: {discovery: {static: {nodes: [w]}}}}\n",
			[]autopilot.Host{{Name: "w", Kind: "worker", Platform: "anotherOS-theArch"}}, plan.StateIncompleteTargets, plan.TargetMissingPlatform},
		// An empty node name: the CRD takes any string; k0s finds no such
		// node.
		{"an empty node name", "      version: v0.0.0\n      targets: {workers: {discovery: {static: {nodes: ['']}}}}\n",
			nil, plan.StateIncompleteTargets, plan.TargetMissing},
		// The CRD has no minimum; converge reads a limit below 1 as k0s's
		// default, 1.
		{"a concurrency of 0", "      version: v0.0.0\n      targets: {workers: {limits: {concurrent: 0}, discovery: {static: {nodes: [worker0]}}}}\n",
			nil, plan.StateCompleted, plan.TargetCompleted},
		{"a negative concurrency", "      version: v0.0.0\n      targets: {workers: {limits: {concurrent: -3}, discovery: {static: {nodes: [worker0]}}}}\n",
			nil, plan.StateCompleted, plan.TargetCompleted},
		// Static and selector both: k0s reads static first.
		{"static and selector", "      version: v0.0.0\n      targets: {workers: {discovery: {static: {nodes: [worker0]}, selector: {labels: x=y}}}}\n",
			nil, plan.StateCompleted, plan.TargetCompleted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := autopilot.Decode([]byte(head + tc.body))
			require.NoError(t, err)
			again, err := autopilot.Decode(mustEncode(t, doc))
			require.NoError(t, err, "encodes to a document that decodes")
			assert.Equal(t, doc, again)
			bus := autopilot.NewBus(append(planNodes(), tc.nodes...)...)
			bus.OnSignal = func(node string, _ autopilot.Signal) { _ = bus.Respond(node, plan.TargetCompleted, "") }
			st, err := planRun(t, doc, bus, nil)
			assert.Equal(t, tc.state, st.State)
			if tc.state.IsError() {
				require.ErrorIs(t, err, plan.ErrFailed)
			} else {
				require.NoError(t, err)
			}
			for _, ts := range st.Commands[0].Targets {
				for _, tg := range ts {
					assert.Equal(t, tc.target, tg.State, tg.Name)
				}
			}
		})
	}
}

func mustEncode(t *testing.T, doc *plan.Document) []byte {
	t.Helper()
	b, err := autopilot.Encode(doc)
	require.NoError(t, err)
	return b
}

// TestK0sStatesOfNewPlan mirrors TestNewPlan: missing nodes and platforms
// are IncompleteTargets with SignalMissingNode / SignalMissingPlatform,
// restricted kinds are Restricted with every target left SignalPending,
// and IncompleteTargets wins over Restricted.
func TestK0sStatesOfNewPlan(t *testing.T) {
	ctl := planGroup("controllers", 1, "controller0")
	wrk := planGroup("workers", 1, "worker0")
	tests := []struct {
		name     string
		nodes    []autopilot.Host
		restrict []string
		state    plan.State
		want     map[string]plan.TargetState
	}{
		{"ControllerAndWorker", planNodes(), nil, plan.StateSchedulableWait,
			map[string]plan.TargetState{"controller0": plan.TargetPending, "worker0": plan.TargetPending}},
		{"MissingController", []autopilot.Host{planWrk("worker0")}, nil, plan.StateIncompleteTargets,
			map[string]plan.TargetState{"controller0": plan.TargetMissing, "worker0": plan.TargetPending}},
		{"MissingWorker", []autopilot.Host{planCtl("controller0")}, nil, plan.StateIncompleteTargets,
			map[string]plan.TargetState{"controller0": plan.TargetPending, "worker0": plan.TargetMissing}},
		{"MissingControllerWrongNodePlatform", []autopilot.Host{{Name: "controller0", Kind: "controller", Platform: "anotherOS-theArch"}, planWrk("worker0")}, nil, plan.StateIncompleteTargets,
			map[string]plan.TargetState{"controller0": plan.TargetMissingPlatform, "worker0": plan.TargetPending}},
		{"MissingWorkerWrongNodePlatform", []autopilot.Host{planCtl("controller0"), {Name: "worker0", Kind: "worker", Platform: "anotherOS-theArch"}}, nil, plan.StateIncompleteTargets,
			map[string]plan.TargetState{"controller0": plan.TargetPending, "worker0": plan.TargetMissingPlatform}},
		{"ExcludedControllers", planNodes(), []string{"controller"}, plan.StateRestricted,
			map[string]plan.TargetState{"controller0": plan.TargetPending, "worker0": plan.TargetPending}},
		{"ExcludedWorkers", planNodes(), []string{"worker"}, plan.StateRestricted,
			map[string]plan.TargetState{"controller0": plan.TargetPending, "worker0": plan.TargetPending}},
		{"missing before excluded", []autopilot.Host{planCtl("controller0")}, []string{"controller"}, plan.StateIncompleteTargets,
			map[string]plan.TargetState{"controller0": plan.TargetPending, "worker0": plan.TargetMissing}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bus := autopilot.NewBus(tc.nodes...)
			h := &autopilot.CommandHandler{Sender: bus, Restrict: tc.restrict}
			cmd := planCmd("k0supdate", ctl, wrk)
			cs := &plan.CommandStatus{}
			c := &plan.CommandContext{PlanID: "id123", Command: cmd, Status: cs}
			state, err := h.NewPlan(context.Background(), c)
			require.NoError(t, err)
			assert.Equal(t, tc.state, state)
			assert.Equal(t, tc.want, targetStates(cs))
			assert.Empty(t, bus.Sent())
		})
	}
}

// TestK0sStatesOfSchedulableWait mirrors TestSchedulableWait: a node
// reporting a failure is SignalApplyFailed and the command ApplyFailed
// (SignalNodeApplyFailure); a pending node whose report shows that it
// completed this plan's command is adopted as SignalCompleted without a
// signal (WorkerPlanIDMatch), one whose report names another plan is not
// (WorkerNoPlanIDMatch); controllers are signalled one at a time whatever
// the limit (ControllersWorkersEnsureSchedulableWaitOnControllerPendingSignal).
func TestK0sStatesOfSchedulableWait(t *testing.T) {
	at := newPlanClock().Now()
	tgt := func(name string, s plan.TargetState) plan.TargetStatus {
		return plan.TargetStatus{Name: name, State: s, LastUpdatedTimestamp: at}
	}
	tests := []struct {
		name    string
		groups  []plan.CommandTargets
		targets map[string][]plan.TargetStatus
		// report is what a node reports before the step.
		report map[string]autopilot.Report
		state  plan.State
		want   map[string]plan.TargetState
	}{
		{name: "SignalNodeApplyFailure", groups: []plan.CommandTargets{planGroup("controllers", 1, "controller0")},
			targets: map[string][]plan.TargetStatus{"controllers": {tgt("controller0", plan.TargetSent)}},
			report:  map[string]autopilot.Report{"controller0": {SignalID: autopilot.SignalID("id123", 0, 0), State: plan.TargetApplyFailed, Reason: "no space"}},
			state:   plan.StateApplyFailed, want: map[string]plan.TargetState{"controller0": plan.TargetApplyFailed}},
		{name: "SignalNodeStatusSync", groups: []plan.CommandTargets{planGroup("controllers", 1, "controller0")},
			targets: map[string][]plan.TargetStatus{"controllers": {tgt("controller0", plan.TargetSent)}},
			report:  map[string]autopilot.Report{"controller0": {SignalID: autopilot.SignalID("id123", 0, 0), State: plan.TargetCompleted}},
			state:   plan.StateCompleted, want: map[string]plan.TargetState{"controller0": plan.TargetCompleted}},
		{name: "WorkerPlanIDMatch", groups: []plan.CommandTargets{planGroup("workers", 1, "worker0")},
			targets: map[string][]plan.TargetStatus{"workers": {tgt("worker0", plan.TargetPending)}},
			report:  map[string]autopilot.Report{"worker0": {SignalID: autopilot.SignalID("id123", 0, 0), State: plan.TargetCompleted}},
			state:   plan.StateCompleted, want: map[string]plan.TargetState{"worker0": plan.TargetCompleted}},
		{name: "WorkerPlanIDMatch of an earlier attempt", groups: []plan.CommandTargets{planGroup("workers", 1, "worker0")},
			targets: map[string][]plan.TargetStatus{"workers": {{Name: "worker0", State: plan.TargetPending, Attempt: 2, LastUpdatedTimestamp: at}}},
			report:  map[string]autopilot.Report{"worker0": {SignalID: autopilot.SignalID("id123", 0, 1), State: plan.TargetCompleted}},
			state:   plan.StateCompleted, want: map[string]plan.TargetState{"worker0": plan.TargetCompleted}},
		{name: "WorkerNoPlanIDMatch", groups: []plan.CommandTargets{planGroup("workers", 1, "worker0")},
			targets: map[string][]plan.TargetStatus{"workers": {tgt("worker0", plan.TargetPending)}},
			report:  map[string]autopilot.Report{"worker0": {SignalID: autopilot.SignalID("id999", 0, 0), State: plan.TargetCompleted}},
			state:   plan.StateSchedulable, want: map[string]plan.TargetState{"worker0": plan.TargetPending}},
		{name: "another command of the plan does not count", groups: []plan.CommandTargets{planGroup("workers", 1, "worker0")},
			targets: map[string][]plan.TargetStatus{"workers": {tgt("worker0", plan.TargetPending)}},
			report:  map[string]autopilot.Report{"worker0": {SignalID: autopilot.SignalID("id123", 1, 0), State: plan.TargetCompleted}},
			state:   plan.StateSchedulable, want: map[string]plan.TargetState{"worker0": plan.TargetPending}},
		{name: "a failure reported before the signal does not count", groups: []plan.CommandTargets{planGroup("workers", 1, "worker0")},
			targets: map[string][]plan.TargetStatus{"workers": {tgt("worker0", plan.TargetPending)}},
			report:  map[string]autopilot.Report{"worker0": {SignalID: autopilot.SignalID("id123", 0, 0), State: plan.TargetApplyFailed}},
			state:   plan.StateSchedulable, want: map[string]plan.TargetState{"worker0": plan.TargetPending}},
		{name: "ControllersOnlySignalingSent", groups: []plan.CommandTargets{planGroup("controllers", 3, "controller0", "controller1", "controller2")},
			targets: map[string][]plan.TargetStatus{"controllers": {tgt("controller0", plan.TargetPending), tgt("controller1", plan.TargetSent), tgt("controller2", plan.TargetPending)}},
			report:  map[string]autopilot.Report{"controller1": {SignalID: autopilot.SignalID("id123", 0, 0), State: plan.TargetSent}},
			state:   plan.StateSchedulableWait,
			want:    map[string]plan.TargetState{"controller0": plan.TargetPending, "controller1": plan.TargetSent, "controller2": plan.TargetPending}},
		{name: "WorkersOnlyBatch2OneAvailable", groups: []plan.CommandTargets{planGroup("workers", 2, "worker0", "worker1", "worker2")},
			targets: map[string][]plan.TargetStatus{"workers": {tgt("worker0", plan.TargetCompleted), tgt("worker1", plan.TargetPending), tgt("worker2", plan.TargetCompleted)}},
			state:   plan.StateSchedulable,
			want:    map[string]plan.TargetState{"worker0": plan.TargetCompleted, "worker1": plan.TargetPending, "worker2": plan.TargetCompleted}},
		{name: "ControllersWorkersEnsureSchedulableOnControllerCompletedWorkersPendingSignal",
			groups: []plan.CommandTargets{planGroup("controllers", 1, "controller0"), planGroup("workers", 1, "worker0")},
			targets: map[string][]plan.TargetStatus{"controllers": {tgt("controller0", plan.TargetCompleted)},
				"workers": {tgt("worker0", plan.TargetPending)}},
			state: plan.StateSchedulable, want: map[string]plan.TargetState{"controller0": plan.TargetCompleted, "worker0": plan.TargetPending}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sender := &reportSender{Bus: autopilot.NewBus(planCtl("controller0"), planCtl("controller1"), planCtl("controller2"),
				planWrk("worker0"), planWrk("worker1"), planWrk("worker2")), reports: tc.report}
			h := &autopilot.CommandHandler{Sender: sender}
			cs := &plan.CommandStatus{State: plan.StateSchedulableWait, Targets: tc.targets}
			c := &plan.CommandContext{PlanID: "id123", Command: planCmd("k0supdate", tc.groups...), Status: cs, Now: at}
			state, err := h.SchedulableWait(context.Background(), c)
			require.NoError(t, err)
			assert.Equal(t, tc.state, state)
			assert.Equal(t, tc.want, targetStates(cs))
			assert.Empty(t, sender.Sent(), "nothing signalled")
		})
	}
}

// targetStates maps each target of cs, whatever its group, to its state.
func targetStates(cs *plan.CommandStatus) map[string]plan.TargetState {
	got := map[string]plan.TargetState{}
	for _, ts := range cs.Targets {
		for _, tg := range ts {
			got[tg.Name] = tg.State
		}
	}
	return got
}

// reportSender is a Bus whose Read answers the reports it was given.
type reportSender struct {
	*autopilot.Bus
	reports map[string]autopilot.Report
}

func (s *reportSender) Read(ctx context.Context, node string) (autopilot.Report, error) {
	if r, ok := s.reports[node]; ok {
		return r, nil
	}
	return s.Bus.Read(ctx, node)
}

// TestK0sAdoptedNodeIsNeverSignalled runs a plan whose worker already did
// the command (its report shows this plan's command completed): it ends
// Completed and the worker gets no signal (TestSchedulableWait case
// WorkerPlanIDMatch, run end to end).
func TestK0sAdoptedNodeIsNeverSignalled(t *testing.T) {
	bus := autopilot.NewBus(planNodes()...)
	bus.OnSignal = func(node string, _ autopilot.Signal) { _ = bus.Respond(node, plan.TargetCompleted, "") }
	sender := &reportSender{Bus: bus, reports: map[string]autopilot.Report{
		"worker0": {SignalID: autopilot.SignalID("p1", 0, 0), State: plan.TargetCompleted}}}
	h := &autopilot.CommandHandler{Sender: sender}
	doc := planOf(planCmd("k0supdate", planGroup("controllers", 1, "controller0"), planGroup("workers", 1, "worker0")))
	sentToWorker := false
	r, err := plan.NewRunner(converge.NewMemStore(), plan.RunnerConfig{Owner: "t", PollInterval: 1, Handlers: map[string]plan.CommandHandler{"k0supdate": h},
		OnStep: func(_ string, _ plan.Step, st *plan.Status) {
			if tg := st.Commands[0].Target("workers", "worker0"); tg != nil && tg.State == plan.TargetSent {
				sentToWorker = true
			}
		}})
	require.NoError(t, err)
	require.NoError(t, r.Create(context.Background(), doc))
	st, err := r.Run(context.Background(), "p1")
	require.NoError(t, err)
	assert.Equal(t, plan.StateCompleted, st.State)
	assert.Equal(t, plan.TargetCompleted, st.Commands[0].Target("workers", "worker0").State)
	var signalled []string
	for _, d := range bus.Sent() {
		signalled = append(signalled, d.Node)
	}
	assert.Equal(t, []string{"controller0"}, signalled)
	assert.False(t, sentToWorker, "the worker was never to be signalled")
}

// TestK0sSchedulableCompletes mirrors TestSchedulable case
// ControllerCompletedNoExecute: Schedulable with every target completed
// completes the command and signals nothing; HappyMoveToSchedulableWait:
// a pending controller is signalled and the command waits.
func TestK0sSchedulableCompletes(t *testing.T) {
	at := newPlanClock().Now()
	bus := autopilot.NewBus(planCtl("controller0"))
	h := &autopilot.CommandHandler{Sender: bus}
	cmd := planCmd("k0supdate", planGroup("controllers", 1, "controller0"))
	cs := &plan.CommandStatus{State: plan.StateSchedulable, Targets: map[string][]plan.TargetStatus{
		"controllers": {{Name: "controller0", State: plan.TargetCompleted, LastUpdatedTimestamp: at}}}}
	state, err := h.Schedulable(context.Background(), &plan.CommandContext{PlanID: "id123", Command: cmd, Status: cs, Now: at})
	require.NoError(t, err)
	assert.Equal(t, plan.StateCompleted, state)
	assert.Equal(t, plan.TargetCompleted, cs.Targets["controllers"][0].State)

	cs.Targets["controllers"][0].State = plan.TargetPending
	state, err = h.Schedulable(context.Background(), &plan.CommandContext{PlanID: "id123", Command: cmd, Status: cs, Now: at})
	require.NoError(t, err)
	assert.Equal(t, plan.StateSchedulableWait, state)
	assert.Equal(t, plan.TargetSent, cs.Targets["controllers"][0].State)
	assert.Empty(t, bus.Sent(), "the signal goes out once the intent is stored")
}

// TestK0sControllerQuorum: before the next controller is signalled, every
// controller of the group must be ready (k0s docs/autopilot.md,
// "Controller Quorum Safety"): one that is not makes Schedulable wait
// without signalling; one that no longer exists is IncompleteTargets.
// Controllers go one at a time even with a limit of 3 ("Controllers
// Update Sequentially").
func TestK0sControllerQuorum(t *testing.T) {
	at := newPlanClock().Now()
	newCtx := func() (*plan.CommandContext, *plan.CommandStatus) {
		cs := &plan.CommandStatus{State: plan.StateSchedulable, Targets: map[string][]plan.TargetStatus{"controllers": {
			{Name: "controller0", State: plan.TargetCompleted, LastUpdatedTimestamp: at},
			{Name: "controller1", State: plan.TargetPending, LastUpdatedTimestamp: at},
			{Name: "controller2", State: plan.TargetPending, LastUpdatedTimestamp: at}}}}
		cmd := planCmd("k0supdate", planGroup("controllers", 3, "controller0", "controller1", "controller2"))
		return &plan.CommandContext{PlanID: "id123", Command: cmd, Status: cs, Now: at}, cs
	}
	states := func(cs *plan.CommandStatus) []plan.TargetState {
		var out []plan.TargetState
		for _, tg := range cs.Targets["controllers"] {
			out = append(out, tg.State)
		}
		return out
	}
	bus := autopilot.NewBus(planCtl("controller0"), planCtl("controller1"), planCtl("controller2"))
	h := &autopilot.CommandHandler{Sender: bus}

	require.NoError(t, bus.SetReady("controller0", false))
	c, cs := newCtx()
	state, err := h.Schedulable(context.Background(), c)
	require.NoError(t, err)
	assert.Equal(t, plan.StateSchedulable, state, "waits for the controller that just updated")
	assert.Equal(t, []plan.TargetState{plan.TargetCompleted, plan.TargetPending, plan.TargetPending}, states(cs))

	require.NoError(t, bus.SetReady("controller0", true))
	c, cs = newCtx()
	state, err = h.Schedulable(context.Background(), c)
	require.NoError(t, err)
	assert.Equal(t, plan.StateSchedulableWait, state)
	assert.Equal(t, []plan.TargetState{plan.TargetCompleted, plan.TargetSent, plan.TargetPending}, states(cs), "one controller at a time")

	bus.RemoveNode("controller0")
	c, cs = newCtx()
	state, err = h.Schedulable(context.Background(), c)
	require.NoError(t, err)
	assert.Equal(t, plan.StateIncompleteTargets, state)
	assert.Equal(t, plan.TargetMissing, cs.Targets["controllers"][0].State)
	assert.Contains(t, cs.Reason, `controller "controller0" no longer exists`)

	// Workers are not held by readiness, and take their limit.
	wbus := autopilot.NewBus(planWrk("worker0"), planWrk("worker1"))
	require.NoError(t, wbus.SetReady("worker0", false))
	wcs := &plan.CommandStatus{State: plan.StateSchedulable, Targets: map[string][]plan.TargetStatus{"workers": {
		{Name: "worker0", State: plan.TargetPending, LastUpdatedTimestamp: at}, {Name: "worker1", State: plan.TargetPending, LastUpdatedTimestamp: at}}}}
	state, err = (&autopilot.CommandHandler{Sender: wbus}).Schedulable(context.Background(),
		&plan.CommandContext{PlanID: "id123", Command: planCmd("k0supdate", planGroup("workers", 2, "worker0", "worker1")), Status: wcs, Now: at})
	require.NoError(t, err)
	assert.Equal(t, plan.StateSchedulableWait, state)
	assert.Equal(t, plan.TargetSent, wcs.Targets["workers"][0].State)
	assert.Equal(t, plan.TargetSent, wcs.Targets["workers"][1].State)
}
