package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// State is the processing state of a plan or of one of its commands.
// Four states are the core of the machine (StateNewPlan, StateSchedulableWait,
// StateSchedulable, StateCompleted); every other value, including the ones a
// CommandHandler makes up, is an error state that stops the command and the
// plan. The zero value "" is read as StateNewPlan.
//
// The names are k0s autopilot's: the error states k0s's plan controllers
// set are StateIncompleteTargets, StateRestricted and StateApplyFailed.
// StateInconsistentTargets, StateTimedOut and StateAborted are converge's
// own, for checks and controls k0s does not have; none of them stands
// where k0s sets a state of its own. Decoding reads the names of converge
// v0.1.0 (Failed, MissingPlatform, MissingSignalNode) and k0s's legacy
// MissingSignalNode as the states that replaced them.
type State string

// The core states and the error states that the built-in machinery and
// autopilot.CommandHandler use. The string values are stable: they are
// written to status documents and stores.
const (
	// StateNewPlan fills the status of every command (discovering targets).
	StateNewPlan State = "NewPlan"
	// StateSchedulableWait asks whether the active command can proceed or is
	// complete.
	StateSchedulableWait State = "SchedulableWait"
	// StateSchedulable does the active command's work (signal the next
	// targets), or completes the command when nothing is left to signal.
	StateSchedulable State = "Schedulable"
	// StateCompleted means the command (or every command of the plan) is done.
	StateCompleted State = "Completed"

	// StateIncompleteTargets (k0s): a target does not exist, is not of
	// its group's kind, has a platform the command has no payload for
	// (TargetMissing, TargetMissingPlatform), or vanished before it was
	// signalled.
	StateIncompleteTargets State = "IncompleteTargets"
	// StateRestricted (k0s): a target's node kind is excluded from plans;
	// the targets stay TargetPending.
	StateRestricted State = "Restricted"
	// StateApplyFailed (k0s): a target reported that it could not do the
	// command (TargetApplyFailed).
	StateApplyFailed State = "ApplyFailed"

	// StateInconsistentTargets (converge's own): a node is listed twice in
	// a command, which k0s does not check.
	StateInconsistentTargets State = "InconsistentTargets"
	// StateTimedOut (converge's own): the command or one of its targets
	// ran past its timeout.
	StateTimedOut State = "TimedOut"
	// StateAborted (converge's own): the plan was asked to stop
	// (Runner.Abort); the reason says why.
	StateAborted State = "Aborted"
)

// stateRenamed maps the state names that converge v0.1.0 stored, and
// k0s's legacy MissingSignalNode, to the states that replaced them.
var stateRenamed = map[State]State{
	"Failed":            StateApplyFailed,
	"MissingPlatform":   StateIncompleteTargets,
	"MissingSignalNode": StateIncompleteTargets,
}

// UnmarshalText reads a state name, migrating the names of converge
// v0.1.0 and k0s's legacy MissingSignalNode (see State).
func (s *State) UnmarshalText(b []byte) error {
	*s = State(b)
	if r, ok := stateRenamed[*s]; ok {
		*s = r
	}
	return nil
}

// normal returns s with the zero value read as StateNewPlan.
func (s State) normal() State {
	if s == "" {
		return StateNewPlan
	}
	return s
}

// IsError reports whether s is an error state: anything but the four core
// states (the zero value counts as NewPlan).
func (s State) IsError() bool {
	switch s.normal() {
	case StateNewPlan, StateSchedulableWait, StateSchedulable, StateCompleted:
		return false
	}
	return true
}

// IsFinal reports whether no further processing happens in s: Completed or an
// error state.
func (s State) IsFinal() bool { return s == StateCompleted || s.IsError() }

// TargetState is the state of one target (signal node) of a command. The
// zero value "" is read as TargetPending. As with State, the names are
// k0s's (SignalPending, SignalSent, SignalCompleted, SignalApplyFailed,
// SignalMissingNode, SignalMissingPlatform), and TargetInconsistent,
// TargetTimedOut and TargetAborted are converge's own. Decoding reads
// converge v0.1.0's SignalFailed as TargetApplyFailed and its
// SignalRestricted as TargetPending (k0s leaves restricted targets
// pending), keeping the reason.
type TargetState string

