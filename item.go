package converge

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
)

// ID is the stable identifier of an item in a graph. IDs are compared as
// plain strings; by convention adapters prefix them with their kind, for
// example "file:/etc/hostname" or "container:web".
type ID string

// Presence says what a walk converges an item to: its goal (Present) or its
// clean state (Absent). The zero value is Present.
type Presence uint8

const (
	// Present converges the item to the state its StateGoal computes.
	Present Presence = iota
	// Absent converges the item to the state its StateClean computes; the
	// item must implement Cleaner.
	Absent
)

// String returns "present" or "absent".
func (p Presence) String() string { return enumString("presence", presenceNames[:], uint8(p)) }

// Change is the verdict of Check: whether the item must be changed.
type Change uint8

const (
	// ChangeNotRequired means current already satisfies target.
	ChangeNotRequired Change = iota
	// ChangeRequired means Apply must run to reach target.
	ChangeRequired
)

// String returns "not-required" or "required" (exec(n) for an undeclared
// value).
func (e Change) String() string { return enumString("exec", execNames[:], uint8(e)) }

// WorkUnitsUnknown is the WorkUnits of a Decision whose amount of work cannot be
// estimated.
const WorkUnitsUnknown = -1

// Decision is what Check answers: whether work is required and, when it is,
// an estimate of the units of work (servers to launch, bytes to write) or
// WorkUnitsUnknown. The zero value means "nothing to do".
type Decision struct {
	Change    Change
	WorkUnits int
}

// NotRequired returns the Decision that says current already satisfies target.
func NotRequired() Decision { return Decision{Change: ChangeNotRequired} }

// Required returns the Decision that says Apply must run, with an estimate of
// the work in units (WorkUnitsUnknown if it cannot be estimated).
func Required(units int) Decision {
	if units < 0 {
		units = WorkUnitsUnknown
	}
	return Decision{Change: ChangeRequired, WorkUnits: units}
}

// Required reports whether the decision asks for Apply.
func (d Decision) Required() bool { return d.Change == ChangeRequired }

// Item is one piece of managed state with a stable ID, typed by its state S.
//
// A walk calls the methods in this order for an item: StateCurrent, then
// StateGoal (or StateClean for an Absent item), then Check; when Check says
// ChangeRequired it calls Apply (or ApplyDry in a dry run), and then
// StateCurrent and Check once more to verify that the item converged.
// Methods of one item are never called concurrently by a single walk; items
// that share a resource (one file, one engine) must synchronise themselves
// because independent items run in parallel.
type Item[S any] interface {
	// ID returns the item's stable identifier. It must not change.
	ID() ID
	// StateCurrent reads the real system and must not write. When the state
	// cannot be known yet (for example a predecessor has not been applied)
	// it returns an error wrapping ErrStateUnknown: the walk then treats the
	// item as requiring Apply, which receives the zero S as current.
	StateCurrent(ctx context.Context, deps DepStates) (S, error)
	// StateGoal computes the desired state. It may read the states of the
	// items the item depends on through deps.
	StateGoal(ctx context.Context, deps DepStates) (S, error)
	// Check compares current with target and decides whether Apply must
	// run. It is the only judge of "converged": verification reuses it.
	Check(ctx context.Context, current, target S) (Decision, error)
	// Apply changes the real system from current towards target and returns
	// the state it reached. It must be idempotent and converge from any
	// partial state. It may report progress with ReportProgress.
	Apply(ctx context.Context, current, target S) (S, error)
	// ApplyDry returns the state Apply would reach without writing anything.
	ApplyDry(ctx context.Context, current, target S) (S, error)
}

// Cleaner is the optional ability of an Item to say what its state is once
// it has been removed. Only items that implement it can be marked Absent or
// cleaned.
type Cleaner[S any] interface {
	StateClean(ctx context.Context, deps DepStates) (S, error)
}

