package autopilot_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planClock is a manual clock for step-by-step tests.
type planClock struct{ t time.Time }

func (c *planClock) Now() time.Time          { return c.t }
func (c *planClock) Advance(d time.Duration) { c.t = c.t.Add(d) }
func newPlanClock() *planClock               { return &planClock{t: time.Date(2026, 5, 11, 19, 13, 2, 0, time.UTC)} }
func planNodes() []autopilot.Host {
	return []autopilot.Host{planCtl("controller0"), planWrk("worker0")}
}
func planCtl(name string) autopilot.Host {
	return autopilot.Host{Name: name, Kind: "controller", Platform: "linux-amd64"}
}
func planWrk(name string) autopilot.Host {
	return autopilot.Host{Name: name, Kind: "worker", Platform: "linux-amd64"}
}
func planLoad(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}
func planDoc(t *testing.T, path string) *plan.Document {
	t.Helper()
	doc, err := autopilot.Decode(planLoad(t, path))
	require.NoError(t, err)
	return doc
}

// planRunner returns a runner whose handlers signal through bus for the two
// k0s kinds.
func planRunner(t *testing.T, store converge.Store, bus autopilot.Sender, cfg plan.RunnerConfig) *plan.Runner {
	t.Helper()
	h := &autopilot.CommandHandler{Sender: bus}
	if cfg.Handlers == nil {
		cfg.Handlers = map[string]plan.CommandHandler{"airgapupdate": h, "k0supdate": h, "update": h}
	}
	r, err := plan.NewRunner(store, cfg)
	require.NoError(t, err)
	return r
}

// planTargets flattens a status to "cmd/group/name" -> state.
func planTargets(st *plan.Status) map[string]plan.TargetState {
	out := map[string]plan.TargetState{}
	for _, cs := range st.Commands {
		for g, ts := range cs.Targets {
			for _, tg := range ts {
				out[cs.Kind+"/"+g+"/"+tg.Name] = tg.State
			}
		}
	}
	return out
}

func planCmdStates(st *plan.Status) []plan.State {
	var out []plan.State
	for _, cs := range st.Commands {
		out = append(out, cs.State)
	}
	return out
}

// planSettle steps until a step changes nothing, returning the last step.
func planSettle(t *testing.T, r *plan.Runner, doc *plan.Document) plan.Step {
	t.Helper()
	for i := 0; i < 1000; i++ {
		step, err := r.Step(context.Background(), doc)
		require.NoError(t, err)
		if !step.Changed || step.Done {
			return step
		}
	}
	t.Fatal("plan did not settle")
	return plan.Step{}
}

