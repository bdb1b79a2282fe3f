package statuspage

import (
	"encoding/json"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/fleet"
)

// The results of a pass, as PassView.Result names them.
const (
	PassFinished  = "finished"
	PassFailed    = "failed"
	PassPreempted = "preempted"
)

// The views below are what the page shows and, for a request with
// "Accept: application/json", the JSON the handler writes at the same path.
// Their JSON field names are stable; new fields may be added.

// OverviewView is the page at "/": what needs attention first, then
// every target, controller and plan.
type OverviewView struct {
	Title string `json:"title"`
	// AsOf is when the page read what it shows.
	AsOf time.Time `json:"asOf"`
	// NeedsAttention lists what needs an operator: quarantined objects,
	// objects halted by a terminal error, objects above their state's
	// SLA, targets whose last pass failed, host actions of targets still
	// pending (a reboot required), plans that failed or were
	// aborted, and running plans with failed targets. It is empty (not
	// nil) when nothing does.
	NeedsAttention []AttentionItem     `json:"needsAttention"`
	Targets        []TargetView        `json:"targets"`
	Controllers    []ControllerSummary `json:"controllers"`
	Plans          []PlanSummary       `json:"plans"`
	// Rollouts are the fleet's rollouts (Options.Rollouts), by ID.
	Rollouts []fleet.RolloutStatus `json:"rollouts"`
}

// The problems an AttentionItem names.
const (
	ProblemQuarantined = "quarantined"
	ProblemTerminal    = "terminal"
	ProblemAboveSLA    = "above SLA"
	ProblemPassFailed  = "last pass failed"
	// ProblemActionPending is a host action (AttentionItem.Action) that
	// a target's item asked for and that has not happened yet.
	ProblemActionPending = "host action pending"
	ProblemPlanFailed    = "plan failed"
	ProblemPlanAborted   = "plan aborted"
	ProblemHostsFailed   = "targets failed"
	// ProblemRolledBack is a target that failed its passes until the
	// reconciler rolled it back to the last target that converged
	// (converge.TargetReconciler.RolledBack); AttentionItem.Revision is
	// the revision that failed. It goes once a new target is set.
	ProblemRolledBack = "rolled back"
	// ProblemRolloutPaused is a fleet rollout paused, by an operator or
	// at a wave's error threshold; ProblemRolloutStopped one aborted or
	// failed.
	ProblemRolloutPaused  = "rollout paused"
	ProblemRolloutStopped = "rollout stopped"
)

