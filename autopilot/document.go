package autopilot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/plan"
)

// Decode decodes a plan document from YAML or JSON and validates it, as
// k0s's Plan CRD (autopilot.k0sproject.io/v1beta2) does: every document
// the CRD accepts decodes. Timestamps are read in UTC. Decoding is strict:
// unknown fields (outside metadata), repeated keys, values of the wrong
// type, invalid UTF-8 and data after the document are errors, and so is a
// field of a k0s command (k0supdate, airgapupdate) that the CRD does not
// define. What k0s checks only while the plan runs is not checked here: a
// plan without commands, a group that discovers no node, a placeholder
// version such as "v0.0.0", any platform name; the runner then sets the
// state k0s would (see CommandHandler). A document larger than
// converge.DefaultMaxDocumentBytes is refused before it is read (see
// DecodeWith).
//
// Errors are a *plan.DecodeError naming the command index and the field
// (it matches plan.ErrDecode; a repeated key is named by its path in YAML
// as in JSON, and a document over the cap wraps a *converge.LimitError,
// matching converge.ErrTooLarge), or a *plan.FieldError for a plan that
// decodes but that plan.Plan.Validate or CommandHandler.ValidateCommand
// rejects (no ID, a field k0s does not have).
//
// A JSON object is read as it is; anything else is YAML, which
// sigs.k8s.io/yaml converts to JSON (refusing repeated keys); the JSON is
// then read by the strict decoder of plan.Document.
//
// Converge reads one document differently from k0s: a command that names
// two kinds ({k0supdate: ..., airgapupdate: ...}) is refused, where k0s
// runs the first and ignores the other.
func Decode(data []byte) (*plan.Document, error) {
	return DecodeWith(data, converge.DecodeLimits{})
}

// DecodeWith is Decode with the caps of lim: the document, and the JSON a
// YAML document becomes, must hold at most lim.MaxBytes bytes (0 means
// converge.DefaultMaxDocumentBytes, a negative value no cap). The cap is
// checked before the document is read.
func DecodeWith(data []byte, lim converge.DecodeLimits) (*plan.Document, error) {
	if err := lim.Check("", len(data)); err != nil {
		return nil, &plan.DecodeError{Command: -1, Err: err}
	}
	j := data
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		var err error
		if j, err = yaml.YAMLToJSONStrict(data); err != nil {
			return nil, yamlError(data, err)
		}
	}
	doc, err := plan.DecodeDocument(j, lim)
	if err != nil {
		return nil, err
	}
	if err := validateDocument(doc); err != nil {
		return nil, err
	}
	return doc, nil
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