// TestPlanAutopilotSequence replays the k0s autopilot multi-command example:
// an airgap update to worker0, then a k0s update to controller0 and then
// worker0, checking the status after every transition.
func TestPlanAutopilotSequence(t *testing.T) {
	const (
		sw    = plan.StateSchedulableWait
		sched = plan.StateSchedulable
		done  = plan.StateCompleted
		pend  = plan.TargetPending
		sent  = plan.TargetSent
		compl = plan.TargetCompleted
	)
	clock := newPlanClock()
	bus := autopilot.NewBus(planNodes()...)
	r := planRunner(t, nil, bus, plan.RunnerConfig{Now: clock.Now})
	doc := planDoc(t, "testdata/plan/autopilot-plan.yaml")

	type target = map[string]plan.TargetState
	steps := []struct {
		name      string
		respond   string // node that completes its signal before the step
		changed   bool
		plan      plan.State
		commands  []plan.State
		targets   target
		golden    string
		signalled []string
	}{
		{name: "NewPlan fills every command", changed: true, plan: sw, commands: []plan.State{sw, sw},
			targets: target{"airgapupdate/workers/worker0": pend, "k0supdate/controllers/controller0": pend, "k0supdate/workers/worker0": pend}},
		{name: "airgapupdate can proceed", changed: true, plan: sched, commands: []plan.State{sched, sw},
			targets: target{"airgapupdate/workers/worker0": pend, "k0supdate/controllers/controller0": pend, "k0supdate/workers/worker0": pend}},
		{name: "airgapupdate records that worker0 is signalled", changed: true, plan: sw, commands: []plan.State{sw, sw},
			targets:   target{"airgapupdate/workers/worker0": sent, "k0supdate/controllers/controller0": pend, "k0supdate/workers/worker0": pend},
			golden:    "testdata/plan/autopilot-status.yaml",
			signalled: []string{}},
		{name: "airgapupdate signals worker0", changed: false, plan: sw, commands: []plan.State{sw, sw},
			targets:   target{"airgapupdate/workers/worker0": sent, "k0supdate/controllers/controller0": pend, "k0supdate/workers/worker0": pend},
			signalled: []string{"worker0 id123/0/0"}},
		{name: "worker0 still working", changed: false, plan: sw, commands: []plan.State{sw, sw},
			targets:   target{"airgapupdate/workers/worker0": sent, "k0supdate/controllers/controller0": pend, "k0supdate/workers/worker0": pend},
			signalled: []string{"worker0 id123/0/0"}},
		{name: "worker0 done: airgapupdate completed", respond: "worker0", changed: true, plan: sw, commands: []plan.State{done, sw},
			targets: target{"airgapupdate/workers/worker0": compl, "k0supdate/controllers/controller0": pend, "k0supdate/workers/worker0": pend}},
		{name: "k0supdate can proceed", changed: true, plan: sched, commands: []plan.State{done, sched},
			targets: target{"airgapupdate/workers/worker0": compl, "k0supdate/controllers/controller0": pend, "k0supdate/workers/worker0": pend}},
		{name: "k0supdate picks controller0 first", changed: true, plan: sw, commands: []plan.State{done, sw},
			targets:   target{"airgapupdate/workers/worker0": compl, "k0supdate/controllers/controller0": sent, "k0supdate/workers/worker0": pend},
			signalled: []string{"worker0 id123/0/0"}},
		{name: "k0supdate signals controller0; workers wait for the controllers", changed: false, plan: sw, commands: []plan.State{done, sw},
			targets:   target{"airgapupdate/workers/worker0": compl, "k0supdate/controllers/controller0": sent, "k0supdate/workers/worker0": pend},
			signalled: []string{"worker0 id123/0/0", "controller0 id123/1/0"}},
		{name: "controller0 done: workers can proceed", respond: "controller0", changed: true, plan: sched, commands: []plan.State{done, sched},
			targets: target{"airgapupdate/workers/worker0": compl, "k0supdate/controllers/controller0": compl, "k0supdate/workers/worker0": pend}},
		{name: "k0supdate records that worker0 is signalled", changed: true, plan: sw, commands: []plan.State{done, sw},
			targets:   target{"airgapupdate/workers/worker0": compl, "k0supdate/controllers/controller0": compl, "k0supdate/workers/worker0": sent},
			signalled: []string{"worker0 id123/0/0", "controller0 id123/1/0"}},
		{name: "k0supdate signals worker0", changed: false, plan: sw, commands: []plan.State{done, sw},
			targets:   target{"airgapupdate/workers/worker0": compl, "k0supdate/controllers/controller0": compl, "k0supdate/workers/worker0": sent},
			signalled: []string{"worker0 id123/0/0", "controller0 id123/1/0", "worker0 id123/1/0"}},
		{name: "worker0 done: plan completed", respond: "worker0", changed: true, plan: done, commands: []plan.State{done, done},
			targets: target{"airgapupdate/workers/worker0": compl, "k0supdate/controllers/controller0": compl, "k0supdate/workers/worker0": compl},
			golden:  "testdata/plan/autopilot-completed.yaml"},
		{name: "completed plan stays completed", changed: false, plan: done, commands: []plan.State{done, done},
			targets: target{"airgapupdate/workers/worker0": compl, "k0supdate/controllers/controller0": compl, "k0supdate/workers/worker0": compl}},
	}
	for i, s := range steps {
		if s.respond != "" {
			require.NoError(t, bus.Respond(s.respond, plan.TargetCompleted, ""), s.name)
		}
		step, err := r.Step(context.Background(), doc)
		require.NoError(t, err, s.name)
		assert.Equal(t, s.changed, step.Changed, "step %d %s: changed", i, s.name)
		assert.Equal(t, s.plan, doc.Status.State, "step %d %s: plan state", i, s.name)
		assert.Equal(t, s.commands, planCmdStates(doc.Status), "step %d %s: command states", i, s.name)
		assert.Equal(t, s.targets, planTargets(doc.Status), "step %d %s: targets", i, s.name)
		assert.Equal(t, s.plan == done, step.Done, "step %d %s: done", i, s.name)
		if s.signalled != nil {
			got := []string{}
			for _, d := range bus.Sent() {
				got = append(got, d.Node+" "+d.Signal.ID)
			}
			assert.Equal(t, s.signalled, got, "step %d %s: signals", i, s.name)
		}
		if s.golden != "" {
			out, err := yaml.Marshal(doc)
			require.NoError(t, err)
			if os.Getenv("PLAN_UPDATE_GOLDEN") != "" {
				require.NoError(t, os.WriteFile(s.golden, out, 0o644))
			}
			assert.Equal(t, string(planLoad(t, s.golden)), string(out), "step %d %s: document", i, s.name)
		}
		clock.Advance(time.Minute)
	}
	assert.Len(t, bus.Sent(), 3, "each target signalled once per command")
	sig, ok := bus.Last("controller0")
	require.True(t, ok)
	assert.Equal(t, autopilot.Signal{ID: "id123/1/0", PlanID: "id123", Command: 1, Kind: "k0supdate", Group: "controllers",
		Spec: doc.Spec.Commands[1].Spec}, sig)
	assert.JSONEq(t, `"v1.30.4+k0s.0"`, string(sig.Spec["version"]))
}
