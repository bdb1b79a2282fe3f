package converge

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
)

// Mode is the kind of walk that produced a Report.
type Mode uint8

const (
	// ModeApply converges items to their presence (Apply, ApplyDry).
	ModeApply Mode = iota
	// ModeClean converges every item to its clean state (Clean, CleanDry).
	ModeClean
)

// String returns "apply" or "clean" (mode(n) for an undeclared value).
func (m Mode) String() string { return enumString("mode", modeNames[:], uint8(m)) }

// Outcome is what happened to one item in a walk.
type Outcome uint8

const (
	outcomePending Outcome = iota
	// OutcomeUnchanged means the item had already converged.
	OutcomeUnchanged
	// OutcomeChanged means Apply ran and verification found it converged.
	OutcomeChanged
	// OutcomeWouldChange means a dry run found work to do and simulated it.
	OutcomeWouldChange
	// OutcomeFailed means a phase failed; see ItemResult.Err and Phase.
	OutcomeFailed
	// OutcomeWaiting means the item was not run because items it waits for
	// (dependencies, dependents for an Absent item, and the items it is
	// ordered after: Graph.After) failed or were waiting.
	OutcomeWaiting
	// OutcomeNotRun means the walk was interrupted, stopped by fail-fast
	// or preempted by a new target before the item started.
	OutcomeNotRun
)

var outcomeNames = [...]string{"pending", "unchanged", "changed", "would-change", "failed", "waiting", "not-run"}

// String returns the lower-case name of the outcome.
func (o Outcome) String() string { return enumString("outcome", outcomeNames[:], uint8(o)) }

// ItemResult is what a walk decided and did for one item.
type ItemResult struct {
	ID ID
	// Presence is what the item converged to in this walk (always Absent
	// in a clean walk).
	Presence Presence
	// Decision is the answer of the first Check.
	Decision Decision
	Outcome  Outcome
	// Phase is the phase a failed item failed in: it repeats the phase of
	// Err (PhaseNone when nothing failed).
	Phase Phase
	// Unknown is true when StateCurrent could not know the state before
	// the change (ErrStateUnknown); Before is then nil.
	Unknown bool
	// Before is the state discovered first, Target the goal (or clean)
	// state, After the state verified after Apply (simulated in a dry
	// run; equal to Before when nothing was required).
	Before, Target, After any
	Started               time.Time
	Duration              time.Duration
	// Err is the *ItemError of a failed item, or an error matching
	// ErrNotRun for an item not run.
	Err error
	// WaitingFor lists, for OutcomeWaiting, the items it waited for that
	// did not finish.
	WaitingFor []ID
	// Actions are the host actions the item asked for (RequireAction).
	Actions []RequiredAction
	// Refresh lists, sorted, the dependencies that made the walk refresh
	// the item (see Refresher): those that changed in this walk and those
	// whose refresh was pending from an earlier one. In Apply the item's
	// Refresh ran (it is OutcomeChanged, or OutcomeFailed in PhaseRefresh
	// when Refresh failed); in a dry run it would run (the item is
	// OutcomeWouldChange). Empty when the item was not refreshed. It is
	// left out of the JSON form when empty.
	Refresh []ID `json:",omitempty"`
	// ApplyStart and ApplyDuration place the item's Apply (ApplyDry in a
	// dry run) on its time line: it began ApplyStart after Started (the
	// item discovered its state, computed its target and checked before
	// it) and took ApplyDuration; verification followed, until Started
	// plus Duration. Both are 0 for an item that did not apply, and left
	// out of the JSON form then, which reads reports without them.
	ApplyStart    time.Duration `json:",omitempty"`
	ApplyDuration time.Duration `json:",omitempty"`
}

// ResultStates returns the states of r with the item's own state type S
// (the S of the Item[S] that Wrap adapted): the state discovered before the
// change and the state after it (simulated in a dry run). A state that is nil
// (an unknown current state, or an item that did not run so far) is returned
// as the zero S. ok is false when a state of r is not an S, or when r holds
// no state at all (an item that failed before discovery, or did not run);
// both states are then the zero S.
func ResultStates[S any](r ItemResult) (before, after S, ok bool) {
	var zero S
	if r.Before == nil && r.After == nil {
		return zero, zero, false
	}
	if r.Before != nil {
		if before, ok = r.Before.(S); !ok {
			return zero, zero, false
		}
	}
	if r.After != nil {
		if after, ok = r.After.(S); !ok {
			return zero, zero, false
		}
	}
	return before, after, true
}