// Node is an Item with its state type erased, as the graph stores it. Use
// Wrap to turn a typed Item into a Node. Implementing Node directly is
// possible for items whose state is naturally untyped; the same contract as
// Item applies, with states passed as any.
type Node interface {
	ID() ID
	StateCurrent(ctx context.Context, deps DepStates) (any, error)
	StateGoal(ctx context.Context, deps DepStates) (any, error)
	Check(ctx context.Context, current, target any) (Decision, error)
	Apply(ctx context.Context, current, target any) (any, error)
	ApplyDry(ctx context.Context, current, target any) (any, error)
}

// CleanNode is the optional ability of a Node to compute its clean state,
// the untyped counterpart of Cleaner.
type CleanNode interface {
	StateClean(ctx context.Context, deps DepStates) (any, error)
}

// Wrap adapts a typed Item to a Node. If item also implements Cleaner[S],
// the returned Node implements CleanNode; if it implements Refresher[S],
// the returned Node implements RefreshNode. Wrap(nil) returns nil so that
// a graph reports the nil item instead of panicking here.
func Wrap[S any](item Item[S]) Node {
	if item == nil {
		return nil
	}
	c, clean := item.(Cleaner[S])
	r, refresh := item.(Refresher[S])
	switch {
	case clean && refresh:
		return &cleanRefreshNode[S]{cleanNode: cleanNode[S]{node: node[S]{item: item}, clean: c}, refresh: r}
	case clean:
		return &cleanNode[S]{node: node[S]{item: item}, clean: c}
	case refresh:
		return &refreshNode[S]{node: node[S]{item: item}, refresh: r}
	}
	return &node[S]{item: item}
}

// Unwrap returns the typed Item inside a Node made by Wrap, or nil and false
// when n was not made by Wrap or holds an item of another state type.
func Unwrap[S any](n Node) (Item[S], bool) {
	switch w := n.(type) {
	case *node[S]:
		return w.item, true
	case *cleanNode[S]:
		return w.item, true
	case *refreshNode[S]:
		return w.item, true
	case *cleanRefreshNode[S]:
		return w.item, true
	}
	return nil, false
}

type node[S any] struct{ item Item[S] }

func (n *node[S]) ID() ID { return n.item.ID() }

func (n *node[S]) StateCurrent(ctx context.Context, deps DepStates) (any, error) {
	return n.item.StateCurrent(ctx, deps)
}

func (n *node[S]) StateGoal(ctx context.Context, deps DepStates) (any, error) {
	return n.item.StateGoal(ctx, deps)
}

func (n *node[S]) Check(ctx context.Context, current, target any) (Decision, error) {
	c, err := n.cast(current)
	if err != nil {
		return Decision{}, err
	}
	t, err := n.cast(target)
	if err != nil {
		return Decision{}, err
	}
	return n.item.Check(ctx, c, t)
}

func (n *node[S]) Apply(ctx context.Context, current, target any) (any, error) {
	c, err := n.cast(current)
	if err != nil {
		return nil, err
	}
	t, err := n.cast(target)
	if err != nil {
		return nil, err
	}
	return n.item.Apply(ctx, c, t)
}

func (n *node[S]) ApplyDry(ctx context.Context, current, target any) (any, error) {
	c, err := n.cast(current)
	if err != nil {
		return nil, err
	}
	t, err := n.cast(target)
	if err != nil {
		return nil, err
	}
	return n.item.ApplyDry(ctx, c, t)
}

type cleanNode[S any] struct {
	node[S]
	clean Cleaner[S]
}

func (n *cleanNode[S]) StateClean(ctx context.Context, deps DepStates) (any, error) {
	return n.clean.StateClean(ctx, deps)
}

type refreshNode[S any] struct {
	node[S]
	refresh Refresher[S]
}

func (n *refreshNode[S]) Refresh(ctx context.Context, current any, changed []ID) (any, error) {
	return n.node.refreshWith(ctx, n.refresh, current, changed)
}

type cleanRefreshNode[S any] struct {
	cleanNode[S]
	refresh Refresher[S]
}

func (n *cleanRefreshNode[S]) Refresh(ctx context.Context, current any, changed []ID) (any, error) {
	return n.node.refreshWith(ctx, n.refresh, current, changed)
}

