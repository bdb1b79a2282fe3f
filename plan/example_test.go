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

// Example rolls a restart over two workers, one at a time, with a handler
// made of functions. Schedulable records the intent (the next worker is
// sent the command); SchedulableWait, once that is stored, does the work
// and says what comes next, so a runner that dies in between restarts no
// worker twice.
func Example() {
	ctx := context.Background()
	restart := plan.CommandHandlerFuncs{
		// NewPlan finds the command's targets: every worker, pending.
		NewPlanFunc: func(_ context.Context, c *plan.CommandContext) (plan.State, error) {
			for _, w := range c.Command.Targets[0].Discovery.Static {
				c.SetTarget("workers", w, plan.TargetPending, "")
			}
			return plan.StateSchedulableWait, nil
		},
		SchedulableWaitFunc: func(_ context.Context, c *plan.CommandContext) (plan.State, error) {
			pending := false
			for _, t := range c.Status.Targets["workers"] {
				switch t.State {
				case plan.TargetSent:
					fmt.Println("restart", t.Name)
					c.SetTarget("workers", t.Name, plan.TargetCompleted, "")
				case plan.TargetPending:
					pending = true
				}
			}
			if pending {
				return plan.StateSchedulable, nil
			}
			return plan.StateCompleted, nil
		},
		SchedulableFunc: func(_ context.Context, c *plan.CommandContext) (plan.State, error) {
			for _, t := range c.Status.Targets["workers"] {
				if t.State == plan.TargetPending {
					c.SetTarget("workers", t.Name, plan.TargetSent, "")
					break
				}
			}
			return plan.StateSchedulableWait, nil
		},
	}
	runner, err := plan.NewRunner(converge.NewMemStore(), plan.RunnerConfig{
		Handlers: map[string]plan.CommandHandler{"restart": restart},
	})
	if err != nil {
		panic(err)
	}
	doc := &plan.Document{Spec: plan.Plan{ID: "nightly", Commands: []plan.Command{{
		Kind:    "restart",
		Targets: []plan.CommandTargets{{Group: "workers", Discovery: plan.CommandDiscovery{Static: []string{"w1", "w2"}}}},
	}}}}
	if err := runner.Create(ctx, doc); err != nil {
		panic(err)
	}
	status, err := runner.Run(ctx, "nightly")
	if err != nil {
		panic(err)
	}
	fmt.Println(status.State, status.Commands[0].State)
	// Output:
	// restart w1
	// restart w2
	// Completed Completed
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
