package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/convergekit/converge"
)

// State names the lifecycle state of an object ("provisioning",
// "ready", ...). The empty state is not a valid state of a stored object.
type State string

// Object is one object of a Controller: its key, lifecycle state and data,
// and what the controller knows of its failures. It serializes to JSON as
// it is stored: {"state", "since", "reason", "data", "intents",
// "failures", "retries", "lastError", "failingSince", "recentFailures",
// "halted", "slaBreached", "priority", "watches"}, the empty ones left out; Key and Version are
// kept by the store beside it, and History by the store's history.
//
// Failures, Retries, LastError, FailingSince, RecentFailures, Halted and
// SLABreached are kept by the controller (a handler cannot set them):
// they are stored, so every replica and a restarted controller see them,
// and a transition clears them all but RecentFailures, which an operator
// reads to see what went wrong before.
type Object struct {
	// Key names the object within its controller's kind.
	Key string `json:"-"`
	// State is the lifecycle state. Only the handler changes it.
	State State `json:"state"`
	// Since is when the object entered State.
	Since time.Time `json:"since"`
	// Reason is the reason of the last Wait, or of the last transition.
	Reason string `json:"reason,omitempty"`
	// Data is the object's own JSON document, for the handler to use.
	Data json.RawMessage `json:"data,omitempty"`
	// Intents are the requests others queued for the handler with
	// Controller.Request, oldest first. They are cleared once a handler
	// run that saw them succeeds.
	Intents []string `json:"intents,omitempty"`
	// Failures is how many handler runs failed since the object entered
	// State.
	Failures int `json:"failures,omitempty"`
	// Retries is how many handler runs failed in a row, up to this one: a
	// handler called with Retries above zero is retrying, and may take
	// another path after a few failures. The backoff before the next run
	// and the quarantine (Config.QuarantineAfter) go by it; a run that
	// succeeds and Controller.Release set it back to zero.
	Retries int `json:"retries,omitempty"`
	// LastError is the newest handler error in State, nil when there was
	// none.
	LastError *Failure `json:"lastError,omitempty"`
	// FailingSince is when the current run of failures began: the time
	// of the first of the handler runs that failed since the last one
	// that succeeded. It is the zero time when the newest run succeeded
	// (or none ran). Unlike Retries, a release (Controller.Release) does
	// not reset it: only a run that succeeds does.
	FailingSince time.Time `json:"failingSince,omitzero"`
	// RecentFailures holds the newest failed handler runs of the object,
	// oldest first, each with its time, state and error: at most
	// Config.FailureHistory of them, kept across transitions, so an
	// operator can read what went wrong in the states the object went
	// through (the status page and convergectl show them). A handler
	// must not modify it.
	RecentFailures []Failure `json:"recentFailures,omitempty"`
	// Halted, when not empty, says why the controller does not run the
	// handler of the object any more (HaltTerminal, HaltQuarantined) and
	// LastError says what the handler returned.
	Halted Halt `json:"halted,omitempty"`
	// SLABreached means the object has been in State longer than the
	// state's SLA and that was reported (see Config.OnSLA).
	SLABreached bool `json:"slaBreached,omitempty"`
	// Priority orders the object among the due objects of its kind when
	// replicas claim them from a store that keeps priorities (a
	// converge.Prioritizer: MemStore, boltstore, pgstore): higher first,
	// with ageing, so that a low priority never starves (see
	// converge.PriorityStep). 0, the default and the lowest, keeps the
	// due order; objects stored before priorities were kept have it. It
	// is set when the object is added (NewObject.Priority) and changed by
	// SetPriority, never by a handler. A controller on its own
	// (Config.Owner empty) runs its queue in due order.
	Priority int `json:"priority,omitempty"`
	// Watches names the objects, of any kind, whose transitions make this
	// object due at once (a machine its rack), across replicas, as
	// controller-runtime's Watches and Owns do: set by SetWatches, in a
	// store that keeps such links (a converge.Linker: MemStore, pgstore),
	// never by a handler.
	Watches []Ref `json:"watches,omitempty"`
	// History holds the object's newest transitions, oldest first, at
	// most Config.HandlerHistory of them, for the handler to look back
	// on (a state it keeps coming back to, say). It is filled for the
	// handler only and is shared: do not modify it.
	History []converge.HistoryEntry `json:"-"`
	// Version is the store version the object was read at.
	Version uint64 `json:"-"`
}

