package converge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/convergekit/converge/internal/strictjson"
)

// PlanDocument is a plan with its status, in the shape of a k0s autopilot
// Plan object: `spec.commands[i].<kind>` and `status.commands[i]`. It encodes
// to JSON with encoding/json and decodes from it strictly, naming the
// culprit of a decode error (see UnmarshalJSON); the autopilot package
// reads and writes it as YAML too. The zero value is an empty plan with no
// status.
type PlanDocument struct {
	APIVersion string        `json:"apiVersion,omitempty"`
	Kind       string        `json:"kind,omitempty"`
	Metadata   *PlanMetadata `json:"metadata,omitempty"`
	Spec       Plan          `json:"spec"`
	// Status is nil until the plan starts.
	Status *PlanStatus `json:"status,omitempty"`
}

// PlanMetadata is the part of an object's metadata that plans keep; other
// metadata keys are accepted and dropped.
type PlanMetadata struct {
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PlanDecodeError says which part of a plan document is wrong.
type PlanDecodeError struct {
	// Command is the index of the command (in spec.commands or
	// status.commands) at fault, or -1 when the culprit is outside them.
	Command int
	// Field is the path of the culprit, for example
	// "spec.commands[1].k0supdate.targets.workers.limits.concurrent".
	Field string
	Err   error
}

// Error describes the problem, naming its culprit.
func (e *PlanDecodeError) Error() string {
	if e.Field == "" {
		return "converge: plan document: " + causeText(e.Err)
	}
	return fmt.Sprintf("converge: plan document: %s: %s", e.Field, causeText(e.Err))
}

// Unwrap returns the underlying error.
func (e *PlanDecodeError) Unwrap() error { return e.Err }

// Is makes PlanDecodeError match ErrPlanDecode.
func (e *PlanDecodeError) Is(target error) bool { return target == ErrPlanDecode }

// Reserved keys of a command body; the rest is the kind's Spec.
const (
	planKeyTargets       = "targets"
	planKeyTimeout       = "timeout"
	planKeyTargetTimeout = "targetTimeout"
)

// planInlineGroups are the group names k0s writes at the top of a command
// body (airgapupdate `workers:`).
var planInlineGroups = map[string]bool{"controllers": true, "workers": true}

// decodePlan decodes a plan document from JSON (as the runner stores it)
// and validates its spec. Errors are a *PlanDecodeError naming the command
// index and the field, or a *PlanFieldError.
func decodePlan(data []byte) (*PlanDocument, error) {
	var doc PlanDocument
	if err := json.Unmarshal(data, &doc); err != nil {
		var de *PlanDecodeError
		if planAsDecodeError(err, &de) {
			return nil, de
		}
		return nil, &PlanDecodeError{Command: -1, Err: err}
	}
	if err := doc.Spec.Validate(); err != nil {
		return nil, err
	}
	return &doc, nil
}

func planAsDecodeError(err error, de **PlanDecodeError) bool {
	e, ok := err.(*PlanDecodeError)
	if ok {
		*de = e
	}
	return ok
}

// planDecodeErr wraps err with its path; a *json.UnmarshalTypeError's own field
// is appended to the path.
func planDecodeErr(cmd int, path string, err error) error {
	if de, ok := err.(*PlanDecodeError); ok {
		return de
	}
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		if te.Field != "" {
			path += "." + te.Field
		}
		return &PlanDecodeError{Command: cmd, Field: path, Err: fmt.Errorf("want %s, got %s", te.Type, te.Value)}
	}
	return &PlanDecodeError{Command: cmd, Field: path, Err: err}
}

// planCommandIndex matches the command index at the start of a path.
var planCommandIndex = regexp.MustCompile(`^(?:spec|status)\.commands\[(\d+)\]`)

// planCheck rejects a document with a repeated key (anywhere in it) or data
// after it, before any decoding: encoding/json would keep the last of a
// repeated key silently. The error names the repeated key's path and, when
// the key is inside a command, the command's index.
func planCheck(b []byte, path string) error {
	err := strictjson.Check(b)
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return nil // syntax errors are reported by the decoding that follows
	}
	field := se.Path
	if path != "" {
		field = planJoin(path, se.Path)
	}
	cmd := -1
	if m := planCommandIndex.FindStringSubmatch(field); m != nil {
		cmd, _ = strconv.Atoi(m[1])
	}
	return &PlanDecodeError{Command: cmd, Field: field, Err: se.Err}
}

