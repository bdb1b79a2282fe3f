package autopilot_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// TestPlanStatusSymmetry checks that NewPlan fills a status entry per
// command, that a status that lost entries or IDs is repaired, and that a
// status that answers other commands is rejected without being touched.
func TestPlanStatusSymmetry(t *testing.T) {
	bus := autopilot.NewBus(planNodes()...)
	r := planRunner(t, nil, bus, plan.RunnerConfig{Now: newPlanClock().Now})
	ctx := context.Background()
	two := func() *plan.Document {
		return planOf(planCmd("update", planGroup("workers", 1, "worker0")), planCmd("k0supdate", planGroup("controllers", 1, "controller0")))
	}

	t.Run("NewPlan fills every entry at its index", func(t *testing.T) {
		doc := two()
		_, err := r.Step(ctx, doc)
		require.NoError(t, err)
		require.Len(t, doc.Status.Commands, 2)
		for i, cs := range doc.Status.Commands {
			assert.Equal(t, i, cs.ID)
			assert.Equal(t, doc.Spec.Commands[i].Kind, cs.Kind)
			assert.Equal(t, plan.StateSchedulableWait, cs.State)
		}
	})

	t.Run("missing trailing entries are filled, progress kept", func(t *testing.T) {
		doc := two()
		planSettle(t, r, doc)
		require.Equal(t, plan.TargetSent, planTarget(t, doc, 0, "workers", "worker0").State)
		progress := doc.Status.Commands[0]
		doc.Status.Commands = doc.Status.Commands[:1]
		step, err := r.Step(ctx, doc)
		require.NoError(t, err)
		assert.True(t, step.Changed)
		require.Len(t, doc.Status.Commands, 2)
		assert.Equal(t, progress, doc.Status.Commands[0], "the first command keeps its progress")
		assert.Equal(t, plan.StateSchedulableWait, doc.Status.Commands[1].State)
		assert.Equal(t, plan.TargetPending, planTarget(t, doc, 1, "controllers", "controller0").State)
		assert.Equal(t, plan.StateSchedulableWait, doc.Status.State)
		assert.Len(t, bus.Sent(), 1, "worker0 is not signalled again")
	})

	t.Run("wrong IDs and missing kinds are repaired", func(t *testing.T) {
		doc := two()
		_, err := r.Step(ctx, doc)
		require.NoError(t, err)
		doc.Status.Commands[0].ID = 7
		doc.Status.Commands[1].Kind = ""
		_, err = r.Step(ctx, doc)
		require.NoError(t, err)
		assert.Equal(t, 0, doc.Status.Commands[0].ID)
		assert.Equal(t, "k0supdate", doc.Status.Commands[1].Kind)
	})

	reject := []struct {
		name    string
		mangle  func(st *plan.Status)
		command int
	}{
		{name: "more entries than commands", command: 2, mangle: func(st *plan.Status) {
			st.Commands = append(st.Commands, plan.CommandStatus{ID: 2, Kind: "update"})
		}},
		{name: "an entry answers another kind", command: 1, mangle: func(st *plan.Status) {
			st.Commands[1].Kind = "airgapupdate"
		}},
	}
	for _, tc := range reject {
		t.Run("rejected: "+tc.name, func(t *testing.T) {
			doc := two()
			_, err := r.Step(ctx, doc)
			require.NoError(t, err)
			tc.mangle(doc.Status)
			before := doc.Status.Clone()
			_, err = r.Step(ctx, doc)
			var se *plan.FieldError
			require.ErrorAs(t, err, &se)
			require.ErrorIs(t, err, plan.ErrStatusMismatch)
			assert.NotErrorIs(t, err, plan.ErrInvalid, "a status mismatch is not an invalid spec")
			assert.Equal(t, tc.command, se.Command)
			assert.Equal(t, fmt.Sprintf("status.commands[%d]", tc.command), se.Field)
			assert.Equal(t, before, doc.Status, "nothing written")
		})
	}
}