// AttentionItem is one thing that needs an operator, on the overview.
type AttentionItem struct {
	// Kind is "object", "target", "plan" or "rollout".
	Kind string `json:"kind"`
	// Controller is the kind of the controller of an object.
	Controller string `json:"controller,omitempty"`
	// Name is the object's key, the target's name or the plan's ID.
	Name string `json:"name"`
	// Problem is one of the Problem constants.
	Problem string `json:"problem"`
	// State is the object's lifecycle state or the plan's state.
	State string `json:"state,omitempty"`
	// Error is the last error: the object's handler error, the failed
	// pass's error, the plan's reason or its first failed target's.
	Error string `json:"error,omitempty"`
	// Since is when the problem was last seen to start or go on: the
	// object's last error (for a halt) or the time it entered its state
	// (above its SLA), the failed pass, the plan's newest update.
	Since time.Time `json:"since"`
	// Action is the host action of ProblemActionPending ("reboot",
	// "shutdown"), and Revision the target revision that asked for it.
	Action   string `json:"action,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
	// Repeats counts the failures in a row behind it (a target's failed
	// passes, an object's failed runs), 0 when not counted.
	Repeats int `json:"repeats,omitempty"`
	// Path is the page of the object, target or plan, relative to the
	// handler's root.
	Path string `json:"path"`
	// Actions are what the viewer may do about it (release, retry,
	// abort), when Options.Actions is set and the Authorizer allows it.
	Actions []ActionView `json:"actions,omitempty"`
}

// TargetView is the snapshot of a target reconciler, at "/targets/{name}".
type TargetView struct {
	// AsOf is when the target's own page read what it shows; it is
	// left out where the view is part of another page (the overview).
	AsOf time.Time `json:"asOf,omitzero"`
	Name string    `json:"name"`
	// Revision is the revision of the current target (0: none set). The
	// reconciler's Store keeps it with the target, so it goes on growing
	// after a restart of the program.
	Revision uint64 `json:"revision"`
	// Since is when the page started watching (WatchTarget): the counts
	// of passes and changes, and the pass numbers, are of this process
	// since then, not stored; they start again after a restart.
	Since time.Time `json:"since"`
	// Finished, Failed and Preempted count the passes seen since Since.
	Finished  int `json:"finished"`
	Failed    int `json:"failed"`
	Preempted int `json:"preempted"`
	// FailuresInARow counts the failed passes since the last one that
	// finished.
	FailuresInARow int `json:"failuresInARow"`
	// Locked means the last pass failed because an update lock is held.
	Locked bool `json:"locked"`
	// LastPass is the newest pass that ended, nil before the first.
	LastPass *PassView `json:"lastPass,omitempty"`
	// Changes counts the walks that changed the system; LastChange is
	// the newest.
	Changes    int         `json:"changes"`
	LastChange *ChangeView `json:"lastChange,omitempty"`
	// Failures are the newest failed passes (at most MaxFailures), newest
	// first; failed passes in a row with the same error are one entry
	// (see PassView.Repeats).
	Failures []PassView `json:"failures"`
	// PendingActions are the host actions (reboot, shutdown) that items
	// asked for and that have not happened yet, oldest first, as the
	// reconciler keeps them in its Store
	// (converge.TargetReconciler.PendingActions): they survive a restart
	// of the program, and go once the host booted again.
	PendingActions []PendingActionView `json:"pendingActions"`
	// RolledBack is the rollback in force, as the reconciler keeps it in
	// its Store (converge.TargetReconciler.RolledBack), nil when none:
	// the target of revision From failed until the reconciler set the
	// last one that converged (To) again.
	RolledBack *RollbackView `json:"rolledBack,omitempty"`
	// Actions are the newest host actions (reboot, shutdown) items asked
	// for in the passes this page saw, oldest first.
	Actions []ActionRequiredView `json:"actionsRequired"`
	// Graph is true when the page can draw the target's graph (see
	// TargetOptions.Build).
	Graph bool `json:"graph"`
	// Data is the current target as JSON, its secrets masked, on the
	// target's own page when Options.ShowData is set.
	Data json.RawMessage `json:"data,omitempty"`
	// DroppedEvents counts the events the page lost because it was slow.
	DroppedEvents int `json:"droppedEvents,omitempty"`
	// Waterfall is the time line of the newest pass that ended, on the
	// target's own page (nil before a pass ended, and on the overview).
	Waterfall *WaterfallView `json:"waterfall,omitempty"`
}

// RollbackView is a target reconciler's rollback in force.
type RollbackView struct {
	// From is the revision that failed, Failures its failed passes in a
	// row; To is the revision rolled back to, stored again as Revision.
	From     uint64    `json:"from"`
	To       uint64    `json:"to"`
	Revision uint64    `json:"revision"`
	Failures int       `json:"failures"`
	At       time.Time `json:"at"`
	// Error is the last failed pass's error.
	Error string `json:"error,omitempty"`
}

// PassView is one pass of a target reconciler that ended.
type PassView struct {
	Pass     int    `json:"pass"`
	Revision uint64 `json:"revision"`
	// At is when the page saw the pass end.
	At time.Time `json:"at"`
	// Result is PassFinished, PassFailed or PassPreempted.
	Result          string  `json:"result"`
	DurationSeconds float64 `json:"durationSeconds"`
	Stage           string  `json:"stage,omitempty"`
	// Error is why a failed pass failed.
	Error string `json:"error,omitempty"`
	// Repeats, on a failed pass of TargetView.Failures, counts the failed
	// passes in a row with the same error (and lock) that it stands for,
	// the newest of them being this one; FirstAt is when the page saw the
	// oldest of them end.
	Repeats int       `json:"repeats,omitempty"`
	FirstAt time.Time `json:"firstAt,omitzero"`
	// Locked means it failed because an update lock is held.
	Locked       bool `json:"locked,omitempty"`
	Forced       bool `json:"forced,omitempty"`
	Intermediate bool `json:"intermediate,omitempty"`
	// RetrySeconds is the delay before the next attempt of a failed pass.
	RetrySeconds float64 `json:"retrySeconds,omitempty"`
}

// ChangeView is a walk that changed the system.
type ChangeView struct {
	At       time.Time `json:"at"`
	Pass     int       `json:"pass"`
	Revision uint64    `json:"revision"`
	Stage    string    `json:"stage,omitempty"`
	// Summary is the walk's converge.Report.Summary.
	Summary string `json:"summary,omitempty"`
}

// PendingActionView is a host action that an item asked for and that has
// not happened yet (converge.PendingAction).
type PendingActionView struct {
	// Action is "reboot" or "shutdown".
	Action string `json:"action"`
	// Item is the item that asked for it, Reason its reason.
	Item   string `json:"item"`
	Reason string `json:"reason,omitempty"`
	// Revision is the revision of the target whose pass asked for it
	// last.
	Revision uint64 `json:"revision"`
	// Since is when it was first asked for.
	Since time.Time `json:"since"`
}

// ActionRequiredView is a host action an item asked for.
type ActionRequiredView struct {
	At     time.Time `json:"at"`
	Pass   int       `json:"pass"`
	Item   string    `json:"item"`
	Action string    `json:"action"`
	Reason string    `json:"reason,omitempty"`
}

// GraphView is the graph of a target's stages, at "/targets/{name}/graph".
type GraphView struct {
	// AsOf is when the page read what it shows.
	AsOf   time.Time `json:"asOf"`
	Target string    `json:"target"`
	// Revision is the target the stages were built from.
	Revision uint64       `json:"revision"`
	Stages   []StageGraph `json:"stages"`
	// SVG is true when the page draws the stages with Graphviz.
	SVG bool `json:"svg"`
}

// StageGraph is the graph of one stage: its items in dependency order,
// each with its outcome in the latest pass, and the graph as DOT and
// Mermaid text.
type StageGraph struct {
	Name  string `json:"name"`
	Clean bool   `json:"clean,omitempty"`
	// Pass is the pass the outcomes are of: the newest that ended (the
	// one under way before any ended), 0 before the first.
	Pass    int         `json:"pass,omitempty"`
	Items   []GraphItem `json:"items"`
	DOT     string      `json:"dot"`
	Mermaid string      `json:"mermaid"`
	// Error says why the stage's graph cannot be ordered (it is invalid);
	// Items then keep the insertion order.
	Error string `json:"error,omitempty"`
}

// GraphItem is one item of a stage.
type GraphItem struct {
	ID           string   `json:"id"`
	Presence     string   `json:"presence"`
	Dependencies []string `json:"dependencies,omitempty"`
	// Outcome is the item's outcome in the latest pass (StageGraph.Pass):
	// of the stage's newest walk in it that changed something; when none
	// did, "unchanged" (the stage converged as it was), or for the stage
	// the pass failed in, "failed" for the items its error names,
	// "waiting" for those that wait for them and "unchanged" for the
	// others. It is "" when the pass did not walk the stage (it failed or
	// was preempted before) or the page cannot tell. The drawings (DOT,
	// Mermaid, SVG) colour the items by the same outcomes, never by an
	// older pass's.
	Outcome string `json:"outcome,omitempty"`
}

// ControllerSummary is a controller's objects counted per lifecycle state,
// on the overview and at "/controllers/{kind}".
type ControllerSummary struct {
	Kind    string       `json:"kind"`
	Objects int          `json:"objects"`
	States  []StateCount `json:"states"`
	// AboveSLA counts the objects in a state longer than its SLA.
	AboveSLA int `json:"aboveSLA"`
	// Quarantined and Terminal count the halted objects.
	Quarantined int `json:"quarantined"`
	Terminal    int `json:"terminal"`
}

// StateCount is the number of objects in one state.
type StateCount struct {
	State    string `json:"state"`
	Objects  int    `json:"objects"`
	AboveSLA int    `json:"aboveSLA"`
	// Halted counts the objects in the state that the controller stopped
	// running (quarantined or terminal).
	Halted int `json:"halted"`
}

// ControllerView is the page of a controller, at "/controllers/{kind}":
// its counts and the objects that need a look.
type ControllerView struct {
	// AsOf is when the page read what it shows.
	AsOf time.Time `json:"asOf"`
	ControllerSummary
	// AboveSLAObjects are the objects above their state's SLA.
	AboveSLAObjects []ObjectSummary `json:"aboveSLAObjects"`
	// QuarantinedObjects are the quarantined objects as the store has
	// them (every replica's).
	QuarantinedObjects []ObjectSummary `json:"quarantinedObjects"`
	// TerminalObjects are the objects halted by a terminal error.
	TerminalObjects []ObjectSummary `json:"terminalObjects"`
	// Limits are the controller's limits per state
	// (controller.Config.Limits) and what they hold now, sorted by
	// state; none without limits.
	Limits []LimitView `json:"limits,omitempty"`
}

// LimitView is the limit of one state of a controller and what it holds
// now (controller.LimitStatus).
type LimitView struct {
	State string `json:"state"`
	// Limit says it in words: "2 at once", "3 per 15s", or both.
	Limit string `json:"limit"`
	// Concurrent, Every (a duration as text, such as "5s") and Burst are
	// the limit's (controller.Limit); zero when not set.
	Concurrent int    `json:"concurrent,omitempty"`
	Every      string `json:"every,omitempty"`
	Burst      int    `json:"burst,omitempty"`
	// InUse is the number of slots held now across every replica, -1
	// when the store cannot tell (controller.LimitStatus.InUse).
	InUse int `json:"inUse"`
	// WaitingForSlot counts the objects in the state put off for want of
	// a slot, as the page's controller counts them (those it put off);
	// WaitingToEnter the objects waiting to enter the state for want of a
	// token of its entry rate.
	WaitingForSlot int `json:"waitingForSlot"`
	WaitingToEnter int `json:"waitingToEnter"`
}

// StateView lists the objects of a controller a page at a time: those in
// one state, at "/controllers/{kind}/states/{state}", or those the query
// parameters pick, at "/controllers/{kind}/objects" (state: a lifecycle
// state; status: quarantined, terminal, halted or above-sla). Both take
// q, text the key must contain, and page.
type StateView struct {
	// AsOf is when the page read what it shows.
	AsOf time.Time `json:"asOf"`
	Kind string    `json:"kind"`
	// State is the lifecycle state the objects are in, "" for any.
	State string `json:"state"`
	// Status is the status filter (StatusQuarantined and so on), "" for
	// any.
	Status string `json:"status,omitempty"`
	// States are the lifecycle states of the controller, to filter by.
	States []string `json:"states"`
	Paging
	// Objects are the objects of the page: the quarantined first, then
	// the others, each part sorted by key.
	Objects []ObjectSummary `json:"objects"`
}

// The status filters of StateView.
const (
	StatusQuarantined = "quarantined"
	StatusTerminal    = "terminal"
	StatusHalted      = "halted"
	StatusAboveSLA    = "above-sla"
)

// Paging says which part of a long list a view holds, and how the list
// was filtered.
type Paging struct {
	// Query is the text the keys (or plan IDs) must contain, "" for any.
	Query string `json:"query,omitempty"`
	// Page is the page shown, from 1; Pages how many there are (at least
	// 1); Total how many rows match the filter; PageSize how many rows a
	// page holds.
	Page     int `json:"page"`
	Pages    int `json:"pages"`
	Total    int `json:"total"`
	PageSize int `json:"pageSize"`
	// Prev and Next are the links (a query, relative to the page) to the
	// pages before and after, "" when there is none.
	Prev string `json:"prev,omitempty"`
	Next string `json:"next,omitempty"`
}

// ObjectSummary is one object of a controller.
type ObjectSummary struct {
	Key      string    `json:"key"`
	State    string    `json:"state"`
	Since    time.Time `json:"since"`
	Reason   string    `json:"reason,omitempty"`
	Failures int       `json:"failures,omitempty"`
	Retries  int       `json:"retries,omitempty"`
	// Halted is "quarantined", "terminal" or "".
	Halted      string       `json:"halted,omitempty"`
	LastError   *FailureView `json:"lastError,omitempty"`
	AboveSLA    bool         `json:"aboveSLA,omitempty"`
	SLABreached bool         `json:"slaBreached,omitempty"`
	// Priority is the object's priority (controller.Object.Priority).
	Priority int `json:"priority,omitempty"`
	// Path is the object's page, relative to the handler's root.
	Path string `json:"path"`
}

// FailureView is a handler error an object keeps.
type FailureView struct {
	At time.Time `json:"at"`
	// State is the state the object was in, "" when the failure was
	// stored without it (LastError is always in the object's state).
	State string `json:"state,omitempty"`
	Error string `json:"error"`
}

// ObjectView is one object with its history, at
// "/controllers/{kind}/objects/{key}".
type ObjectView struct {
	// AsOf is when the page read what it shows.
	AsOf time.Time `json:"asOf"`
	Kind string    `json:"kind"`
	ObjectSummary
	Data    json.RawMessage `json:"data,omitempty"`
	Intents []string        `json:"intents,omitempty"`
	// FailingSince is when the object's current run of failures began,
	// the zero time when its newest handler run succeeded.
	FailingSince time.Time `json:"failingSince,omitzero"`
	// RecentFailures are the object's newest failed handler runs, oldest
	// first, each with its time, state and error.
	RecentFailures []FailureView `json:"recentFailures,omitempty"`
	// History is the object's stored transitions, oldest first.
	History []converge.HistoryEntry `json:"history"`
	// Actions are the actions the page offers (Options.Actions).
	Actions []ActionView `json:"actions,omitempty"`
}

// PlanSummary is one plan's progress, on the overview and at "/plans".
type PlanSummary struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Abort is the reason the plan was asked to stop, "" when it was not.
	Abort    string `json:"abort,omitempty"`
	Commands int    `json:"commands"`
	// Active is the index of the first command not completed, -1 when
	// every command completed.
	Active int `json:"active"`
	// Targets, Completed and Failed count the targets of every command.
	Targets   int `json:"targets"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Updated is the newest time the plan's status records: a command
	// starting, a target changing state.
	Updated time.Time `json:"updated,omitzero"`
	// Error says why the plan could not be read; the other fields are
	// then empty.
	Error string `json:"error,omitempty"`
}