// Target states. TargetPending, TargetSent and TargetCompleted are the
// normal path; the others are failures and come with a reason.
const (
	// TargetPending: the target has not been signalled yet.
	TargetPending TargetState = "SignalPending"
	// TargetSent: the target was signalled and has not finished.
	TargetSent TargetState = "SignalSent"
	// TargetCompleted: the target reported that it did the command.
	TargetCompleted TargetState = "SignalCompleted"
	// TargetApplyFailed (k0s): the target reported a failure (see the
	// reason).
	TargetApplyFailed TargetState = "SignalApplyFailed"
	// TargetMissing (k0s): the target node does not exist (any more), or
	// is not of the kind its group takes.
	TargetMissing TargetState = "SignalMissingNode"
	// TargetMissingPlatform (k0s): the command has no payload for the
	// target's platform.
	TargetMissingPlatform TargetState = "SignalMissingPlatform"

	// TargetInconsistent (converge's own): the node is listed twice.
	TargetInconsistent TargetState = "SignalInconsistent"
	// TargetTimedOut (converge's own): the target did not finish within
	// the target timeout, or was still unfinished when the command timed
	// out.
	TargetTimedOut TargetState = "SignalTimedOut"
	// TargetAborted (converge's own): the target was still pending when
	// its plan was aborted; it was never signalled for this attempt.
	TargetAborted TargetState = "SignalAborted"
)

// targetRenamed maps the target state names that converge v0.1.0 stored
// to the states that replaced them.
var targetRenamed = map[TargetState]TargetState{
	"SignalFailed":     TargetApplyFailed,
	"SignalRestricted": TargetPending,
}

// UnmarshalText reads a target state name, migrating the names of
// converge v0.1.0 (see TargetState).
func (s *TargetState) UnmarshalText(b []byte) error {
	*s = TargetState(b)
	if r, ok := targetRenamed[*s]; ok {
		*s = r
	}
	return nil
}

func (s TargetState) normal() TargetState {
	if s == "" {
		return TargetPending
	}
	return s
}

// IsFailure reports whether s is a failure state (anything but pending,
// sent and completed).
func (s TargetState) IsFailure() bool {
	switch s.normal() {
	case TargetPending, TargetSent, TargetCompleted:
		return false
	}
	return true
}

// Plan is an ordered list of commands, the `spec` of a plan document. The
// zero value has no ID and no commands and does not validate.
type Plan struct {
	// ID identifies the plan; it is part of every signal, so nodes can tell
	// plans apart.
	ID string
	// Timestamp is informational (k0s writes "now"); it is kept as written.
	Timestamp string
	// Commands run one after the other, in this order.
	Commands []Command
}

// Command is one step of a plan: a kind (which CommandHandler runs it), the
// kind's own spec, and the groups of targets it applies to. The zero value
// has no kind and does not validate.
type Command struct {
	// Kind names the command, for example "k0supdate"; it selects the
	// handler and is the key of the command in documents.
	Kind string
	// Spec holds the kind's own fields (version, platforms, ...) as written,
	// one raw JSON value per key. Handlers decode what they need.
	Spec map[string]json.RawMessage
	// Targets are the groups of target nodes, in the order they run: every
	// target of a group completes before the next group starts. See
	// CommandTargets.Order for how the order is kept in documents.
	Targets []CommandTargets
	// InlineTargets writes the groups at the top of the command body (as k0s
	// does for airgapupdate `workers:`) instead of under `targets:`. Only
	// groups named "controllers" and "workers" can be written there.
	InlineTargets bool
	// Timeout bounds the whole command from the moment it becomes active;
	// 0 means the runner's default (none unless configured). It is
	// measured on the runner's monotonic clock (see CommandContext.Since):
	// a step of the wall clock never makes it fire early.
	Timeout time.Duration
	// TargetTimeout bounds each target from the moment it is signalled;
	// 0 means the runner's default (none unless configured). It is
	// measured like Timeout.
	TargetTimeout time.Duration
}