// TestPlanStatusRetry checks plan.Status.Retry on its own.
func TestPlanStatusRetry(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &plan.Status{State: plan.StateTimedOut, Reason: "r", Commands: []plan.CommandStatus{
		{ID: 0, Kind: "a", State: plan.StateCompleted, Started: at, Targets: map[string][]plan.TargetStatus{
			"workers": {{Name: "w0", State: plan.TargetCompleted, LastUpdatedTimestamp: at}}}},
		{ID: 1, Kind: "b", State: plan.StateTimedOut, Reason: "r", Started: at, Targets: map[string][]plan.TargetStatus{
			"workers": {
				{Name: "w0", State: plan.TargetCompleted, LastUpdatedTimestamp: at},
				{Name: "w1", State: plan.TargetTimedOut, Reason: "slow", Attempt: 1, LastUpdatedTimestamp: at},
				{Name: "w2", State: plan.TargetSent, LastUpdatedTimestamp: at},
				{Name: "w3", State: plan.TargetPending, LastUpdatedTimestamp: at},
			}}},
	}}
	later := at.Add(time.Hour + 300*time.Millisecond)
	require.NoError(t, st.Retry(later))
	now := later // to the nanosecond: a target timeout counts from it
	assert.Equal(t, plan.StateSchedulableWait, st.State)
	assert.Empty(t, st.Reason)
	assert.Equal(t, plan.StateCompleted, st.Commands[0].State)
	assert.Equal(t, at, st.Commands[0].Started)
	cs := st.Commands[1]
	assert.Equal(t, plan.StateSchedulableWait, cs.State)
	assert.Empty(t, cs.Reason)
	assert.True(t, cs.Started.IsZero(), "the command timeout counts again")
	assert.Equal(t, []plan.TargetStatus{
		{Name: "w0", State: plan.TargetCompleted, LastUpdatedTimestamp: at},
		{Name: "w1", State: plan.TargetPending, Attempt: 2, LastUpdatedTimestamp: now},
		{Name: "w2", State: plan.TargetSent, LastUpdatedTimestamp: now},
		{Name: "w3", State: plan.TargetPending, LastUpdatedTimestamp: at},
	}, cs.Targets["workers"])
	require.ErrorIs(t, st.Retry(later), plan.ErrNotFailed)
}

// TestPlanStates checks the classification of states.
func TestPlanStates(t *testing.T) {
	for _, s := range []plan.State{"", plan.StateNewPlan, plan.StateSchedulableWait, plan.StateSchedulable, plan.StateCompleted} {
		assert.False(t, s.IsError(), s)
	}
	for _, s := range []plan.State{plan.StateInconsistentTargets, plan.StateIncompleteTargets, plan.StateRestricted,
		plan.StateTimedOut, plan.StateApplyFailed, plan.StateAborted, "Custom"} {
		assert.True(t, s.IsError(), s)
		assert.True(t, s.IsFinal(), s)
	}
	assert.True(t, plan.StateCompleted.IsFinal())
	assert.False(t, plan.StateSchedulable.IsFinal())
	for _, s := range []plan.TargetState{"", plan.TargetPending, plan.TargetSent, plan.TargetCompleted} {
		assert.False(t, s.IsFailure(), s)
	}
	for _, s := range []plan.TargetState{plan.TargetApplyFailed, plan.TargetTimedOut, plan.TargetMissing,
		plan.TargetMissingPlatform, plan.TargetInconsistent, plan.TargetAborted} {
		assert.True(t, s.IsFailure(), s)
	}
}

