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
//
// YAML in the block style that Encode writes is read in one pass straight
// into the document; any other YAML (flow style, anchors, tags, block
// scalars, ...) and every document with an error take the general path, so
// that results and errors are the same either way.
func Decode(data []byte) (*converge.PlanDocument, error) {
	doc, ok := decodeFast(data)
	if !ok {
		var err error
		if doc, err = decodeSlow(data); err != nil {
			return nil, err
		}
	}
	if err := validateDocument(doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// decodeSlow decodes data without validating it: a JSON object as it is,
// anything else converted from YAML to JSON by sigs.k8s.io/yaml, then
// strictly with encoding/json (PlanDocument.UnmarshalJSON). It reads any
// document, and names the culprit of any error.
func decodeSlow(data []byte) (*converge.PlanDocument, error) {
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
	return &doc, nil
}

// validateDocument makes the checks of Decode on a decoded document: the
// spec's, then the k0s commands'.
func validateDocument(doc *converge.PlanDocument) error {
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
func Encode(doc *converge.PlanDocument) ([]byte, error) {
	return yaml.Marshal(doc)
}