// PlansView is the list of plans, at "/plans", a page at a time; the
// query parameters state (a plan state) and q (text the ID must contain)
// filter it.
type PlansView struct {
	// AsOf is when the page read what it shows.
	AsOf time.Time `json:"asOf"`
	// State is the plan state the plans are in, "" for any.
	State string `json:"state,omitempty"`
	// States are the plan states of the listed plans, to filter by.
	States []string `json:"states"`
	Paging
	Plans []PlanSummary `json:"plans"`
}

// PlanView is one plan, per command and per target, with its history, at
// "/plans/{id}".
type PlanView struct {
	// AsOf is when the page read what it shows.
	AsOf time.Time `json:"asOf"`
	PlanSummary
	Version      uint64                  `json:"version"`
	CommandViews []CommandView           `json:"commandStatus"`
	History      []converge.HistoryEntry `json:"history"`
	Actions      []ActionView            `json:"actions,omitempty"`
}

// CommandView is one command of a plan.
type CommandView struct {
	Index  int    `json:"index"`
	Kind   string `json:"kind"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Started is when the command became active, nil before.
	Started   *time.Time  `json:"started,omitempty"`
	Targets   int         `json:"targets"`
	Completed int         `json:"completed"`
	Failed    int         `json:"failed"`
	Groups    []GroupView `json:"groups"`
	// FailedTargets are the command's targets that failed, each with its
	// reason, in the order of Groups.
	FailedTargets []PlanTargetFailure `json:"failedTargets,omitempty"`
}

// GroupView is one group of targets of a command, in the order they run,
// with its progress.
type GroupView struct {
	Name      string           `json:"name"`
	Total     int              `json:"total"`
	Completed int              `json:"completed"`
	Failed    int              `json:"failed"`
	Targets   []PlanTargetView `json:"targets"`
}

// PlanTargetFailure is a target of a command that failed, and why.
type PlanTargetFailure struct {
	Group   string    `json:"group"`
	Name    string    `json:"name"`
	State   string    `json:"state"`
	Reason  string    `json:"reason"`
	Attempt int       `json:"attempt,omitempty"`
	At      time.Time `json:"at"`
}

// PlanTargetView is one target of a command.
type PlanTargetView struct {
	Name        string    `json:"name"`
	State       string    `json:"state"`
	Reason      string    `json:"reason,omitempty"`
	Attempt     int       `json:"attempt,omitempty"`
	LastUpdated time.Time `json:"lastUpdated"`
}

// ActionView is an action the page offers: a POST to Path (relative to
// the handler's root) with the form field "csrf" set to Token.
type ActionView struct {
	// Name is "retry", "abort" or "release".
	Name   string `json:"name"`
	Method string `json:"method"`
	Path   string `json:"path"`
	Token  string `json:"token"`
}

// ErrorView is the JSON body of an error response.
type ErrorView struct {
	Status int    `json:"status"`
	Error  string `json:"error"`
}