// Failure is a handler error as an Object keeps it.
type Failure struct {
	// At is when the handler returned the error.
	At time.Time `json:"at"`
	// State is the state the object was in when its handler failed.
	// Failures stored before it was kept have none.
	State State `json:"state,omitempty"`
	// Error is the error's message, cut to its first MaxErrorText bytes.
	Error string `json:"error"`
}

// MaxErrorText is the longest error message an Object keeps in
// Failure.Error; a longer one is cut and ends with "…".
const MaxErrorText = 1024

// Halt says why a Controller stopped running the handler of an object.
// The zero value means it did not.
type Halt string

const (
	// HaltTerminal means the handler returned an error matching
	// ErrTerminal (see Terminal): retrying would not help. Controller.Enqueue,
	// Controller.Request and Controller.Release wake the object.
	HaltTerminal Halt = "terminal"
	// HaltQuarantined means the handler failed Config.QuarantineAfter
	// times in a row in the object's state. Only Controller.Release wakes
	// the object; Controller.Quarantined lists such objects.
	HaltQuarantined Halt = "quarantined"
)

// Verdict is what a handler decided about an object.
type Verdict uint8

const (
	// VerdictNoChange leaves the object as it is until the next periodic
	// pass. It is the zero verdict.
	VerdictNoChange Verdict = iota
	// VerdictTransition moves the object to Result.Next and runs the
	// handler again at once.
	VerdictTransition
	// VerdictWait leaves the state unchanged and records a reason.
	VerdictWait
	// VerdictDeleted removes the object; its history is kept.
	VerdictDeleted
)

var verdictNames = [...]string{"no-change", "transition", "wait", "deleted"}

// String returns the lower-case name of the verdict.
func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Result is a handler's answer for one object. Build it with
// Transition, Wait, NoChange or Deleted. The zero value means NoChange.
type Result struct {
	Verdict Verdict
	// Next is the state to move to (VerdictTransition only).
	Next State
	// Reason explains a wait or a transition; it is stored with the object
	// and, for a transition, in the history.
	Reason string
	// Data, when not nil, replaces the object's data.
	Data json.RawMessage
	// RequeueAfter, when positive, replaces the periodic pass for this
	// object's next run (not used by VerdictTransition and VerdictDeleted).
	RequeueAfter time.Duration
}

// Transition returns the result that moves an object to next; the handler
// runs again at once in the new state.
func Transition(next State) Result {
	return Result{Verdict: VerdictTransition, Next: next}
}

// Wait returns the result that keeps the state and records why the object
// waits; the handler runs again at the next periodic pass.
func Wait(reason string) Result { return Result{Verdict: VerdictWait, Reason: reason} }

// NoChange returns the result that changes nothing; the handler runs again
// at the next periodic pass.
func NoChange() Result { return Result{} }

// Deleted returns the result that removes the object from the store.
func Deleted() Result { return Result{Verdict: VerdictDeleted} }

// Because returns r with its reason set.
func (r Result) Because(reason string) Result { r.Reason = reason; return r }

// WithData returns r with the data that replaces the object's data.
func (r Result) WithData(data json.RawMessage) Result { r.Data = data; return r }

// After returns r with the delay before the next run, instead of the
// periodic pass.
func (r Result) After(d time.Duration) Result { r.RequeueAfter = d; return r }

// Handler drives objects of one kind through their lifecycle. Handle is
// called with a copy of the object; it does the work the state calls for
// and returns the verdict, or an error to be retried with backoff (an
// error made with Terminal is not retried; Config.QuarantineAfter bounds
// the retries in one state). The object tells it how often it failed
// (Object.Failures, Object.Retries) and what happened before
// (Object.History). It is never called for one object twice at once, but
// is called for different objects in parallel. It must honour ctx.
type Handler interface {
	Handle(ctx context.Context, obj Object) (Result, error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, obj Object) (Result, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, obj Object) (Result, error) {
	return f(ctx, obj)
}
