package autopilot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"

	"github.com/convergekit/converge/plan"
)

// Decode decodes a plan document from YAML or JSON and validates its spec.
// Timestamps are read in UTC. Decoding is strict: unknown fields (outside
// metadata), repeated keys, values of the wrong type and data after the
// document are errors. Errors are a *plan.DecodeError naming the
// command index and the field (it matches plan.ErrDecode; a
// repeated key is named by its path in YAML as in JSON), or a
// *plan.FieldError for a plan that decodes but cannot run: one
// that plan.Plan.Validate rejects (a command without targets, an empty
// static node list, ...), or a k0s command with a version or platforms
// CommandHandler.ValidateCommand rejects.
//
// A JSON object is read as it is; anything else is YAML, which
// sigs.k8s.io/yaml converts to JSON (refusing repeated keys); the JSON is
// then read by the strict decoder of plan.Document.
func Decode(data []byte) (*plan.Document, error) {
	j := data
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		var err error
		if j, err = yaml.YAMLToJSONStrict(data); err != nil {
			return nil, yamlError(data, err)
		}
	}
	var doc plan.Document
	if err := doc.UnmarshalJSON(j); err != nil {
		return nil, err
	}
	if err := validateDocument(&doc); err != nil {
		return nil, err
	}
	return &doc, nil
}

// yamlError is the *plan.DecodeError for a YAML document the
// strict YAML reader refused with err: a repeated key named by its path,
// or err itself.
func yamlError(data []byte, err error) error {
	var doc yamlv2.MapSlice
	if yamlv2.Unmarshal(data, &doc) == nil {
		if path, key, ok := yamlRepeat(doc, ""); ok {
			cmd := -1
			if m := commandIndex.FindStringSubmatch(path); m != nil {
				cmd, _ = strconv.Atoi(m[1])
			}
			return &plan.DecodeError{Command: cmd, Field: path, Err: fmt.Errorf("duplicate key %q", key)}
		}
	}
	return &plan.DecodeError{Command: -1, Err: err}
}

// commandIndex matches the command index at the start of a path.
var commandIndex = regexp.MustCompile(`^(?:spec|status)\.commands\[(\d+)\]`)

// yamlRepeat finds the first mapping key repeated within one mapping of v
// (read as MapSlices, which keep every key), returning its path as the
// JSON decoder names paths ("spec.commands[0].k0supdate.version").
func yamlRepeat(v any, path string) (string, string, bool) {
	switch v := v.(type) {
	case yamlv2.MapSlice:
		seen := make(map[string]bool, len(v))
		for _, it := range v {
			k := fmt.Sprint(it.Key)
			p := k
			if path != "" {
				p = path + "." + k
			}
			if seen[k] {
				return p, k, true
			}
			seen[k] = true
			if p, k, ok := yamlRepeat(it.Value, p); ok {
				return p, k, true
			}
		}
	case []any:
		for i, e := range v {
			if p, k, ok := yamlRepeat(e, fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, k, true
			}
		}
	}
	return "", "", false
}

// validateDocument makes the checks of Decode on a decoded document: the
// spec's, then the k0s commands'.
func validateDocument(doc *plan.Document) error {
	if err := doc.Spec.Validate(); err != nil {
		return err
	}
	for i, c := range doc.Spec.Commands {
		if err := validateCommand(i, c); err != nil {
			return err
		}
	}
	return nil
}

// Encode writes doc as a YAML document in the shape Decode reads.
func Encode(doc *plan.Document) ([]byte, error) {
	return yaml.Marshal(doc)
}