// TestPlanDiscovery checks discovery by function and by selector.
func TestPlanDiscovery(t *testing.T) {
	bus := autopilot.NewBus(planWrk("w0"), planWrk("w1"), planWrk("w2"))
	h := &autopilot.CommandHandler{Sender: bus, Select: func(ctx context.Context, sel plan.CommandSelector) ([]string, error) {
		if sel.Labels == "zone=b" {
			return []string{"w2"}, nil
		}
		return nil, fmt.Errorf("unknown selector %q", sel.Labels)
	}}
	r, err := plan.NewRunner(nil, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{"update": h}})
	require.NoError(t, err)
	doc := planOf(plan.Command{Kind: "update", Targets: []plan.CommandTargets{
		{Group: "workers", Discovery: plan.CommandDiscovery{Func: func(context.Context) ([]string, error) { return []string{"w0", "w1"}, nil }}},
		{Group: "zoneb", Order: 1, Discovery: plan.CommandDiscovery{Selector: &plan.CommandSelector{Labels: "zone=b"}}},
	}})
	_, err = r.Step(context.Background(), doc)
	require.NoError(t, err)
	assert.Equal(t, map[string]plan.TargetState{"update/workers/w0": plan.TargetPending, "update/workers/w1": plan.TargetPending,
		"update/zoneb/w2": plan.TargetPending}, planTargets(doc.Status))

	bad := planOf(plan.Command{Kind: "update", Targets: []plan.CommandTargets{
		{Group: "workers", Discovery: plan.CommandDiscovery{Selector: &plan.CommandSelector{Labels: "zone=z"}}}}})
	_, err = r.Step(context.Background(), bad)
	var ce *plan.CommandError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, plan.StateNewPlan, ce.State)
	assert.Nil(t, bad.Status, "a discovery error writes nothing")

	empty := planOf(plan.Command{Kind: "update", Targets: []plan.CommandTargets{
		{Group: "workers", Discovery: plan.CommandDiscovery{Func: func(context.Context) ([]string, error) { return []string{"w0", ""}, nil }}}}})
	planSettle(t, r, empty)
	assert.Equal(t, plan.StateIncompleteTargets, empty.Status.State)
	assert.Equal(t, `discovery of group "workers" returned an empty node name`, empty.Status.Commands[0].Reason)

	noSel := &autopilot.CommandHandler{Sender: bus}
	r2, err := plan.NewRunner(nil, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{"update": noSel}})
	require.NoError(t, err)
	_, err = r2.Step(context.Background(), bad)
	require.ErrorIs(t, err, autopilot.ErrNoSelector)
	named := planOf(plan.Command{Kind: "update", Targets: []plan.CommandTargets{
		{Group: "workers", Discovery: plan.CommandDiscovery{Function: "edge"}}}})
	_, err = r2.Step(context.Background(), named)
	require.ErrorIs(t, err, autopilot.ErrNoDiscover)
}

// TestPlanNamedDiscovery stores a plan whose targets come from a named
// discovery function and runs it; a plan with a Go function cannot be
// stored.
func TestPlanNamedDiscovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := planAutoBus(time.Second, nil, planWrk("w0"), planWrk("w1"))
		calls := 0
		h := &autopilot.CommandHandler{Sender: bus, Discover: map[string]plan.CommandDiscoverFunc{
			"edge": func(context.Context) ([]string, error) { calls++; return []string{"w1", "w0"}, nil },
		}}
		store := converge.NewMemStore()
		r, err := plan.NewRunner(store, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{"update": h}})
		require.NoError(t, err)
		doc, err := autopilot.Decode([]byte("spec: {id: p1, commands: [{update: {targets: {workers: {discovery: {function: edge}}}}}]}"))
		require.NoError(t, err)
		assert.Equal(t, "edge", doc.Spec.Commands[0].Targets[0].Discovery.Function)
		require.NoError(t, r.Create(context.Background(), doc))
		st, err := r.Run(context.Background(), "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		assert.Equal(t, 1, calls, "discovered once, in NewPlan")
		var order []string
		for _, d := range bus.Sent() {
			order = append(order, d.Node)
		}
		assert.Equal(t, []string{"w1", "w0"}, order, "targets run in the order discovered")

		withFunc := planOf(plan.Command{Kind: "update", Targets: []plan.CommandTargets{
			{Group: "workers", Discovery: plan.CommandDiscovery{Func: func(context.Context) ([]string, error) { return nil, nil }}}}})
		withFunc.Spec.ID = "p2"
		require.ErrorIs(t, r.Create(context.Background(), withFunc), plan.ErrInvalid)
		err = withFunc.Validate()
		require.ErrorIs(t, err, plan.ErrInvalid)
	})
}

// TestPlanClone checks that clones share nothing mutable.
func TestPlanClone(t *testing.T) {
	doc := planDoc(t, "testdata/plan/k0s-shape.yaml")
	p := doc.Spec.Clone()
	require.Equal(t, doc.Spec, p)
	p.Commands[0].Spec["version"][1] = 'X'
	p.Commands[1].Targets[0].Discovery.Static[0] = "other"
	p.Commands[1].Targets[1].Concurrent = 9
	assert.Equal(t, planDoc(t, "testdata/plan/k0s-shape.yaml").Spec, doc.Spec)

	st := doc.Status.Clone()
	st.Commands[0].Targets["workers"][0].State = plan.TargetApplyFailed
	st.Commands[1].State = plan.StateApplyFailed
	assert.Equal(t, planDoc(t, "testdata/plan/k0s-shape.yaml").Status, doc.Status)
	assert.Nil(t, (*plan.Status)(nil).Clone())
}

