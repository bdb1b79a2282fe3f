package plan_test

import (
	"context"
	"fmt"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// examplePlan returns a plan updating the workers one at a time.
func examplePlan(id string, workers ...string) *plan.Document {
	return &plan.Document{Spec: plan.Plan{ID: id, Commands: []plan.Command{{
		Kind:    "update",
		Targets: []plan.CommandTargets{{Group: "workers", Discovery: plan.CommandDiscovery{Static: workers}}},
	}}}}
}

// ExampleRunner_Abort aborts a rollout once its canary is done: the
// canary finishes, the other workers are not signalled and keep the
// reason; a retry later runs what was left.
func ExampleRunner_Abort() {
	ctx := context.Background()
	bus := autopilot.NewBus(
		autopilot.Host{Name: "canary", Kind: "worker"},
		autopilot.Host{Name: "w1", Kind: "worker"},
		autopilot.Host{Name: "w2", Kind: "worker"},
	)
	var runner *plan.Runner
	bus.OnSignal = func(node string, s autopilot.Signal) {
		_ = bus.Respond(node, plan.TargetCompleted, "")
		if node == "canary" {
			// An operator stops the rollout while the canary works.
			if err := runner.Abort(ctx, s.PlanID, "canary metrics look wrong"); err != nil {
				panic(err)
			}
		}
	}
	handler := &autopilot.CommandHandler{Sender: bus}
	runner, err := plan.NewRunner(converge.NewMemStore(), plan.RunnerConfig{
		Handlers:     map[string]plan.CommandHandler{"update": handler},
		PollInterval: time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	if err := runner.Create(ctx, examplePlan("rollout", "canary", "w1", "w2")); err != nil {
		panic(err)
	}
	status, err := runner.Run(ctx, "rollout")
	fmt.Println(err)
	for _, t := range status.Commands[0].Targets["workers"] {
		fmt.Printf("%s %s (%s)\n", t.Name, t.State, t.Reason)
	}

	// The metrics were fine after all: run the rest.
	if err := runner.Retry(ctx, "rollout"); err != nil {
		panic(err)
	}
	status, err = runner.Run(ctx, "rollout")
	if err != nil {
		panic(err)
	}
	fmt.Println(status.State)
	for _, d := range bus.Sent() {
		fmt.Println("signalled", d.Node, d.Signal.ID)
	}
	// Output:
	// plan: "rollout": command 0 (update): Aborted: canary metrics look wrong
	// canary SignalCompleted ()
	// w1 SignalAborted (canary metrics look wrong)
	// w2 SignalAborted (canary metrics look wrong)
	// Completed
	// signalled canary rollout/0/0
	// signalled w1 rollout/0/1
	// signalled w2 rollout/0/1
}

// ExampleRunner_Get runs a rollout over 1,000 workers, 100 at a time.
// Each stored step writes what it changed (a few hundred bytes per
// target), not the whole plan; Get reads the whole document back.
func ExampleRunner_Get() {
	ctx := context.Background()
	bus := autopilot.NewBus()
	workers := make([]string, 1000)
	for i := range workers {
		workers[i] = fmt.Sprintf("w%04d", i)
		bus.AddNode(autopilot.Host{Name: workers[i], Kind: "worker"})
	}
	bus.OnSignal = func(node string, _ autopilot.Signal) { _ = bus.Respond(node, plan.TargetCompleted, "") }
	runner, err := plan.NewRunner(converge.NewMemStore(), plan.RunnerConfig{
		Handlers:     map[string]plan.CommandHandler{"update": &autopilot.CommandHandler{Sender: bus}},
		PollInterval: time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	doc := examplePlan("big", workers...)
	doc.Spec.Commands[0].Targets[0].Concurrent = 100
	if err := runner.Create(ctx, doc); err != nil {
		panic(err)
	}
	if _, err := runner.Run(ctx, "big"); err != nil {
		panic(err)
	}
	stored, _, err := runner.Get(ctx, "big")
	if err != nil {
		panic(err)
	}
	completed := 0
	for _, t := range stored.Status.Commands[0].Targets["workers"] {
		if t.State == plan.TargetCompleted {
			completed++
		}
	}
	fmt.Println(stored.Status.State, completed, "workers completed")
	// Output:
	// Completed 1000 workers completed
}
