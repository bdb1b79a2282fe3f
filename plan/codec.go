package plan

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/wire"
	"github.com/go-json-experiment/json/jsontext"
)

// Document is a plan with its status, in the shape of a k0s autopilot
// Plan object: `spec.commands[i].<kind>` and `status.commands[i]`. It encodes
// to JSON with encoding/json and decodes from it strictly, naming the
// culprit of a decode error (see UnmarshalJSON); the autopilot package
// reads and writes it as YAML too. The zero value is an empty plan with no
// status.
type Document struct {
	APIVersion string    `json:"apiVersion,omitempty"`
	Kind       string    `json:"kind,omitempty"`
	Metadata   *Metadata `json:"metadata,omitempty"`
	Spec       Plan      `json:"spec"`
	// Status is nil until the plan starts.
	Status *Status `json:"status,omitempty"`
}

// Metadata is the part of an object's metadata that plans keep; other
// metadata keys are accepted and dropped.
type Metadata struct {
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// DecodeError says which part of a plan document is wrong.
type DecodeError struct {
	// Command is the index of the command (in spec.commands or
	// status.commands) at fault, or -1 when the culprit is outside them.
	Command int
	// Field is the path of the culprit, for example
	// "spec.commands[1].k0supdate.targets.workers.limits.concurrent".
	Field string
	Err   error
}

// Error describes the problem, naming its culprit.
func (e *DecodeError) Error() string {
	if e.Field == "" {
		return "plan: document: " + causeText(e.Err)
	}
	return fmt.Sprintf("plan: document: %s: %s", e.Field, causeText(e.Err))
}

// Unwrap returns the underlying error.
func (e *DecodeError) Unwrap() error { return e.Err }

// Is makes DecodeError match ErrDecode.
func (e *DecodeError) Is(target error) bool { return target == ErrDecode }

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
// and validates its spec. Errors are a *DecodeError naming the command
// index and the field, or a *FieldError.
func decodePlan(data []byte) (*Document, error) {
	var doc Document
	// What the runner stored was capped, if at all, when it was read.
	if err := doc.decode(data, converge.DecodeLimits{MaxBytes: -1}); err != nil {
		return nil, err
	}
	if err := doc.Spec.Validate(); err != nil {
		return nil, err
	}
	return &doc, nil
}

// planCommandIndex matches the command index at the start of a path.
var planCommandIndex = regexp.MustCompile(`^(?:spec|status)\.commands\[(\d+)\]`)

// planErr is the *DecodeError about the culprit at path (of the whole
// document), with the command index the path names.
func planErr(path string, err error) *DecodeError {
	cmd := -1
	if m := planCommandIndex.FindStringSubmatch(path); m != nil {
		cmd, _ = strconv.Atoi(m[1])
	}
	return &DecodeError{Command: cmd, Field: path, Err: err}
}

// planRead reads the JSON document b strictly into in; a problem is a
// *DecodeError naming its path.
func planRead(b []byte, in any) error {
	we := wire.Decode(b, in)
	switch {
	case we == nil:
		return nil
	case we.Dup:
		return planErr(we.Path, fmt.Errorf("duplicate key %q", planLastKey(we.Path)))
	case we.Unknown:
		return planErr(we.Path, fmt.Errorf("unknown field"))
	}
	return planErr(we.Path, we.Err)
}

// planLastKey returns the last key of a path.
func planLastKey(path string) string {
	return path[strings.LastIndexByte(path, '.')+1:]
}

func planJoin(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// The documents as read: tagged structs that the strict decoder fills, and
// that the functions below turn into the package's types, checking what
// tags cannot say.
type (
	planDocIn struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   *planMetadataIn `json:"metadata"`
		Spec       planSpecIn      `json:"spec"`
		Status     *planStatusIn   `json:"status"`
	}
	// planMetadataIn drops the metadata keys plans do not keep.
	planMetadataIn struct {
		Metadata `json:",inline"`
		Other    jsontext.Value `json:",inline"`
	}
	planSpecIn struct {
		ID        string          `json:"id"`
		Timestamp string          `json:"timestamp"`
		Commands  []planCommandIn `json:"commands"`
	}
	// planCommandIn is `{<kind>: {<spec>, targets, timeout, targetTimeout}}`.
	planCommandIn map[string]*planBodyIn
	planBodyIn    struct {
		Timeout       wire.Field[string]        `json:"timeout"`
		TargetTimeout wire.Field[string]        `json:"targetTimeout"`
		Targets       map[string]planGroupIn    `json:"targets"`
		Controllers   wire.Field[planGroupIn]   `json:"controllers"`
		Workers       wire.Field[planGroupIn]   `json:"workers"`
		Spec          map[string]jsontext.Value `json:",inline"`
	}
	planGroupIn struct {
		Order  int `json:"order"`
		Limits struct {
			Concurrent int `json:"concurrent"`
		} `json:"limits"`
		Discovery *struct {
			Static *struct {
				Nodes []string `json:"nodes"`
			} `json:"static"`
			Selector *CommandSelector `json:"selector"`
			Function *string          `json:"function"`
		} `json:"discovery"`
	}
	planStatusIn struct {
		State    State             `json:"state"`
		Reason   string            `json:"reason"`
		Abort    string            `json:"abort"`
		Commands []commandStatusIn `json:"commands"`
	}
	// commandStatusIn holds the targets under the key of the command's kind.
	commandStatusIn struct {
		ID    int   `json:"id"`
		State State `json:"state"`
		// Description is k0s's name of the reason; converge v0.1.0
		// wrote it as reason.
		Description wire.Field[string]                   `json:"description"`
		Reason      wire.Field[string]                   `json:"reason"`
		Started     time.Time                            `json:"startedTimestamp"`
		Kinds       map[string]map[string][]planTargetIn `json:",inline"`
	}
	// planTargetIn has the fields of TargetStatus without its
	// UnmarshalJSON.
	planTargetIn TargetStatus
)

// DecodeDocument decodes a plan document from JSON as
// Document.UnmarshalJSON does, with the caps of lim instead of the
// defaults. It does not validate the spec (see Document.Validate).
func DecodeDocument(b []byte, lim converge.DecodeLimits) (*Document, error) {
	var d Document
	if err := d.decode(b, lim); err != nil {
		return nil, err
	}
	return &d, nil
}

// UnmarshalJSON decodes a plan document strictly (unknown fields are errors,
// except inside metadata; so are repeated keys, invalid UTF-8 and data
// after the document); errors are *DecodeError. A document larger than
// converge.DefaultMaxDocumentBytes is refused before it is decoded, with a
// *DecodeError wrapping a *converge.LimitError (it matches
// converge.ErrTooLarge); DecodeDocument takes other caps.
func (d *Document) UnmarshalJSON(b []byte) error {
	return d.decode(b, converge.DecodeLimits{})
}

func (d *Document) decode(b []byte, lim converge.DecodeLimits) error {
	if err := lim.Check("", len(b)); err != nil {
		return &DecodeError{Command: -1, Err: err}
	}
	var in planDocIn
	if err := planRead(b, &in); err != nil {
		return err
	}
	doc := Document{APIVersion: in.APIVersion, Kind: in.Kind}
	if in.Metadata != nil {
		doc.Metadata = &in.Metadata.Metadata
	}
	var err error
	if doc.Spec, err = in.Spec.plan("spec"); err != nil {
		return err
	}
	if in.Status != nil {
		doc.Status = new(Status)
		if *doc.Status, err = in.Status.status("status"); err != nil {
			return err
		}
	}
	*d = doc
	return nil
}

// MarshalJSON encodes the plan as the `spec` of a document; timestamp is
// written when empty too, as k0s's CRD requires it.
func (p Plan) MarshalJSON() ([]byte, error) {
	cmds := p.Commands
	if cmds == nil {
		cmds = []Command{}
	}
	return json.Marshal(struct {
		ID        string    `json:"id"`
		Timestamp string    `json:"timestamp"`
		Commands  []Command `json:"commands"`
	}{p.ID, p.Timestamp, cmds})
}

// UnmarshalJSON decodes the `spec` of a document; errors are
// *DecodeError.
func (p *Plan) UnmarshalJSON(b []byte) error {
	var in planSpecIn
	if err := planRead(b, &in); err != nil {
		return err
	}
	plan, err := in.plan("")
	if err != nil {
		return err
	}
	*p = plan
	return nil
}

func (in planSpecIn) plan(path string) (Plan, error) {
	p := Plan{ID: in.ID, Timestamp: in.Timestamp, Commands: make([]Command, len(in.Commands))}
	for i, c := range in.Commands {
		var err error
		if p.Commands[i], err = c.command(i, fmt.Sprintf("%s[%d]", planJoin(path, "commands"), i)); err != nil {
			return Plan{}, err
		}
	}
	return p, nil
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
	} else {
		// Written when empty too: k0s's CRD requires it.
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

// UnmarshalJSON decodes one command; errors are *DecodeError (with
// Command -1, since the index is known only to the plan).
func (c *Command) UnmarshalJSON(b []byte) error {
	var in planCommandIn
	if err := planRead(b, &in); err != nil {
		return err
	}
	cmd, err := in.command(-1, "")
	if err != nil {
		return err
	}
	*c = cmd
	return nil
}

func (in planCommandIn) command(idx int, path string) (Command, error) {
	fail := func(path string, err error) (Command, error) {
		return Command{}, &DecodeError{Command: idx, Field: path, Err: err}
	}
	if len(in) != 1 {
		keys := planSortedKeys((in))
		return fail(path, fmt.Errorf("want exactly one command kind, got %d (%s)", len(in), strings.Join(keys, ", ")))
	}
	var cmd Command
	var body *planBodyIn
	for k, v := range in {
		cmd.Kind, body = k, v
	}
	if cmd.Kind == "" {
		return fail(path, fmt.Errorf("command kind must not be empty"))
	}
	bpath := planJoin(path, cmd.Kind)
	if body == nil {
		return fail(bpath, fmt.Errorf("want an object"))
	}
	for _, d := range []struct {
		dst *time.Duration
		in  wire.Field[string]
		key string
	}{{&cmd.Timeout, body.Timeout, planKeyTimeout}, {&cmd.TargetTimeout, body.TargetTimeout, planKeyTargetTimeout}} {
		if !d.in.Set {
			continue
		}
		v, err := time.ParseDuration(d.in.V)
		if err == nil && v < 0 {
			err = fmt.Errorf("must not be negative")
		}
		if err != nil {
			return fail(planJoin(bpath, d.key), err)
		}
		*d.dst = v
	}
	for k, v := range body.Spec {
		if cmd.Spec == nil {
			cmd.Spec = make(map[string]json.RawMessage, len(body.Spec))
		}
		// v is the decoder's own copy: compact it in place.
		if err := v.Compact(); err != nil {
			return fail(planJoin(bpath, k), err)
		}
		cmd.Spec[k] = json.RawMessage(v)
	}
	tpath := planJoin(bpath, planKeyTargets)
	for _, g := range planSortedKeys((body.Targets)) {
		t, err := body.Targets[g].targets(g, idx, planJoin(tpath, g))
		if err != nil {
			return Command{}, err
		}
		cmd.Targets = append(cmd.Targets, t)
	}
	for _, g := range []struct {
		name string
		in   wire.Field[planGroupIn]
	}{{"controllers", body.Controllers}, {"workers", body.Workers}} {
		if !g.in.Set {
			continue
		}
		if body.Targets != nil {
			return fail(planJoin(bpath, g.name), fmt.Errorf("groups must be all under %q or all at the top, not both", planKeyTargets))
		}
		t, err := g.in.V.targets(g.name, idx, planJoin(bpath, g.name))
		if err != nil {
			return Command{}, err
		}
		cmd.InlineTargets = true
		cmd.Targets = append(cmd.Targets, t)
	}
	planSortTargets(cmd.Targets)
	return cmd, nil
}

// planSortedKeys returns the keys of m in order.
func planSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (in planGroupIn) targets(group string, idx int, path string) (CommandTargets, error) {
	t := CommandTargets{Group: group, Order: in.Order, Concurrent: in.Limits.Concurrent}
	if d := in.Discovery; d != nil {
		if d.Static != nil {
			t.Discovery.Static = []string{}
			if d.Static.Nodes != nil {
				t.Discovery.Static = d.Static.Nodes
			}
		}
		if d.Function != nil {
			if *d.Function == "" {
				return CommandTargets{}, &DecodeError{Command: idx, Field: planJoin(path, "discovery.function"), Err: fmt.Errorf("must not be empty")}
			}
			t.Discovery.Function = *d.Function
		}
		t.Discovery.Selector = d.Selector
	}
	return t, nil
}

// MarshalJSON encodes the status with the zero state written as NewPlan.
func (s Status) MarshalJSON() ([]byte, error) {
	cmds := s.Commands
	if cmds == nil {
		cmds = []CommandStatus{}
	}
	return json.Marshal(struct {
		State    State           `json:"state"`
		Reason   string          `json:"reason,omitempty"`
		Abort    string          `json:"abort,omitempty"`
		Commands []CommandStatus `json:"commands"`
	}{s.State.normal(), s.Reason, s.Abort, cmds})
}

// UnmarshalJSON decodes the `status` of a document; errors are
// *DecodeError.
func (s *Status) UnmarshalJSON(b []byte) error {
	var in planStatusIn
	if err := planRead(b, &in); err != nil {
		return err
	}
	st, err := in.status("")
	if err != nil {
		return err
	}
	*s = st
	return nil
}

func (in planStatusIn) status(path string) (Status, error) {
	s := Status{State: in.State, Reason: in.Reason, Abort: in.Abort, Commands: make([]CommandStatus, len(in.Commands))}
	for i, c := range in.Commands {
		var err error
		if s.Commands[i], err = c.status(i, fmt.Sprintf("%s[%d]", planJoin(path, "commands"), i)); err != nil {
			return Status{}, err
		}
	}
	return s, nil
}

// MarshalJSON encodes the status of a command as `{id, state, description,
// startedTimestamp, <kind>: {<group>: [targets]}}`: the reason is
// written as k0s's description (and read from description, or from
// reason as converge v0.1.0 wrote it); startedTimestamp, converge's own,
// is left out while the command has not started.
func (s CommandStatus) MarshalJSON() ([]byte, error) {
	m := map[string]any{"id": s.ID, "state": s.State.normal()}
	if s.Reason != "" {
		m["description"] = s.Reason
	}
	if !s.Started.IsZero() {
		m["startedTimestamp"] = s.Started
	}
	if s.Kind != "" {
		groups := make(map[string][]TargetStatus, len(s.Targets))
		for g, ts := range s.Targets {
			if ts == nil {
				ts = []TargetStatus{}
			}
			groups[g] = ts
		}
		m[s.Kind] = groups
	}
	return json.Marshal(m)
}

// UnmarshalJSON decodes the status of one command; errors are
// *DecodeError.
func (s *CommandStatus) UnmarshalJSON(b []byte) error {
	var in commandStatusIn
	if err := planRead(b, &in); err != nil {
		return err
	}
	cs, err := in.status(-1, "")
	if err != nil {
		return err
	}
	*s = cs
	return nil
}

func (in commandStatusIn) status(idx int, path string) (CommandStatus, error) {
	cs := CommandStatus{ID: in.ID, State: in.State, Reason: in.Description.V, Started: in.Started.UTC()}
	if in.Reason.Set {
		if in.Description.Set && in.Reason.V != in.Description.V {
			return CommandStatus{}, &DecodeError{Command: idx, Field: planJoin(path, "reason"), Err: fmt.Errorf("differs from description, which it is the old name of")}
		}
		cs.Reason = in.Reason.V
	}
	for _, kind := range planSortedKeys((in.Kinds)) {
		kpath := planJoin(path, kind)
		if cs.Kind != "" {
			return CommandStatus{}, &DecodeError{Command: idx, Field: kpath, Err: fmt.Errorf("status already answers command kind %q", cs.Kind)}
		}
		if kind == "" {
			return CommandStatus{}, &DecodeError{Command: idx, Field: path, Err: fmt.Errorf("command kind must not be empty")}
		}
		cs.Kind = kind
		cs.Targets = map[string][]TargetStatus{}
		for _, g := range planSortedKeys((in.Kinds[kind])) {
			ins := in.Kinds[kind][g]
			ts := make([]TargetStatus, len(ins))
			for i, t := range ins {
				var err error
				if ts[i], err = t.status(idx, fmt.Sprintf("%s[%d]", planJoin(kpath, g), i)); err != nil {
					return CommandStatus{}, err
				}
			}
			cs.Targets[g] = ts
		}
	}
	return cs, nil
}

// UnmarshalJSON decodes the status of one target; errors are
// *DecodeError.
func (t *TargetStatus) UnmarshalJSON(b []byte) error {
	var in planTargetIn
	if err := planRead(b, &in); err != nil {
		return err
	}
	ts, err := in.status(-1, "")
	if err != nil {
		return err
	}
	*t = ts
	return nil
}

func (in planTargetIn) status(idx int, path string) (TargetStatus, error) {
	t := TargetStatus(in)
	t.LastUpdatedTimestamp = t.LastUpdatedTimestamp.UTC()
	if t.Name == "" {
		return TargetStatus{}, &DecodeError{Command: idx, Field: planJoin(path, "name"), Err: fmt.Errorf("must not be empty")}
	}
	if t.Attempt < 0 {
		return TargetStatus{}, &DecodeError{Command: idx, Field: planJoin(path, "attempt"), Err: fmt.Errorf("must not be negative")}
	}
	return t, nil
}