// TestPlanSignalBus covers the node side of the in-process bus.
func TestPlanSignalBus(t *testing.T) {
	ctx := context.Background()
	bus := autopilot.NewBus(planWrk("w0"))
	_, err := bus.Probe(ctx, "nope")
	require.ErrorIs(t, err, autopilot.ErrHostNotFound)
	require.ErrorIs(t, bus.Send(ctx, "nope", autopilot.Signal{}), autopilot.ErrHostNotFound)
	require.ErrorIs(t, bus.Respond("w0", plan.TargetCompleted, ""), autopilot.ErrNoSignal)
	rep, err := bus.Read(ctx, "w0")
	require.NoError(t, err)
	assert.Equal(t, autopilot.Report{}, rep)

	require.NoError(t, bus.Send(ctx, "w0", autopilot.Signal{ID: autopilot.SignalID("p", 1, 2)}))
	rep, err = bus.Read(ctx, "w0")
	require.NoError(t, err)
	assert.Equal(t, autopilot.Report{SignalID: "p/1/2", State: plan.TargetSent}, rep)
	require.NoError(t, bus.Respond("w0", plan.TargetApplyFailed, "no space"))
	rep, err = bus.Read(ctx, "w0")
	require.NoError(t, err)
	assert.Equal(t, autopilot.Report{SignalID: "p/1/2", State: plan.TargetApplyFailed, Reason: "no space"}, rep)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = bus.Read(cancelled, "w0")
	require.ErrorIs(t, err, context.Canceled)
	bus.RemoveNode("w0")
	_, ok := bus.Last("w0")
	assert.False(t, ok)
}

// Example runs a two-command plan over an in-process signal
// bus whose nodes answer at once, and prints the final status as YAML.
func Example() {
	bus := autopilot.NewBus(
		autopilot.Host{Name: "controller0", Kind: "controller", Platform: "linux-amd64"},
		autopilot.Host{Name: "worker0", Kind: "worker", Platform: "linux-amd64"},
	)
	bus.OnSignal = func(node string, s autopilot.Signal) {
		_ = bus.Respond(node, plan.TargetCompleted, "")
	}
	handler := &autopilot.CommandHandler{Sender: bus}
	runner, err := plan.NewRunner(converge.NewMemStore(), plan.RunnerConfig{
		Handlers:     map[string]plan.CommandHandler{"airgapupdate": handler, "k0supdate": handler},
		PollInterval: time.Millisecond,
		Now:          func() time.Time { return time.Date(2026, 5, 11, 19, 13, 2, 0, time.UTC) },
	})
	if err != nil {
		panic(err)
	}
	doc, err := autopilot.Decode([]byte(`
spec:
  id: id123
  commands:
  - airgapupdate:
      version: v1.30.4+k0s.0
      platforms: {linux-amd64: {url: "https://example.invalid/bundle"}}
      workers: {discovery: {static: {nodes: [worker0]}}}
  - k0supdate:
      version: v1.30.4+k0s.0
      platforms: {linux-amd64: {url: "https://example.invalid/k0s"}}
      targets:
        controllers: {discovery: {static: {nodes: [controller0]}}}
        workers: {discovery: {static: {nodes: [worker0]}}, limits: {concurrent: 2}}
`))
	if err != nil {
		panic(err)
	}
	if err := runner.Create(context.Background(), doc); err != nil {
		panic(err)
	}
	status, err := runner.Run(context.Background(), doc.Spec.ID)
	if err != nil {
		panic(err)
	}
	out, err := yaml.Marshal(status)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(out))
	for _, d := range bus.Sent() {
		fmt.Println("signalled", d.Node, d.Signal.ID)
	}
	// Output:
	// commands:
	// - airgapupdate:
	//     workers:
	//     - lastUpdatedTimestamp: "2026-05-11T19:13:02Z"
	//       name: worker0
	//       state: SignalCompleted
	//   id: 0
	//   startedTimestamp: "2026-05-11T19:13:02Z"
	//   state: Completed
	// - id: 1
	//   k0supdate:
	//     controllers:
	//     - lastUpdatedTimestamp: "2026-05-11T19:13:02Z"
	//       name: controller0
	//       state: SignalCompleted
	//     workers:
	//     - lastUpdatedTimestamp: "2026-05-11T19:13:02Z"
	//       name: worker0
	//       state: SignalCompleted
	//   startedTimestamp: "2026-05-11T19:13:02Z"
	//   state: Completed
	// state: Completed
	// signalled worker0 id123/0/0
	// signalled controller0 id123/1/0
	// signalled worker0 id123/1/0
}