// CommandTargets is one group of targets of a command, for example the
// controllers or the workers. The zero value has no name and no discovery
// and does not validate.
type CommandTargets struct {
	// Group names the group ("controllers", "workers", ...).
	Group string
	// Order sorts the groups in documents, where keys have no order: groups
	// run by ascending Order, then by name (so k0s "controllers" run before
	// "workers" with the zero Order).
	Order int
	// Discovery finds the target nodes when the plan starts.
	Discovery CommandDiscovery
	// Concurrent is the most targets of this group signalled and not
	// finished at once (limits.concurrent); 0 or less means 1, k0s's
	// default. autopilot.CommandHandler signals the targets of a group of
	// controllers one at a time whatever the limit, as k0s does.
	Concurrent int
}

// CommandDiscovery says how the targets of a group are found: a static list
// of nodes, a selector that the handler resolves, a discovery function
// registered with the handler under a name, or (from Go only, for plans that
// are stepped in memory and never stored) a function. As in k0s, a
// discovery that sets none finds no node, and when a document sets both a
// static list and a selector, the static list is used (k0s reads static
// first); both are kept, so the document encodes as it was read. The zero
// value finds no node.
type CommandDiscovery struct {
	// Static lists the node names; nil means "not static". An empty list
	// finds no node.
	Static []string
	// Selector selects nodes by labels and fields; the handler resolves it.
	Selector *CommandSelector
	// Function names a discovery function the handler knows (see
	// autopilot.CommandHandler.Discover); documents write it as
	// `discovery: {function: <name>}`.
	Function string
	// Func discovers the nodes. It cannot be written to documents, so
	// Runner.Create and Document.Validate reject a plan that uses it: use
	// Function for plans that are stored.
	Func CommandDiscoverFunc
}

// CommandSelector selects nodes by label and field selectors, in the
// Kubernetes selector syntax; its meaning is up to whoever resolves it.
type CommandSelector struct {
	Labels string `json:"labels,omitempty"`
	Fields string `json:"fields,omitempty"`
}

// CommandDiscoverFunc returns the names of a group's target nodes.
type CommandDiscoverFunc func(ctx context.Context) ([]string, error)

// planSortTargets sorts groups by Order then Group, the order they run in.
func planSortTargets(ts []CommandTargets) {
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].Order != ts[j].Order {
			return ts[i].Order < ts[j].Order
		}
		return ts[i].Group < ts[j].Group
	})
}

// Limit returns the group's effective concurrency limit: Concurrent, or 1
// when it is not positive.
func (t CommandTargets) Limit() int {
	if t.Concurrent <= 0 {
		return 1
	}
	return t.Concurrent
}

// Status is the `status` of a plan document: the plan's state and one
// CommandStatus per command, at the same index. The zero value is a plan that
// has not started (NewPlan).
type Status struct {
	State State `json:"state"`
	// Reason says why the plan is in an error state.
	Reason string `json:"reason,omitempty"`
	// Abort, when not empty, is the reason the plan was asked to stop
	// (Runner.Abort): no target is signalled and no command starts any
	// more, and once the signalled targets finish, the plan ends in
	// StateAborted. "" means no abort was asked.
	Abort    string          `json:"abort,omitempty"`
	Commands []CommandStatus `json:"commands"`
}

// CommandStatus is the status of the command at the same index: its state
// and, per group, the state of every target. The zero value is a command in
// NewPlan with no targets yet.
type CommandStatus struct {
	// ID is the index of the command in the plan.
	ID int
	// Kind is the kind of the command it answers; it is the key of the
	// targets in documents.
	Kind  string
	State State
	// Reason says why the command is in an error state.
	Reason string
	// Started is when the command became active (zero before), on the
	// wall clock; the command timeout counts from it on the runner's
	// monotonic clock (see CommandContext.Since).
	Started time.Time
	// Targets maps a group name to the status of each of its targets.
	Targets map[string][]TargetStatus
}