// planDecodeValue decodes raw into v, naming path on error.
func planDecodeValue(raw json.RawMessage, v any, cmd int, path string) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return planDecodeErr(cmd, path, err)
	}
	return nil
}

// planDecodeObject decodes a JSON object field by field: known keys go to their
// decoder, others to rest (nil rest rejects them). Keys are visited in sorted
// order, so the first error is deterministic.
func planDecodeObject(raw json.RawMessage, cmd int, path string, fields map[string]func(json.RawMessage) error, rest func(string, json.RawMessage) error) error {
	if planIsNull(raw) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return planDecodeErr(cmd, path, fmt.Errorf("want an object: %w", err))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if f, ok := fields[k]; ok {
			if err := f(m[k]); err != nil {
				return err
			}
			continue
		}
		if rest == nil {
			return &PlanDecodeError{Command: cmd, Field: planJoin(path, k), Err: fmt.Errorf("unknown field")}
		}
		if err := rest(k, m[k]); err != nil {
			return err
		}
	}
	return nil
}

func planJoin(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func planIsNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// UnmarshalJSON decodes a plan document strictly (unknown fields are errors,
// except inside metadata).
func (d *PlanDocument) UnmarshalJSON(b []byte) error {
	if err := planCheck(b, ""); err != nil {
		return err
	}
	var doc PlanDocument
	err := planDecodeObject(b, -1, "", map[string]func(json.RawMessage) error{
		"apiVersion": func(r json.RawMessage) error { return planDecodeValue(r, &doc.APIVersion, -1, "apiVersion") },
		"kind":       func(r json.RawMessage) error { return planDecodeValue(r, &doc.Kind, -1, "kind") },
		"metadata": func(r json.RawMessage) error {
			if planIsNull(r) {
				return nil
			}
			doc.Metadata = new(PlanMetadata)
			return planDecodeValue(r, doc.Metadata, -1, "metadata")
		},
		"spec": func(r json.RawMessage) error { return doc.Spec.decode(r, "spec") },
		"status": func(r json.RawMessage) error {
			if planIsNull(r) {
				return nil
			}
			doc.Status = new(PlanStatus)
			return doc.Status.decode(r, "status")
		},
	}, nil)
	if err != nil {
		return err
	}
	*d = doc
	return nil
}

// MarshalJSON encodes the plan as the `spec` of a document.
func (p Plan) MarshalJSON() ([]byte, error) {
	cmds := p.Commands
	if cmds == nil {
		cmds = []Command{}
	}
	return json.Marshal(struct {
		ID        string    `json:"id"`
		Timestamp string    `json:"timestamp,omitempty"`
		Commands  []Command `json:"commands"`
	}{p.ID, p.Timestamp, cmds})
}

// UnmarshalJSON decodes the `spec` of a document; errors are
// *PlanDecodeError.
func (p *Plan) UnmarshalJSON(b []byte) error {
	if err := planCheck(b, ""); err != nil {
		return err
	}
	return p.decode(b, "")
}

func (p *Plan) decode(b []byte, path string) error {
	var plan Plan
	err := planDecodeObject(b, -1, path, map[string]func(json.RawMessage) error{
		"id": func(r json.RawMessage) error { return planDecodeValue(r, &plan.ID, -1, planJoin(path, "id")) },
		"timestamp": func(r json.RawMessage) error {
			return planDecodeValue(r, &plan.Timestamp, -1, planJoin(path, "timestamp"))
		},
		"commands": func(r json.RawMessage) error {
			var err error
			plan.Commands, err = planDecodeList(r, -1, planJoin(path, "commands"), func(c *Command, raw json.RawMessage, i int, p string) error {
				return c.decode(raw, i, p)
			})
			return err
		},
	}, nil)
	if err != nil {
		return err
	}
	*p = plan
	return nil
}

// MarshalJSON encodes the command as `{<kind>: {<spec>, targets, timeout,
// targetTimeout}}`. A group discovered by a function only is written with an
// empty discovery (and does not decode again: see CommandDiscovery.Func).
func (c Command) MarshalJSON() ([]byte, error) {
	body := make(map[string]any, len(c.Spec)+3)
	for k, v := range c.Spec {
		body[k] = v
	}
	groups := make(map[string]any, len(c.Targets))
	for _, t := range c.Targets {
		groups[t.Group] = t.encode()
	}
	if c.InlineTargets {
		for g, v := range groups {
			body[g] = v
		}
	} else if len(c.Targets) > 0 {
		body[planKeyTargets] = groups
	}
	if c.Timeout != 0 {
		body[planKeyTimeout] = c.Timeout.String()
	}
	if c.TargetTimeout != 0 {
		body[planKeyTargetTimeout] = c.TargetTimeout.String()
	}
	return json.Marshal(map[string]any{c.Kind: body})
}

func (t CommandTargets) encode() map[string]any {
	disc := map[string]any{}
	if t.Discovery.Static != nil {
		disc["static"] = map[string]any{"nodes": t.Discovery.Static}
	}
	if t.Discovery.Selector != nil {
		disc["selector"] = t.Discovery.Selector
	}
	if t.Discovery.Function != "" {
		disc["function"] = t.Discovery.Function
	}
	m := map[string]any{"discovery": disc}
	if t.Concurrent != 0 {
		m["limits"] = map[string]int{"concurrent": t.Concurrent}
	}
	if t.Order != 0 {
		m["order"] = t.Order
	}
	return m
}

// UnmarshalJSON decodes one command; errors are *PlanDecodeError (with
// Command -1, since the index is known only to the plan).
func (c *Command) UnmarshalJSON(b []byte) error {
	if err := planCheck(b, ""); err != nil {
		return err
	}
	return c.decode(b, -1, "")
}

func (c *Command) decode(b []byte, idx int, path string) error {
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(b, &outer); err != nil {
		return planDecodeErr(idx, path, fmt.Errorf("want an object with one command kind: %w", err))
	}
	if len(outer) != 1 {
		keys := planSortedKeys(outer)
		return &PlanDecodeError{Command: idx, Field: path, Err: fmt.Errorf("want exactly one command kind, got %d (%s)", len(outer), strings.Join(keys, ", "))}
	}
	var cmd Command
	var body json.RawMessage
	for k, v := range outer {
		cmd.Kind, body = k, v
	}
	if cmd.Kind == "" {
		return &PlanDecodeError{Command: idx, Field: path, Err: fmt.Errorf("command kind must not be empty")}
	}
	bpath := planJoin(path, cmd.Kind)
	if planIsNull(body) || bytes.TrimSpace(body)[0] != '{' {
		return &PlanDecodeError{Command: idx, Field: bpath, Err: fmt.Errorf("want an object")}
	}
	var targets, inline []CommandTargets
	duration := func(dst *time.Duration, key string) func(json.RawMessage) error {
		return func(r json.RawMessage) error {
			var s string
			if err := planDecodeValue(r, &s, idx, planJoin(bpath, key)); err != nil {
				return err
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				return &PlanDecodeError{Command: idx, Field: planJoin(bpath, key), Err: err}
			}
			if d < 0 {
				return &PlanDecodeError{Command: idx, Field: planJoin(bpath, key), Err: fmt.Errorf("must not be negative")}
			}
			*dst = d
			return nil
		}
	}
	err := planDecodeObject(body, idx, bpath, map[string]func(json.RawMessage) error{
		planKeyTimeout:       duration(&cmd.Timeout, planKeyTimeout),
		planKeyTargetTimeout: duration(&cmd.TargetTimeout, planKeyTargetTimeout),
		planKeyTargets: func(r json.RawMessage) error {
			tpath := planJoin(bpath, planKeyTargets)
			return planDecodeObject(r, idx, tpath, nil, func(g string, gr json.RawMessage) error {
				t, err := planDecodeTargets(gr, g, idx, planJoin(tpath, g))
				targets = append(targets, t)
				return err
			})
		},
	}, func(k string, r json.RawMessage) error {
		if planInlineGroups[k] {
			t, err := planDecodeTargets(r, k, idx, planJoin(bpath, k))
			inline = append(inline, t)
			return err
		}
		if cmd.Spec == nil {
			cmd.Spec = map[string]json.RawMessage{}
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, r); err != nil {
			return planDecodeErr(idx, planJoin(bpath, k), err)
		}
		cmd.Spec[k] = compact.Bytes()
		return nil
	})
	if err != nil {
		return err
	}
	if len(inline) > 0 && len(targets) > 0 {
		return &PlanDecodeError{Command: idx, Field: planJoin(bpath, inline[0].Group), Err: fmt.Errorf("groups must be all under %q or all at the top, not both", planKeyTargets)}
	}
	if len(inline) > 0 {
		cmd.InlineTargets = true
		targets = inline
	}
	planSortTargets(targets)
	cmd.Targets = targets
	*c = cmd
	return nil
}

func planDecodeTargets(raw json.RawMessage, group string, idx int, path string) (CommandTargets, error) {
	t := CommandTargets{Group: group}
	dpath := planJoin(path, "discovery")
	found := false
	err := planDecodeObject(raw, idx, path, map[string]func(json.RawMessage) error{
		"order": func(r json.RawMessage) error { return planDecodeValue(r, &t.Order, idx, planJoin(path, "order")) },
		"limits": func(r json.RawMessage) error {
			lpath := planJoin(path, "limits")
			return planDecodeObject(r, idx, lpath, map[string]func(json.RawMessage) error{
				"concurrent": func(r json.RawMessage) error {
					if err := planDecodeValue(r, &t.Concurrent, idx, planJoin(lpath, "concurrent")); err != nil {
						return err
					}
					if t.Concurrent < 0 {
						return &PlanDecodeError{Command: idx, Field: planJoin(lpath, "concurrent"), Err: fmt.Errorf("must not be negative")}
					}
					return nil
				},
			}, nil)
		},
		"discovery": func(r json.RawMessage) error {
			found = true
			return planDecodeObject(r, idx, dpath, map[string]func(json.RawMessage) error{
				"static": func(r json.RawMessage) error {
					spath := planJoin(dpath, "static")
					t.Discovery.Static = []string{}
					return planDecodeObject(r, idx, spath, map[string]func(json.RawMessage) error{
						"nodes": func(r json.RawMessage) error {
							var nodes []string
							if err := planDecodeValue(r, &nodes, idx, planJoin(spath, "nodes")); err != nil {
								return err
							}
							for i, n := range nodes {
								if n == "" {
									return &PlanDecodeError{Command: idx, Field: fmt.Sprintf("%s[%d]", planJoin(spath, "nodes"), i), Err: fmt.Errorf("node name must not be empty")}
								}
							}
							if nodes != nil {
								t.Discovery.Static = nodes
							}
							return nil
						},
					}, nil)
				},
				"function": func(r json.RawMessage) error {
					fpath := planJoin(dpath, "function")
					if err := planDecodeValue(r, &t.Discovery.Function, idx, fpath); err != nil {
						return err
					}
					if t.Discovery.Function == "" {
						return &PlanDecodeError{Command: idx, Field: fpath, Err: fmt.Errorf("must not be empty")}
					}
					return nil
				},
				"selector": func(r json.RawMessage) error {
					spath := planJoin(dpath, "selector")
					t.Discovery.Selector = &CommandSelector{}
					return planDecodeObject(r, idx, spath, map[string]func(json.RawMessage) error{
						"labels": func(r json.RawMessage) error {
							return planDecodeValue(r, &t.Discovery.Selector.Labels, idx, planJoin(spath, "labels"))
						},
						"fields": func(r json.RawMessage) error {
							return planDecodeValue(r, &t.Discovery.Selector.Fields, idx, planJoin(spath, "fields"))
						},
					}, nil)
				},
			}, nil)
		},
	}, nil)
	if err != nil {
		return t, err
	}
	n := 0
	for _, set := range []bool{t.Discovery.Static != nil, t.Discovery.Selector != nil, t.Discovery.Function != ""} {
		if set {
			n++
		}
	}
	if !found || n != 1 {
		return t, &PlanDecodeError{Command: idx, Field: dpath, Err: fmt.Errorf("needs exactly one of static, selector or function")}
	}
	return t, nil
}

func planSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MarshalJSON encodes the status with the zero state written as NewPlan.
func (s PlanStatus) MarshalJSON() ([]byte, error) {
	cmds := s.Commands
	if cmds == nil {
		cmds = []CommandStatus{}
	}
	return json.Marshal(struct {
		State    PlanState       `json:"state"`
		Reason   string          `json:"reason,omitempty"`
		Abort    string          `json:"abort,omitempty"`
		Commands []CommandStatus `json:"commands"`
	}{s.State.normal(), s.Reason, s.Abort, cmds})
}

// UnmarshalJSON decodes the `status` of a document; errors are
// *PlanDecodeError.
func (s *PlanStatus) UnmarshalJSON(b []byte) error {
	if err := planCheck(b, ""); err != nil {
		return err
	}
	return s.decode(b, "")
}

func (s *PlanStatus) decode(b []byte, path string) error {
	var st PlanStatus
	err := planDecodeObject(b, -1, path, map[string]func(json.RawMessage) error{
		"state":  func(r json.RawMessage) error { return planDecodeValue(r, &st.State, -1, planJoin(path, "state")) },
		"reason": func(r json.RawMessage) error { return planDecodeValue(r, &st.Reason, -1, planJoin(path, "reason")) },
		"abort":  func(r json.RawMessage) error { return planDecodeValue(r, &st.Abort, -1, planJoin(path, "abort")) },
		"commands": func(r json.RawMessage) error {
			var err error
			st.Commands, err = planDecodeList(r, -1, planJoin(path, "commands"), func(c *CommandStatus, raw json.RawMessage, i int, p string) error {
				return c.decode(raw, i, p)
			})
			return err
		},
	}, nil)
	if err != nil {
		return err
	}
	*s = st
	return nil
}

// MarshalJSON encodes the status of a command as `{id, state, reason,
// startedTimestamp, <kind>: {<group>: [targets]}}`.
func (s CommandStatus) MarshalJSON() ([]byte, error) {
	m := map[string]any{"id": s.ID, "state": s.State.normal()}
	if s.Reason != "" {
		m["reason"] = s.Reason
	}
	if !s.Started.IsZero() {
		m["startedTimestamp"] = s.Started
	}
	if s.Kind != "" {
		groups := make(map[string][]PlanTargetStatus, len(s.Targets))
		for g, ts := range s.Targets {
			if ts == nil {
				ts = []PlanTargetStatus{}
			}
			groups[g] = ts
		}
		m[s.Kind] = groups
	}
	return json.Marshal(m)
}

// UnmarshalJSON decodes the status of one command; errors are
// *PlanDecodeError.
func (s *CommandStatus) UnmarshalJSON(b []byte) error {
	if err := planCheck(b, ""); err != nil {
		return err
	}
	return s.decode(b, -1, "")
}

func (s *CommandStatus) decode(b []byte, idx int, path string) error {
	var cs CommandStatus
	err := planDecodeObject(b, idx, path, map[string]func(json.RawMessage) error{
		"id":     func(r json.RawMessage) error { return planDecodeValue(r, &cs.ID, idx, planJoin(path, "id")) },
		"state":  func(r json.RawMessage) error { return planDecodeValue(r, &cs.State, idx, planJoin(path, "state")) },
		"reason": func(r json.RawMessage) error { return planDecodeValue(r, &cs.Reason, idx, planJoin(path, "reason")) },
		"startedTimestamp": func(r json.RawMessage) error {
			return planDecodeValue(r, &cs.Started, idx, planJoin(path, "startedTimestamp"))
		},
	}, func(kind string, r json.RawMessage) error {
		kpath := planJoin(path, kind)
		if cs.Kind != "" {
			return &PlanDecodeError{Command: idx, Field: kpath, Err: fmt.Errorf("status already answers command kind %q", cs.Kind)}
		}
		if kind == "" {
			return &PlanDecodeError{Command: idx, Field: path, Err: fmt.Errorf("command kind must not be empty")}
		}
		cs.Kind = kind
		cs.Targets = map[string][]PlanTargetStatus{}
		return planDecodeObject(r, idx, kpath, nil, func(g string, gr json.RawMessage) error {
			gpath := planJoin(kpath, g)
			if ts, ok := planFastTargets(gr); ok {
				cs.Targets[g] = ts
				return nil
			}
			ts, err := planDecodeList(gr, idx, gpath, func(t *PlanTargetStatus, raw json.RawMessage, _ int, p string) error {
				return t.decode(raw, idx, p)
			})
			cs.Targets[g] = ts
			return err
		})
	})
	if err != nil {
		return err
	}
	cs.Started = cs.Started.UTC()
	*s = cs
	return nil
}

// planTargetWire has the fields of PlanTargetStatus without its strict
// UnmarshalJSON.
type planTargetWire PlanTargetStatus

// planFastTargets decodes a list of targets in one pass when it is valid;
// ok is false when anything is wrong, and the field-by-field path then finds
// and names the culprit.
func planFastTargets(raw json.RawMessage) ([]PlanTargetStatus, bool) {
	var wire []planTargetWire
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&wire); err != nil || dec.More() || wire == nil {
		return nil, false
	}
	ts := make([]PlanTargetStatus, len(wire))
	for i, w := range wire {
		if w.Name == "" || w.Attempt < 0 {
			return nil, false
		}
		w.LastUpdatedTimestamp = w.LastUpdatedTimestamp.UTC()
		ts[i] = PlanTargetStatus(w)
	}
	return ts, true
}