// Interrupt says whether and how a walk was interrupted (see WalkerConfig.Grace
// and WithInterrupt).
type Interrupt uint8

const (
	// InterruptNone means the walk was not interrupted.
	InterruptNone Interrupt = iota
	// InterruptGraceful means the walk was interrupted and the items
	// already running finished with their context intact; the items that
	// had not started are OutcomeNotRun.
	InterruptGraceful
	// InterruptImmediate means the walk was interrupted and the context of
	// the items still running was cancelled: WalkerConfig.Grace is 0 or ran out,
	// or a second interrupt arrived.
	InterruptImmediate
)

var interruptNames = [...]string{"none", "graceful", "immediate"}

// String returns "none", "graceful" or "immediate".
func (i Interrupt) String() string { return enumString("interrupt", interruptNames[:], uint8(i)) }

// Report is the result of a walk: one ItemResult per item, in the order the
// items were added to the graph.
type Report struct {
	// Walk identifies the walk; its events and item errors carry it too.
	Walk WalkID
	// Revision is the revision of the TargetReconciler target whose pass
	// ran the walk (TargetEvent.Revision); 0 for a walk run on its own.
	Revision uint64
	Mode     Mode
	Dry      bool
	Items    []ItemResult
	Started  time.Time
	Duration time.Duration
	// Interrupted says whether the walk was interrupted, and whether the
	// items in flight could finish (graceful) or had their context
	// cancelled (immediate).
	Interrupted Interrupt
	// EventsDropped is how many progress events the Observer did not get
	// because it was too slow (see Observer).
	EventsDropped int

	index  map[ID]int
	notRun int
	cause  error
}

// Item returns the result of item id. A Report that no walk made (one
// decoded from JSON, or built by hand) is searched item by item.
func (r *Report) Item(id ID) (ItemResult, bool) {
	if r == nil {
		return ItemResult{}, false
	}
	if r.index == nil {
		for _, it := range r.Items {
			if it.ID == id {
				return it, true
			}
		}
		return ItemResult{}, false
	}
	k, ok := r.index[id]
	if !ok || k >= len(r.Items) {
		return ItemResult{}, false
	}
	return r.Items[k], true
}

// IDs returns the IDs of the items with one of the given outcomes, in
// report order.
func (r *Report) IDs(outcomes ...Outcome) []ID {
	if r == nil {
		return nil
	}
	var out []ID
	for i := range r.Items {
		it := &r.Items[i]
		for _, o := range outcomes {
			if it.Outcome == o {
				out = append(out, it.ID)
				break
			}
		}
	}
	return out
}

// Count returns the number of items with outcome o.
func (r *Report) Count(o Outcome) int {
	if r == nil {
		return 0
	}
	n := 0
	for i := range r.Items {
		if r.Items[i].Outcome == o {
			n++
		}
	}
	return n
}

// Converged reports whether every item is unchanged, changed or (in a dry
// run) would change: nothing failed, waits or was left out.
func (r *Report) Converged() bool {
	if r == nil {
		return false
	}
	for i := range r.Items {
		switch r.Items[i].Outcome {
		case OutcomeUnchanged, OutcomeChanged, OutcomeWouldChange:
		default:
			return false
		}
	}
	return true
}

// Changed reports whether the walk changed (or, dry, would change) anything.
func (r *Report) Changed() bool {
	return r.Count(OutcomeChanged)+r.Count(OutcomeWouldChange) > 0
}

// Actions returns every host action items asked for, in item order.
func (r *Report) Actions() []RequiredAction {
	if r == nil {
		return nil
	}
	var out []RequiredAction
	for _, it := range r.Items {
		out = append(out, it.Actions...)
	}
	return out
}

// Err aggregates the errors of the walk: one *ItemError per failed item,
// and, when items were not run, one error matching ErrNotRun (and the
// cancellation cause, such as context.Canceled). It is nil when nothing
// failed. The result works with errors.Is and errors.As.
func (r *Report) Err() error {
	if r == nil {
		return nil
	}
	var errs []error
	for i := range r.Items {
		if it := &r.Items[i]; it.Outcome == OutcomeFailed && it.Err != nil {
			errs = append(errs, it.Err)
		}
	}
	failed := len(errs)
	if r.notRun > 0 {
		errs = append(errs, &notRunError{n: r.notRun, cause: r.cause})
	}
	if len(errs) == 0 {
		return nil
	}
	return &multierror.Error{Errors: errs, ErrorFormat: reportFormat(r.Mode.String()+" failed", failed, r.notRun)}
}