func (n *node[S]) refreshWith(ctx context.Context, r Refresher[S], current any, changed []ID) (any, error) {
	c, err := n.cast(current)
	if err != nil {
		return nil, err
	}
	return r.Refresh(ctx, c, changed)
}

// cast converts an untyped state back to S. A nil state (an unknown current
// state) becomes the zero S. It asks the item for its ID only to name it in
// the error: a walk checks every item, and the ID call costs as much as the
// conversion.
func (n *node[S]) cast(v any) (S, error) {
	var zero S
	if v == nil {
		return zero, nil
	}
	s, ok := v.(S)
	if !ok {
		return zero, &StateTypeError{ID: n.item.ID(), Want: fmt.Sprintf("%T", zero), Got: fmt.Sprintf("%T", v)}
	}
	return s, nil
}

// StateTypeError reports that a state of the wrong type reached an item, for
// example a dependency state read with the wrong type through DepState.
type StateTypeError struct {
	ID   ID
	Want string
	Got  string
}

// Error describes the problem, naming its culprit.
func (e *StateTypeError) Error() string {
	return fmt.Sprintf("converge: item %q: %s", e.ID, e.detail())
}

func (e *StateTypeError) detail() string {
	return fmt.Sprintf("state has type %s, want %s", e.Got, e.Want)
}

// Is makes StateTypeError match ErrStateType.
func (e *StateTypeError) Is(target error) bool { return target == ErrStateType }

// DepStates gives an item read access to the states its dependencies reached in
// the current walk (after Apply, or the simulated state in a dry run).
type DepStates interface {
	// State returns the state that dependency id reached in this walk, and
	// false when id is not a dependency of the item or has no state yet.
	State(id ID) (any, bool)
}

// DepState returns the state of dependency id as S. It fails with an error
// wrapping ErrUnknownDependency when id is not a finished dependency, and
// with a *StateTypeError when the state is not an S.
func DepState[S any](deps DepStates, id ID) (S, error) {
	var zero S
	if deps == nil {
		return zero, fmt.Errorf("converge: dependency %q: %w", id, bare(ErrUnknownDependency))
	}
	v, ok := deps.State(id)
	if !ok {
		return zero, fmt.Errorf("converge: dependency %q: %w", id, bare(ErrUnknownDependency))
	}
	s, ok := v.(S)
	if !ok {
		return zero, &StateTypeError{ID: id, Want: fmt.Sprintf("%T", zero), Got: fmt.Sprintf("%T", v)}
	}
	return s, nil
}

// Phase names the step of a walk an error came from.
type Phase uint8

const (
	// PhaseNone is the phase of a result without an error.
	PhaseNone Phase = iota
	// PhaseDiscover is StateCurrent before the change.
	PhaseDiscover
	// PhaseGoal is StateGoal or StateClean.
	PhaseGoal
	// PhaseCheck is Check before the change.
	PhaseCheck
	// PhaseApply is Apply or ApplyDry.
	PhaseApply
	// PhaseVerify is the second StateCurrent and Check after Apply; an item
	// that still requires work fails here with ErrNotConverged.
	PhaseVerify
	// PhaseRefresh is Refresh (see Refresher), after the item converged,
	// or the refresh log's work for it (reading what is pending, marking
	// its refresh done). An item that fails here stays due a refresh.
	PhaseRefresh
)

var phaseNames = [...]string{"none", "discover", "goal", "check", "apply", "verify", "refresh"}

// String returns the lower-case name of the phase.
func (p Phase) String() string { return enumString("phase", phaseNames[:], uint8(p)) }

// ItemError is the error of one item in a walk: which item, in which phase,
// in which walk. It wraps the item's own error, so errors.Is and errors.As
// see through it.
type ItemError struct {
	ID    ID
	Phase Phase
	Err   error
	// Walk is the walk the item failed in (Report.Walk). The message does
	// not repeat it; log it as a field of its own.
	Walk WalkID
}

// Error describes the problem, naming its culprit.
func (e *ItemError) Error() string {
	cause := causeText(e.Err)
	if ste, ok := e.Err.(*StateTypeError); ok && ste.ID == e.ID {
		cause = ste.detail() // the item is named already
	}
	return fmt.Sprintf("converge: item %q: %s: %s", e.ID, e.Phase, cause)
}

