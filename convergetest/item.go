package convergetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/convergekit/converge"
)

// ErrInjected is the error a fake returns for an injected failure when no
// other error was given.
var ErrInjected = errors.New("convergetest: injected failure")

// Item is a scriptable fake converge.Item[string]. Its "real system" is the
// Value field: the empty string means absent, which is also its clean state.
//
// The zero value is an item with an empty ID (which a graph rejects); set at
// least Key. All fields may be changed between walks while no walk runs;
// use the methods while a walk runs. Limits: the fake has one value, not a
// structured state; latency is simulated with a timer that honours ctx.
type Item struct {
	// Key is the item's ID.
	Key converge.ID
	// Value is the current real value; "" means absent.
	Value string
	// Goal is the desired value, unless GoalFunc is set.
	Goal string
	// GoalFunc, when set, computes the goal from the dependencies' states.
	GoalFunc func(deps converge.DepStates) (string, error)
	// Latency is how long Apply takes (waiting on a timer that honours ctx).
	Latency time.Duration
	// Units is the work estimate Check reports; Apply reports progress unit
	// by unit. 0 means WorkUnitsUnknown and no progress reports.
	Units int
	// Stuck makes Apply report success without changing Value, so that
	// verification fails with ErrNotConverged.
	Stuck bool
	// Recorder, when set, records the start and end of every Apply.
	Recorder *Recorder
	// Refuse, when set, is asked before every Apply with its target: an
	// error fails the Apply with it, changing nothing (a release that
	// never starts, whatever the retries).
	Refuse func(target string) error

	mu       sync.Mutex
	failures map[converge.Phase]*failure
	panics   map[converge.Phase]any
	calls    map[string]int
	applied  bool // the next StateCurrent verifies an Apply
}

type failure struct {
	remaining int // < 0: always
	err       error
}

var _ converge.Item[string] = (*Item)(nil)
var _ converge.Cleaner[string] = (*Item)(nil)

// Node returns the item wrapped for a graph.
func (f *Item) Node() converge.Node { return converge.Wrap[string](f) }

// FailAt makes the given phase fail the next times calls (times < 0: every
// call) with err (ErrInjected when err is nil). PhaseDiscover and
// PhaseVerify both refer to StateCurrent calls; PhaseVerify fails only the
// StateCurrent that follows an Apply. PhaseRefresh refers to the Refresh
// calls of a RefreshItem.
func (f *Item) FailAt(p converge.Phase, times int, err error) *Item {
	if err == nil {
		err = ErrInjected
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failures == nil {
		f.failures = map[converge.Phase]*failure{}
	}
	f.failures[p] = &failure{remaining: times, err: err}
	return f
}

// PanicAt makes every call of the given phase panic with v.
func (f *Item) PanicAt(p converge.Phase, v any) *Item {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.panics == nil {
		f.panics = map[converge.Phase]any{}
	}
	f.panics[p] = v
	return f
}

// Calls returns how many times method was called ("StateCurrent",
// "StateGoal", "StateClean", "Check", "Apply", "ApplyDry", and "Refresh"
// for a RefreshItem).
func (f *Item) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// Current returns the real value, safe to call while a walk runs.
func (f *Item) Current() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Value
}

// SetCurrent changes the real value behind the walk's back (drift).
func (f *Item) SetCurrent(v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Value = v
}

// enter counts the call and applies injected panics and failures.
func (f *Item) enter(method string, p converge.Phase) error {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[method]++
	v, panics := f.panics[p]
	var err error
	if fl := f.failures[p]; fl != nil && fl.remaining != 0 {
		if fl.remaining > 0 {
			fl.remaining--
		}
		err = fl.err
	}
	f.mu.Unlock()
	if panics {
		panic(v)
	}
	return err
}

// ID implements converge.Item.
func (f *Item) ID() converge.ID { return f.Key }

// StateCurrent implements converge.Item: the real value.
func (f *Item) StateCurrent(ctx context.Context, deps converge.DepStates) (string, error) {
	phase := converge.PhaseDiscover
	f.mu.Lock()
	if f.applied {
		phase, f.applied = converge.PhaseVerify, false
	}
	f.mu.Unlock()
	if err := f.enter("StateCurrent", phase); err != nil {
		return "", err
	}
	return f.Current(), nil
}

// StateGoal implements converge.Item: Goal, or GoalFunc(deps).
func (f *Item) StateGoal(ctx context.Context, deps converge.DepStates) (string, error) {
	if err := f.enter("StateGoal", converge.PhaseGoal); err != nil {
		return "", err
	}
	if f.GoalFunc != nil {
		return f.GoalFunc(deps)
	}
	return f.Goal, nil
}

// StateClean implements converge.Cleaner: the empty value.
func (f *Item) StateClean(ctx context.Context, deps converge.DepStates) (string, error) {
	if err := f.enter("StateClean", converge.PhaseGoal); err != nil {
		return "", err
	}
	return "", nil
}