// TargetStatus is the status of one target of a command. The zero value
// (with a name) is a pending target.
type TargetStatus struct {
	Name  string      `json:"name"`
	State TargetState `json:"state"`
	// Reason says why the target failed.
	Reason string `json:"reason,omitempty"`
	// Attempt counts the retries of the plan that re-signalled this target;
	// it is part of the signal, so a node's report of an older attempt does
	// not count.
	Attempt int `json:"attempt,omitempty"`
	// LastUpdatedTimestamp is when State last changed, on the wall clock;
	// the target timeout counts from it while the target is TargetSent, on
	// the runner's monotonic clock (see CommandContext.Since). It is
	// written in RFC 3339 with the fraction of a second the runner's clock
	// gave (k0s writes whole seconds and reads both), and read back to the
	// nanosecond.
	LastUpdatedTimestamp time.Time `json:"lastUpdatedTimestamp"`
}

// Clone returns a deep copy of s.
func (s *Status) Clone() *Status {
	if s == nil {
		return nil
	}
	c := *s
	c.Commands = make([]CommandStatus, len(s.Commands))
	for i := range s.Commands {
		c.Commands[i] = s.Commands[i].Clone()
	}
	return &c
}

// Clone returns a deep copy of s.
func (s CommandStatus) Clone() CommandStatus {
	c := s
	if s.Targets != nil {
		c.Targets = make(map[string][]TargetStatus, len(s.Targets))
		for g, ts := range s.Targets {
			c.Targets[g] = append([]TargetStatus(nil), ts...)
		}
	}
	return c
}

