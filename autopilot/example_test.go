package autopilot_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// Decode refuses what k0s's Plan CRD refuses, naming the field: here a
// misspelt field of a k0s update. What the CRD accepts decodes, including
// the placeholder versions of k0s's own tests.
func ExampleDecode_invalid() {
	_, err := autopilot.Decode([]byte(`
spec:
  id: upgrade
  timestamp: now
  commands:
  - k0supdate:
      verison: v1.34.1+k0s.0
      targets:
        workers: {discovery: {static: {nodes: [worker0]}}}
`))
	var fe *plan.FieldError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field)
	}
	fmt.Println(err)
	// Output:
	// spec.commands[0].k0supdate.verison
	// plan: spec.commands[0].k0supdate.verison: unknown field of a k0supdate command
}

// ExampleBus_Send shows a node that acts once on a signal sent twice, as a
// runner that resumes a plan may send it when it cannot tell whether the
// node got it: the repeat has the same ID.
func ExampleBus_Send() {
	ctx := context.Background()
	bus := autopilot.NewBus(autopilot.Host{Name: "worker0", Kind: "worker"})
	bus.OnSignal = func(node string, s autopilot.Signal) { fmt.Println(node, "acts on", s.ID) }
	sig := autopilot.Signal{ID: autopilot.SignalID("plan1", 0, 0), PlanID: "plan1", Kind: "update"}
	for range 2 {
		if err := bus.Send(ctx, "worker0", sig); err != nil {
			panic(err)
		}
	}
	for _, d := range bus.Sent() {
		fmt.Println("delivered", d.Signal.ID, "repeat:", d.Repeat)
	}
	// Output:
	// worker0 acts on plan1/0/0
	// delivered plan1/0/0 repeat: false
	// delivered plan1/0/0 repeat: true
}