// Check implements converge.Item: required when the values differ.
func (f *Item) Check(ctx context.Context, current, target string) (converge.Decision, error) {
	if err := f.enter("Check", converge.PhaseCheck); err != nil {
		return converge.Decision{}, err
	}
	if current == target {
		return converge.NotRequired(), nil
	}
	if f.Units > 0 {
		return converge.Required(f.Units), nil
	}
	return converge.Required(converge.WorkUnitsUnknown), nil
}

// Apply implements converge.Item: waits Latency, reports Units of progress
// and sets the real value to target (unless Stuck).
func (f *Item) Apply(ctx context.Context, current, target string) (string, error) {
	if err := f.enter("Apply", converge.PhaseApply); err != nil {
		return current, err
	}
	if f.Refuse != nil {
		if err := f.Refuse(target); err != nil {
			return current, err
		}
	}
	f.Recorder.record(f.Key, "apply-start")
	defer f.Recorder.record(f.Key, "apply-end")
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return current, ctx.Err()
		}
	}
	for u := 1; u <= f.Units; u++ {
		converge.ReportProgress(ctx, u, f.Units)
	}
	f.mu.Lock()
	f.applied = true
	if !f.Stuck {
		f.Value = target
	}
	f.mu.Unlock()
	if f.Stuck {
		return current, nil
	}
	return target, nil
}

// ApplyDry implements converge.Item: returns target and changes nothing.
func (f *Item) ApplyDry(ctx context.Context, current, target string) (string, error) {
	if err := f.enter("ApplyDry", converge.PhaseApply); err != nil {
		return current, err
	}
	if f.Stuck {
		return current, nil
	}
	return target, nil
}

// Recorder records Apply starts and ends of fake items, and the refreshes
// of RefreshItems, in order, so tests can check what ran before what. The zero value is ready; a nil *Recorder
// records nothing.
type Recorder struct {
	mu      sync.Mutex
	entries []Record
}

// Record is one recorded step.
type Record struct {
	ID   converge.ID
	What string
}

func (r *Recorder) record(id converge.ID, what string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.entries = append(r.entries, Record{ID: id, What: what})
	r.mu.Unlock()
}

// Records returns a copy of what was recorded.
func (r *Recorder) Records() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.entries...)
}

// Index returns the position of the first record of id and what, or -1.
func (r *Recorder) Index(id converge.ID, what string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, e := range r.entries {
		if e.ID == id && e.What == what {
			return i
		}
	}
	return -1
}

// String lists the records, one per line.
func (r Record) String() string { return fmt.Sprintf("%s %s", r.ID, r.What) }

// RefreshItem is an Item that is also a converge.Refresher[string]: a
// fake service that restarts when its dependencies (configuration files)
// changed. Refresh counts the call (Calls("Refresh"), Refreshes), records
// the dependencies it was given (RefreshedFor) and a "refresh" step in the
// Recorder, fails as FailAt(converge.PhaseRefresh, ...) and
// PanicAt(converge.PhaseRefresh, ...) say, and keeps the value: a restart
// leaves a converged service converged.
//
// Use its Node method (not Item.Node) to add it to a graph: Item.Node
// wraps the embedded Item alone, which is not a Refresher. The zero value
// is a RefreshItem with an empty ID; set at least Key. Limits: a restart is
// only counted; nothing is stopped or started.
type RefreshItem struct {
	Item

	refreshMu sync.Mutex
	refreshed [][]converge.ID
}

var _ converge.Refresher[string] = (*RefreshItem)(nil)

// Node returns the item wrapped for a graph, with its ability to refresh.
func (f *RefreshItem) Node() converge.Node { return converge.Wrap[string](f) }

// Refresh implements converge.Refresher: it records the call and returns
// current unchanged.
func (f *RefreshItem) Refresh(ctx context.Context, current string, changed []converge.ID) (string, error) {
	if err := f.enter("Refresh", converge.PhaseRefresh); err != nil {
		return current, err
	}
	f.Recorder.record(f.Key, "refresh")
	f.refreshMu.Lock()
	f.refreshed = append(f.refreshed, append([]converge.ID(nil), changed...))
	f.refreshMu.Unlock()
	return current, nil
}

// Refreshes returns how many times Refresh succeeded.
func (f *RefreshItem) Refreshes() int {
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	return len(f.refreshed)
}

// RefreshedFor returns, for every Refresh that succeeded, in order, the
// dependencies it was given.
func (f *RefreshItem) RefreshedFor() [][]converge.ID {
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	out := make([][]converge.ID, len(f.refreshed))
	for i, c := range f.refreshed {
		out[i] = append([]converge.ID(nil), c...)
	}
	return out
}
