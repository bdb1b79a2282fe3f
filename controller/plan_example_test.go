package controller_test

import (
	"context"
	"fmt"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/plan"
)

// ExamplePlans runs a plan as an object of the object
// controller: the object's lifecycle state is the plan's state, and every
// transition is in the controller's history.
func ExamplePlans() {
	bus := autopilot.NewBus(
		autopilot.Host{Name: "controller0", Kind: "controller"},
		autopilot.Host{Name: "worker0", Kind: "worker"},
		autopilot.Host{Name: "worker1", Kind: "worker"},
	)
	bus.OnSignal = func(node string, s autopilot.Signal) { _ = bus.Respond(node, plan.TargetCompleted, "") }
	finished := make(chan plan.State, 1)
	runner, err := plan.NewRunner(nil, plan.RunnerConfig{
		Handlers:     map[string]plan.CommandHandler{"update": &autopilot.CommandHandler{Sender: bus}},
		PollInterval: time.Millisecond,
		OnStep: func(id string, step plan.Step, st *plan.Status) {
			if step.Done {
				finished <- st.State
			}
		},
	})
	if err != nil {
		panic(err)
	}
	store := converge.NewMemStore()
	ctrl, err := controller.New(controller.Config{Kind: "plan", Handler: controller.Plans(runner), Store: store})
	if err != nil {
		panic(err)
	}
	doc, err := autopilot.Decode([]byte(`
spec:
  id: rollout-1
  commands:
  - update:
      version: "2.0"
      targets:
        controllers: {discovery: {static: {nodes: [controller0]}}}
        workers: {discovery: {static: {nodes: [worker0, worker1]}}, limits: {concurrent: 2}}
`))
	if err != nil {
		panic(err)
	}
	state, data, err := controller.PlanObject(doc)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- ctrl.Run(ctx) }()
	if err := ctrl.Add(ctx, doc.Spec.ID, state, data); err != nil {
		panic(err)
	}
	fmt.Println("plan", <-finished)
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	hist, err := ctrl.History(context.Background(), "rollout-1")
	if err != nil {
		panic(err)
	}
	for _, h := range hist {
		fmt.Printf("%s -> %s (%s)\n", h.From, h.To, h.Reason)
	}
	// Output:
	// plan Completed
	//  -> NewPlan (added)
	// NewPlan -> SchedulableWait (plan)
	// SchedulableWait -> Schedulable (command 0 (update): SchedulableWait -> Schedulable)
	// Schedulable -> SchedulableWait (command 0 (update): Schedulable -> SchedulableWait)
	// SchedulableWait -> Schedulable (command 0 (update): SchedulableWait -> Schedulable)
	// Schedulable -> SchedulableWait (command 0 (update): Schedulable -> SchedulableWait)
	// SchedulableWait -> Completed (command 0 (update): SchedulableWait -> Completed)
}