// Target returns the status of the named target in group, or nil.
func (s *CommandStatus) Target(group, name string) *TargetStatus {
	ts := s.Targets[group]
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

// Clone returns a deep copy of p (discovery functions are shared).
func (p Plan) Clone() Plan {
	c := p
	c.Commands = make([]Command, len(p.Commands))
	for i, cmd := range p.Commands {
		cc := cmd
		if cmd.Spec != nil {
			cc.Spec = make(map[string]json.RawMessage, len(cmd.Spec))
			for k, v := range cmd.Spec {
				cc.Spec[k] = append(json.RawMessage(nil), v...)
			}
		}
		cc.Targets = make([]CommandTargets, len(cmd.Targets))
		for j, t := range cmd.Targets {
			tt := t
			tt.Discovery.Static = append([]string(nil), t.Discovery.Static...)
			if t.Discovery.Selector != nil {
				sel := *t.Discovery.Selector
				tt.Discovery.Selector = &sel
			}
			cc.Targets[j] = tt
		}
		c.Commands[i] = cc
	}
	return c
}

// FieldError names the part of a plan document that makes it
// unrunnable: a field of the spec (it matches ErrInvalid) or an entry of
// the status that does not answer the spec (it matches
// ErrStatusMismatch).
type FieldError struct {
	// Command is the index of the culprit command (or status entry), or -1
	// for the plan.
	Command int
	// Field is the path of the culprit in a document, for example
	// "spec.commands[0].k0supdate.targets.workers.discovery.static.nodes";
	// for a status entry, "status.commands[i]".
	Field  string
	Reason string
	// Err is the sentinel the error matches: ErrInvalid or
	// ErrStatusMismatch; nil means ErrInvalid.
	Err error
}

// Error describes the problem, naming its culprit.
func (e *FieldError) Error() string {
	return fmt.Sprintf("plan: %s: %s", e.Field, e.Reason)
}

// Is makes FieldError match its sentinel (see Err).
func (e *FieldError) Is(target error) bool {
	if e.Err == nil {
		return target == ErrInvalid
	}
	return target == e.Err
}

// Error reports a plan that stopped in an error state.
type Error struct {
	PlanID string
	// Command is the index of the command that failed, or -1.
	Command int
	// Kind is the kind of the command that failed ("" when Command is -1).
	Kind  string
	State State
	// Reason says why: the failed command's reason (CommandStatus.Reason),
	// or the plan's when no command failed.
	Reason string
}

// Error describes the problem, naming its culprit.
func (e *Error) Error() string {
	if e.Command < 0 {
		return fmt.Sprintf("plan: %q: %s: %s", e.PlanID, e.State, e.Reason)
	}
	return fmt.Sprintf("plan: %q: command %d (%s): %s: %s", e.PlanID, e.Command, e.Kind, e.State, e.Reason)
}

// Is makes Error match ErrFailed.
func (e *Error) Is(target error) bool { return target == ErrFailed }

// CommandError reports an error of one command's handler, with the kind
// and the state it was called in.
type CommandError struct {
	Command int
	Kind    string
	State   State
	Err     error
}

// Error describes the problem, naming its culprit.
func (e *CommandError) Error() string {
	return fmt.Sprintf("plan: command %d (%s) in %s: %s", e.Command, e.Kind, e.State, causeText(e.Err))
}

// Unwrap returns the handler's error.
func (e *CommandError) Unwrap() error { return e.Err }

// Validate reports the first reason p cannot be run as a *FieldError whose
// Field is the path of the culprit in a document, for example
// "spec.commands[1].k0supdate.timeout": no ID (the runner keys a plan by
// it), a command without a kind, a negative timeout, a Spec that holds a
// key the Command has a field for, a group without a name or listed
// twice, or a discovery function that cannot be stored next to another
// discovery. As k0s does, it accepts a plan that has nothing to do: no
// commands, a command without target groups, a group whose discovery
// finds no node (an empty static list, or no discovery at all) — such a
// plan or command completes without signalling anyone — and leaves what
// k0s checks while a plan runs (a node that does not exist, an empty node
// name) to the command's handler, which sets the state k0s would.
func (p Plan) Validate() error {
	if p.ID == "" {
		return &FieldError{Command: -1, Field: "spec.id", Reason: "must not be empty"}
	}
	for i, c := range p.Commands {
		if c.Kind == "" {
			return &FieldError{Command: i, Field: fmt.Sprintf("spec.commands[%d]", i), Reason: "command kind must not be empty"}
		}
		body := c.Path(i)
		if c.Timeout < 0 {
			return &FieldError{Command: i, Field: body + "." + planKeyTimeout, Reason: "must not be negative"}
		}
		if c.TargetTimeout < 0 {
			return &FieldError{Command: i, Field: body + "." + planKeyTargetTimeout, Reason: "must not be negative"}
		}
		for _, k := range planSortedKeys(c.Spec) {
			if k == planKeyTargets || k == planKeyTimeout || k == planKeyTargetTimeout || planInlineGroups[k] {
				return &FieldError{Command: i, Field: body + "." + k, Reason: "reserved key in Spec; use the Command field"}
			}
		}
		seen := map[string]bool{}
		for _, t := range c.Targets {
			path := c.GroupPath(i, t.Group)
			if t.Group == "" {
				return &FieldError{Command: i, Field: body + "." + planKeyTargets, Reason: "group name must not be empty"}
			}
			if seen[t.Group] {
				return &FieldError{Command: i, Field: path, Reason: "group listed twice"}
			}
			seen[t.Group] = true
			if c.InlineTargets && !planInlineGroups[t.Group] {
				return &FieldError{Command: i, Field: path, Reason: "only controllers and workers can be inline groups"}
			}
			if d := t.Discovery; d.Func != nil && (d.Static != nil || d.Selector != nil || d.Function != "") {
				return &FieldError{Command: i, Field: path + ".discovery", Reason: "a Go discovery function cannot be combined with static, selector or function"}
			}
		}
	}
	return nil
}

// Path returns the path of the command's body in a document, when it is
// command i of its plan: "spec.commands[i].<kind>".
func (c Command) Path(i int) string { return fmt.Sprintf("spec.commands[%d].%s", i, c.Kind) }

// GroupPath returns the path of the command's group in a document, when it
// is command i of its plan: "spec.commands[i].<kind>.targets.<group>", or
// without "targets." for InlineTargets.
func (c Command) GroupPath(i int, group string) string {
	if c.InlineTargets {
		return c.Path(i) + "." + group
	}
	return c.Path(i) + "." + planKeyTargets + "." + group
}

// planStorable reports a plan that cannot be written to a document: one
// with a Go discovery function.
func planStorable(p Plan) error {
	for i, c := range p.Commands {
		for _, t := range c.Targets {
			if t.Discovery.Func != nil {
				return &FieldError{Command: i, Field: c.GroupPath(i, t.Group) + ".discovery",
					Reason: "a Go discovery function cannot be stored; register it with the handler and name it in Function"}
			}
		}
	}
	return nil
}

// planReconcileStatus checks that st answers p, repairing what can be repaired:
// missing entries are added (in NewPlan, so NewPlan fills them) and entries
// with a wrong ID are renumbered. An entry whose kind differs from its
// command, or entries beyond the last command, cannot be repaired: the plan
// changed under its status. It reports whether it changed st.
func planReconcileStatus(p Plan, st *Status) (bool, error) {
	if len(st.Commands) > len(p.Commands) {
		return false, &FieldError{Err: ErrStatusMismatch, Command: len(p.Commands), Field: fmt.Sprintf("status.commands[%d]", len(p.Commands)), Reason: fmt.Sprintf("%d status entries for %d commands", len(st.Commands), len(p.Commands))}
	}
	changed := false
	for i := range st.Commands {
		cs := &st.Commands[i]
		if cs.Kind != "" && cs.Kind != p.Commands[i].Kind {
			return false, &FieldError{Err: ErrStatusMismatch, Command: i, Field: fmt.Sprintf("status.commands[%d]", i), Reason: fmt.Sprintf("answers %q but command %d is %q", cs.Kind, i, p.Commands[i].Kind)}
		}
		if cs.ID != i {
			cs.ID = i
			changed = true
		}
		if cs.Kind == "" {
			cs.Kind = p.Commands[i].Kind
			changed = true
		}
	}
	for i := len(st.Commands); i < len(p.Commands); i++ {
		st.Commands = append(st.Commands, CommandStatus{ID: i, Kind: p.Commands[i].Kind, State: StateNewPlan})
		changed = true
		if st.State.normal() != StateNewPlan && !st.State.IsError() {
			// The rest of the status is kept; NewPlan fills the new entries.
			st.State = StateNewPlan
		}
	}
	return changed, nil
}

// Retry makes a plan stopped in an error state runnable again, from the
// command that failed. A command that failed while it was active goes back to
// SchedulableWait: its targets in a failure state go back to TargetPending with
// Attempt raised (so a node's report of the failed attempt does not count)
// and their reason cleared (Runner.Retry keeps the reasons in the
// history), targets still TargetSent stay signalled with a fresh timestamp, and
// completed targets stay completed, so the next run signals again only what
// did not complete. A command that failed in NewPlan (before it was active)
// goes back to NewPlan, which discovers its targets again and keeps the
// completed ones. The commands after the failed one keep their status. The
// command timeout counts again from when the command is next active, and an
// abort request is cleared. Retry returns ErrNotFailed (wrapped) when the
// plan is not in an error state, and then changes nothing.
func (s *Status) Retry(now time.Time) error {
	if !s.State.IsError() {
		return fmt.Errorf("%w (state %s)", ErrNotFailed, s.State.normal())
	}
	now = now.UTC()
	for i := range s.Commands {
		cs := &s.Commands[i]
		if !cs.State.IsError() {
			continue
		}
		for g := range cs.Targets {
			for j := range cs.Targets[g] {
				t := &cs.Targets[g][j]
				switch {
				case t.State.IsFailure():
					t.State = TargetPending
					t.Attempt++
					t.Reason = ""
					t.LastUpdatedTimestamp = now
				case t.State == TargetSent:
					t.LastUpdatedTimestamp = now
				}
			}
		}
		if cs.Started.IsZero() {
			cs.State = StateNewPlan
		} else {
			cs.State = StateSchedulableWait
		}
		cs.Reason = ""
		cs.Started = time.Time{}
	}
	s.State = planAggregate(s)
	for i := range s.Commands {
		if s.Commands[i].State.normal() == StateNewPlan {
			s.State = StateNewPlan
		}
	}
	s.Reason = ""
	s.Abort = ""
	return nil
}