// notRunError is the one error of a report for all its items not run.
type notRunError struct {
	n     int
	cause error
}

// Error reads "converge: 7 items not run: context canceled".
func (e *notRunError) Error() string {
	return fmt.Sprintf("converge: %s not run: %s", countItems(e.n), causeText(e.cause))
}

// Is makes the error match ErrNotRun.
func (e *notRunError) Is(target error) bool { return target == ErrNotRun }

// Unwrap returns the cause of the interruption.
func (e *notRunError) Unwrap() error { return e.cause }

// countItems reads "1 item" or "n items".
func countItems(n int) string {
	if n == 1 {
		return "1 item"
	}
	return fmt.Sprintf("%d items", n)
}

// reportFormat renders a report's errors under a headline that counts the
// items they are about, as listed: "converge: apply failed: 15 items:
// 8 failed, 7 not run:", then one line per failed item and one for the
// items not run.
func reportFormat(headline string, failed, notRun int) multierror.ErrorFormatFunc {
	return func(errs []error) string {
		if len(errs) == 1 {
			return errs[0].Error()
		}
		var b strings.Builder
		fmt.Fprintf(&b, "converge: %s: %s: %d failed", headline, countItems(failed+notRun), failed)
		if notRun > 0 {
			fmt.Fprintf(&b, ", %d not run", notRun)
		}
		b.WriteByte(':')
		for _, e := range errs {
			b.WriteString("\n\t* ")
			b.WriteString(causeText(e))
		}
		return b.String()
	}
}

// Summary renders the report for a person: a headline with the counts, then
// one line per item that changed, failed, waits or was not run. The line of
// a refreshed item names the dependencies it was refreshed for ("refreshed
// for", or "would refresh for" in a dry run).
func (r *Report) Summary() string {
	if r == nil {
		return "no report"
	}
	var b strings.Builder
	verb := r.Mode.String()
	if r.Dry {
		verb += " (dry run)"
	}
	if r.Interrupted != InterruptNone {
		verb += " (interrupted, " + r.Interrupted.String() + ")"
	}
	fmt.Fprintf(&b, "%s: %d items: ", verb, len(r.Items))
	first := true
	for o := OutcomeUnchanged; o <= OutcomeNotRun; o++ {
		if n := r.Count(o); n > 0 {
			if !first {
				b.WriteString(", ")
			}
			first = false
			fmt.Fprintf(&b, "%d %s", n, o)
		}
	}
	if first {
		b.WriteString("nothing to do")
	}
	b.WriteByte('\n')
	for _, it := range r.Items {
		switch it.Outcome {
		case OutcomeChanged, OutcomeWouldChange:
			switch {
			case len(it.Refresh) == 0:
				fmt.Fprintf(&b, "  %-12s %s (%s)\n", it.Outcome, it.ID, it.Presence)
			case r.Dry:
				fmt.Fprintf(&b, "  %-12s %s (%s; would refresh for %s)\n", it.Outcome, it.ID, it.Presence, joinIDs(it.Refresh))
			default:
				fmt.Fprintf(&b, "  %-12s %s (%s; refreshed for %s)\n", it.Outcome, it.ID, it.Presence, joinIDs(it.Refresh))
			}
		case OutcomeFailed:
			fmt.Fprintf(&b, "  %-12s %s (%s): %v\n", it.Outcome, it.ID, it.Phase, unwrapItemErr(it.Err))
		case OutcomeWaiting:
			fmt.Fprintf(&b, "  %-12s %s (waiting for %s)\n", it.Outcome, it.ID, joinIDs(it.WaitingFor))
		case OutcomeNotRun:
			fmt.Fprintf(&b, "  %-12s %s\n", it.Outcome, it.ID)
		}
	}
	for _, a := range r.Actions() {
		fmt.Fprintf(&b, "  %-12s %s: %s\n", a.Action, a.ID, a.Reason)
	}
	return b.String()
}

func unwrapItemErr(err error) error {
	if ie, ok := err.(*ItemError); ok {
		return ie.Err
	}
	return err
}

func joinIDs(ids []ID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = string(id)
	}
	return strings.Join(parts, ", ")
}