// Unwrap returns the item's own error.
func (e *ItemError) Unwrap() error { return e.Err }

// PanicError is the error of an item method that panicked. It matches
// ErrPanic and carries the panic value and the goroutine's stack.
type PanicError struct {
	Value any
	Stack []byte
}

// Error describes the problem, naming its culprit.
func (e *PanicError) Error() string { return fmt.Sprintf("converge: panic: %v", e.Value) }

// Is makes PanicError match ErrPanic.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

func newPanicError(v any) *PanicError { return &PanicError{Value: v, Stack: debug.Stack()} }

// Action is something an item needs done to the host after it changed it,
// which the item cannot do itself (see RequireAction).
type Action uint8

const (
	// ActionReboot asks for a reboot, for example after boot configuration changed.
	ActionReboot Action = iota + 1
	// ActionShutdown asks for a shutdown.
	ActionShutdown
)

// String returns "reboot" or "shutdown".
func (a Action) String() string { return enumString("action", actionNames[:], uint8(a)) }

// LogValue renders a by its name (String), so a log line reads "reboot"
// whatever the handler, the zero value included.
func (a Action) LogValue() slog.Value { return slog.StringValue(a.String()) }

type ctxKey int

const (
	keyItemRun ctxKey = iota
	keyForce
	keyHardStop
	keyWalk
)

// itemRun is what the walk hands an item through its context: a sink for
// progress and required host actions.
type itemRun struct {
	id      ID
	mu      sync.Mutex
	actions []RequiredAction
	units   func(done, total int)
}

func (r *itemRun) takeActions() []RequiredAction {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.actions
}

// RequiredAction is a host action an item asked for (see RequireAction),
// with the item that asked and its reason.
type RequiredAction struct {
	ID     ID
	Action Action
	Reason string
}

// String renders the action for people: `reboot for "config:arm_freq":
// boot configuration changed`.
func (a RequiredAction) String() string {
	s := fmt.Sprintf("%s for %q", a.Action, a.ID)
	if a.Reason != "" {
		s += ": " + a.Reason
	}
	return s
}

// LogValue renders the action as a group: action, item and reason.
func (a RequiredAction) LogValue() slog.Value {
	return slog.GroupValue(slog.String("action", a.Action.String()), slog.String("item", string(a.ID)),
		slog.String("reason", a.Reason))
}

// ReportProgress reports the progress of Apply: done units of total (total may
// be WorkUnitsUnknown). Outside a walk it does nothing. It never blocks.
func ReportProgress(ctx context.Context, done, total int) {
	if r, ok := ctx.Value(keyItemRun).(*itemRun); ok && r.units != nil {
		r.units(done, total)
	}
}

// RequireAction records, from inside Apply, that the host needs an action
// (a reboot after boot configuration changed) for the change to take effect.
// The walk puts it in the item's result; reconcile loops tell subscribers.
// Called from ApplyDry, it says what the change would require, and the dry
// run's report lists it. Outside a walk it does nothing.
func RequireAction(ctx context.Context, a Action, reason string) {
	if r, ok := ctx.Value(keyItemRun).(*itemRun); ok {
		r.mu.Lock()
		r.actions = append(r.actions, RequiredAction{ID: r.id, Action: a, Reason: reason})
		r.mu.Unlock()
	}
}

// WithForce returns a context that tells items the change is forced past
// update locks: an item that honours locks proceeds instead of returning
// ErrLocked. Pass it to a one-shot walk (Apply, Clean and their dry runs)
// to force every item of the walk; a TargetReconciler forces a pass with
// TriggerForced instead.
func WithForce(ctx context.Context) context.Context {
	return context.WithValue(ctx, keyForce, true)
}

// Forced reports whether the change is forced past update locks: whether
// ctx was made by WithForce, or is the context of an item in a
// TargetReconciler pass raised by TriggerForced. Items that honour update
// locks call it in Apply with the context they were given.
func Forced(ctx context.Context) bool {
	v, _ := ctx.Value(keyForce).(bool)
	return v
}
