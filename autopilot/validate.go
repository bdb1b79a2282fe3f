package autopilot

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/convergekit/converge/internal/wire"
	"github.com/convergekit/converge/plan"
)

// k0sFields are, per command kind of k0s autopilot, the keys of its body
// that k0s's Plan CRD (autopilot.k0sproject.io/v1beta2) defines, besides
// the target groups, which the plan package reads. The CRD's schema is
// structural, so the API server refuses (with strict field validation)
// any other key; Decode does the same.
var k0sFields = map[string]map[string]bool{
	"k0supdate":    {"version": true, "forceupdate": true, "platforms": true},
	"airgapupdate": {"version": true, "platforms": true},
}

// ValidateCommand implements plan.CommandValidator, so that
// plan.Runner.Create checks a plan built in Go as Decode checks a
// document. For the k0s commands (k0supdate, airgapupdate) it makes the
// checks of k0s's Plan CRD: the fields the CRD defines, with the types it
// gives them (version a string, forceupdate a boolean, platforms an object
// mapping a platform name to {url, sha256} strings, url required), and no
// other field. Like the CRD, it takes any version string and any platform
// name: k0s's own tests run "v0.0.0" and "theOS-theArch". What k0s checks
// while a plan runs (a node that does not exist, a platform without a
// payload) becomes the state k0s sets then (see CommandHandler), not an
// error here. Commands of other kinds are not checked. Errors are a
// *plan.FieldError naming the field, for example
// "spec.commands[0].k0supdate.version".
func (h *CommandHandler) ValidateCommand(index int, cmd plan.Command) error {
	return validateCommand(index, cmd)
}

// k0sResource is a platform's payload in a k0s command.
type k0sResource struct {
	URL    wire.Field[string] `json:"url"`
	Sha256 wire.Field[string] `json:"sha256"`
}

func validateCommand(i int, c plan.Command) error {
	fields, ok := k0sFields[c.Kind]
	if !ok {
		return nil
	}
	fail := func(field, reason string) error {
		return &plan.FieldError{Command: i, Field: c.Path(i) + "." + field, Reason: reason}
	}
	for k := range c.Spec {
		if !fields[k] {
			// The first in order, so that the error does not depend on
			// the map's.
			for _, k := range slices.Sorted(maps.Keys(c.Spec)) {
				if !fields[k] {
					return fail(k, fmt.Sprintf("unknown field of a %s command", c.Kind))
				}
			}
		}
	}
	raw, ok := c.Spec["version"]
	if !ok {
		return fail("version", "missing: a k0s command needs the version to install")
	}
	var v string
	if wire.Decode(raw, &v) != nil {
		return fail("version", fmt.Sprintf("want a string, got %s", raw))
	}
	if raw, ok := c.Spec["forceupdate"]; ok {
		var b bool
		if wire.Decode(raw, &b) != nil {
			return fail("forceupdate", fmt.Sprintf("want a boolean, got %s", raw))
		}
	}
	raw, ok = c.Spec["platforms"]
	if !ok {
		return nil
	}
	var platforms map[string]k0sResource
	if p := wire.Decode(raw, &platforms); p != nil {
		field := "platforms"
		if p.Path != "" {
			field += "." + p.Path
		}
		switch {
		case p.Unknown:
			return fail(field, "unknown field of a platform's resource")
		case strings.Count(p.Path, ".") == 1:
			return fail(field, fmt.Sprintf("want a string: %v", p.Err))
		case p.Path != "":
			return fail(field, "want an object {url: ..., sha256: ...}")
		}
		return fail(field, "want an object mapping platforms to {url: ...}")
	}
	if platforms == nil {
		return fail("platforms", "want an object mapping platforms to {url: ...}")
	}
	for _, res := range platforms {
		if !res.URL.Set {
			for _, p := range slices.Sorted(maps.Keys(platforms)) {
				if !platforms[p].URL.Set {
					return fail("platforms."+p+".url", "missing")
				}
			}
		}
	}
	return nil
}

// platformURLs returns the platforms of a command's spec that name a
// payload, read by the strict decoder as every document is, or nil when
// the command has no platforms.
func platformURLs(spec map[string]json.RawMessage) (map[string]jsontext.Value, error) {
	raw, ok := spec["platforms"]
	if !ok {
		return nil, nil
	}
	var platforms map[string]jsontext.Value
	if p := wire.Decode(raw, &platforms); p != nil {
		return nil, p.Err
	}
	return platforms, nil
}
