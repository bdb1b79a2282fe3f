package autopilot

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"

	"github.com/convergekit/converge/plan"
)

// k0sKinds are the command kinds of k0s autopilot that install a k0s
// version.
var k0sKinds = map[string]bool{"k0supdate": true, "airgapupdate": true}

// k0sVersion matches a k0s version of Kubernetes 1: "v1.MINOR.PATCH", an
// optional pre-release ("-rc.0"), and the k0s build ("+k0s.N").
var k0sVersion = regexp.MustCompile(`^v1\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?\+k0s\.(0|[1-9][0-9]*)$`)

// k0sPlatform matches a platform name: "<os>-<arch>", as "linux-amd64".
var k0sPlatform = regexp.MustCompile(`^[a-z0-9]+-[a-z0-9]+$`)

// ValidateCommand implements plan.CommandValidator, so that
// plan.Runner.Create rejects a k0s command that cannot do anything
// useful; Decode makes the same checks. A k0s command (k0supdate,
// airgapupdate) needs a version that is a k0s version of Kubernetes 1
// ("v1.30.4+k0s.0", "v1.31.1-rc.0+k0s.0"), and its platforms, when given,
// must map "<os>-<arch>" names to an object with a url. Commands of other
// kinds are not checked here. Errors are a *plan.FieldError naming
// the field, for example "spec.commands[0].k0supdate.version".
func (h *CommandHandler) ValidateCommand(index int, cmd plan.Command) error {
	return validateCommand(index, cmd)
}

func validateCommand(i int, c plan.Command) error {
	if !k0sKinds[c.Kind] {
		return nil
	}
	fail := func(field, reason string) error {
		return &plan.FieldError{Command: i, Field: c.Path(i) + "." + field, Reason: reason}
	}
	raw, ok := c.Spec["version"]
	if !ok {
		return fail("version", "missing: a k0s command needs the k0s version to install")
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return fail("version", fmt.Sprintf("want a string, got %s", raw))
	}
	if !k0sVersion.MatchString(v) {
		return fail("version", fmt.Sprintf("%q is not a k0s version of Kubernetes (as v1.30.4+k0s.0)", v))
	}
	raw, ok = c.Spec["platforms"]
	if !ok {
		return nil
	}
	var platforms map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &platforms); err != nil || platforms == nil {
		return fail("platforms", "want an object mapping platforms to {url: ...}")
	}
	for _, p := range slices.Sorted(maps.Keys(platforms)) {
		if !k0sPlatform.MatchString(p) {
			return fail("platforms."+p, "not a platform name (as linux-amd64)")
		}
		var url string
		if err := json.Unmarshal(platforms[p]["url"], &url); err != nil || url == "" {
			return fail("platforms."+p+".url", "must be a non-empty string")
		}
	}
	return nil
}
