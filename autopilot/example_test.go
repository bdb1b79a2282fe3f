package autopilot_test

import (
	"errors"
	"fmt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
)

// Decode refuses a plan that could not do anything useful, naming the
// field: here a k0s update to a version that is not a k0s version.
func ExampleDecode_invalid() {
	_, err := autopilot.Decode([]byte(`
spec:
  id: upgrade
  commands:
  - k0supdate:
      version: latest
      targets:
        workers: {discovery: {static: {nodes: [worker0]}}}
`))
	var fe *converge.PlanFieldError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field)
	}
	fmt.Println(err)
	// Output:
	// spec.commands[0].k0supdate.version
	// converge: plan spec.commands[0].k0supdate.version: "latest" is not a k0s version of Kubernetes (as v1.30.4+k0s.0)
}