// UnmarshalJSON decodes the status of one target; errors are
// *PlanDecodeError.
func (t *PlanTargetStatus) UnmarshalJSON(b []byte) error {
	if err := planCheck(b, ""); err != nil {
		return err
	}
	return t.decode(b, -1, "")
}

func (t *PlanTargetStatus) decode(b []byte, idx int, path string) error {
	var ts PlanTargetStatus
	err := planDecodeObject(b, idx, path, map[string]func(json.RawMessage) error{
		"name":    func(r json.RawMessage) error { return planDecodeValue(r, &ts.Name, idx, planJoin(path, "name")) },
		"state":   func(r json.RawMessage) error { return planDecodeValue(r, &ts.State, idx, planJoin(path, "state")) },
		"reason":  func(r json.RawMessage) error { return planDecodeValue(r, &ts.Reason, idx, planJoin(path, "reason")) },
		"attempt": func(r json.RawMessage) error { return planDecodeValue(r, &ts.Attempt, idx, planJoin(path, "attempt")) },
		"lastUpdatedTimestamp": func(r json.RawMessage) error {
			return planDecodeValue(r, &ts.LastUpdatedTimestamp, idx, planJoin(path, "lastUpdatedTimestamp"))
		},
	}, nil)
	if err != nil {
		return err
	}
	ts.LastUpdatedTimestamp = ts.LastUpdatedTimestamp.UTC()
	if ts.Name == "" {
		return &PlanDecodeError{Command: idx, Field: planJoin(path, "name"), Err: fmt.Errorf("must not be empty")}
	}
	if ts.Attempt < 0 {
		return &PlanDecodeError{Command: idx, Field: planJoin(path, "attempt"), Err: fmt.Errorf("must not be negative")}
	}
	*t = ts
	return nil
}

// planDecodeList decodes the JSON array r at path into a slice, each element
// with decode, which gets the element's index and path ("path[i]"). cmd is
// the command index errors name (-1 for none).
func planDecodeList[T any](r json.RawMessage, cmd int, path string, decode func(t *T, raw json.RawMessage, i int, path string) error) ([]T, error) {
	var raws []json.RawMessage
	if err := planDecodeValue(r, &raws, cmd, path); err != nil {
		return nil, err
	}
	out := make([]T, len(raws))
	for i, raw := range raws {
		if err := decode(&out[i], raw, i, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return nil, err
		}
	}
	return out, nil
}
