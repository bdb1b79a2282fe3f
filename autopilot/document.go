package autopilot

import (
	"bytes"
	"encoding/json"
	"errors"

	"sigs.k8s.io/yaml"

	"github.com/convergekit/converge"
)

// Decode decodes a plan document from YAML or JSON and validates its spec.
// Timestamps are read in UTC. Decoding is strict: unknown fields (outside
// metadata), repeated keys (in JSON, named by their path; in YAML, by the
// YAML reader with the key and its line), values of the wrong type and data
// after the document are errors. Errors are a *converge.PlanDecodeError naming the
// command index and the field (it matches converge.ErrPlanDecode), or a
// *converge.PlanFieldError for a plan that decodes but cannot run: one
// that converge.Plan.Validate rejects (a command without targets, an empty
// static node list, ...), or a k0s command with a version or platforms
// CommandHandler.ValidateCommand rejects.
func Decode(data []byte) (*converge.PlanDocument, error) {
	j := data
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		// YAML (JSON is YAML too, but a JSON object skips the conversion).
		var err error
		if j, err = yaml.YAMLToJSONStrict(data); err != nil {
			return nil, &converge.PlanDecodeError{Command: -1, Err: err}
		}
	}
	var doc converge.PlanDocument
	if err := json.Unmarshal(j, &doc); err != nil {
		var de *converge.PlanDecodeError
		if errors.As(err, &de) {
			return nil, de
		}
		return nil, &converge.PlanDecodeError{Command: -1, Err: err}
	}
	if err := doc.Spec.Validate(); err != nil {
		return nil, err
	}
	for i, c := range doc.Spec.Commands {
		if err := validateCommand(i, c); err != nil {
			return nil, err
		}
	}
	return &doc, nil
}

// Encode writes doc as a YAML document in the shape Decode reads.
func Encode(doc *converge.PlanDocument) ([]byte, error) {
	return yaml.Marshal(doc)
}
