package statuspage

import (
	"encoding/json"
	"time"

	"github.com/convergekit/converge"
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

// OverviewView is the page at "/": every target, controller and plan.
type OverviewView struct {
	Title       string              `json:"title"`
	Targets     []TargetView        `json:"targets"`
	Controllers []ControllerSummary `json:"controllers"`
	Plans       []PlanSummary       `json:"plans"`
}

// TargetView is the snapshot of a target reconciler, at "/targets/{name}".
type TargetView struct {
	Name string `json:"name"`
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
	// first.
	Failures []PassView `json:"failures"`
	// Actions are the newest host actions (reboot, shutdown) items asked
	// for, oldest first.
	Actions []ActionRequiredView `json:"actionsRequired"`
	// Graph is true when the page can draw the target's graph (see
	// TargetOptions.Build).
	Graph bool `json:"graph"`
	// DroppedEvents counts the events the page lost because it was slow.
	DroppedEvents int `json:"droppedEvents,omitempty"`
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
	Target string `json:"target"`
	// Revision is the target the stages were built from.
	Revision uint64       `json:"revision"`
	Stages   []StageGraph `json:"stages"`
	// SVG is true when the page draws the stages with Graphviz.
	SVG bool `json:"svg"`
}

// StageGraph is the graph of one stage: its items in dependency order,
// each with the outcome of the stage's newest walk that changed something,
// and the graph as DOT and Mermaid text.
type StageGraph struct {
	Name    string      `json:"name"`
	Clean   bool        `json:"clean,omitempty"`
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
	// Outcome is the item's outcome in the stage's newest walk that
	// changed something, "" when there was none.
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
	ControllerSummary
	// AboveSLAObjects are the objects above their state's SLA.
	AboveSLAObjects []ObjectSummary `json:"aboveSLAObjects"`
	// QuarantinedObjects are the quarantined objects as the store has
	// them (every replica's).
	QuarantinedObjects []ObjectSummary `json:"quarantinedObjects"`
	// TerminalObjects are the objects halted by a terminal error.
	TerminalObjects []ObjectSummary `json:"terminalObjects"`
}

// StateView lists the objects in one state, at
// "/controllers/{kind}/states/{state}".
type StateView struct {
	Kind    string          `json:"kind"`
	State   string          `json:"state"`
	Objects []ObjectSummary `json:"objects"`
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
	// Path is the object's page, relative to the handler's root.
	Path string `json:"path"`
}

// FailureView is a handler error an object keeps.
type FailureView struct {
	At    time.Time `json:"at"`
	Error string    `json:"error"`
}

// ObjectView is one object with its history, at
// "/controllers/{kind}/objects/{key}".
type ObjectView struct {
	Kind string `json:"kind"`
	ObjectSummary
	Data    json.RawMessage `json:"data,omitempty"`
	Intents []string        `json:"intents,omitempty"`
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
	// Error says why the plan could not be read; the other fields are
	// then empty.
	Error string `json:"error,omitempty"`
}

// PlansView is the list of plans, at "/plans".
type PlansView struct {
	Plans []PlanSummary `json:"plans"`
}

// PlanView is one plan, per command and per target, with its history, at
// "/plans/{id}".
type PlanView struct {
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
}

// GroupView is one group of targets of a command, in the order they run.
type GroupView struct {
	Name    string           `json:"name"`
	Targets []PlanTargetView `json:"targets"`
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
