package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/convergekit/converge"
)

// MaxFailures is how many of a target's newest failed passes, and of the
// host actions its items asked for, a Target keeps for the page.
const MaxFailures = 10

// Target is what the page shows of one converge.TargetReconciler: it
// subscribes to the reconciler's events (a TargetReconciler has no other
// read API) and keeps a snapshot of its passes, failures, update locks and
// required host actions. Create it with WatchTarget before the reconciler
// runs, so that it sees the first pass, and call Close when the page is
// gone. The zero value is not usable.
type Target struct {
	name     string
	revision func() uint64
	pending  func() []converge.PendingAction
	rollback func() (converge.TargetRollback, bool)
	stages   func(ctx context.Context) ([]converge.TargetStage, error)
	data     func() (json.RawMessage, error) // the current target as JSON, nil when none
	now      func() time.Time
	stop     func()

	mu      sync.Mutex
	snap    TargetView
	running passWalks  // the walks of the pass under way
	ended   *passWalks // the walks of the newest pass that ended, nil before
}

// passWalks is what the page saw of the walks of one pass.
type passWalks struct {
	pass   int
	result string                      // PassView.Result, once it ended
	walks  map[string]*converge.Report // newest walk per stage that changed something
	// The stage a failed pass stopped in, the walk that failed there, and
	// the items its error names.
	failStage string
	failWalk  converge.WalkID
	failed    map[converge.ID]bool
	notRun    bool // items of the failed walk were not run (interrupted)
	// timeline is every walk of the pass, in order (TargetEvent.Walks).
	timeline []converge.TargetWalk
}

// TargetOptions tunes WatchTarget. The zero value watches a reconciler
// named "target" without a graph, with time.Now.
type TargetOptions[T any] struct {
	// Name names the target on the page and in its URLs; "" means
	// converge.TargetDefaultName.
	Name string
	// Build, when set, is the reconciler's own build function
	// (converge.TargetReconcilerConfig.Build): the page calls it with the current
	// target to draw the target's graphs. Items must not touch the system
	// when they are built; Build is called only when a graph is asked for.
	Build converge.TargetBuildFunc[T]
	// Now returns the current time, which stamps the passes; nil means
	// time.Now.
	Now func() time.Time
}

// WatchTarget subscribes to r's events and returns the Target that keeps
// their snapshot for a Handler (see Options.Targets). The snapshot counts
// the passes from now on (TargetView.Since); the revision it shows is the
// reconciler's, read on every request.
func WatchTarget[T any](r *converge.TargetReconciler[T], opts TargetOptions[T]) *Target {
	t := &Target{
		name:     opts.Name,
		revision: r.Revision,
		pending:  r.PendingActions,
		rollback: r.RolledBack,
		now:      opts.Now,
	}
	if t.name == "" {
		t.name = converge.TargetDefaultName
	}
	if t.now == nil {
		t.now = time.Now
	}
	t.data = func() (json.RawMessage, error) {
		target, ok := r.Target()
		if !ok {
			return nil, nil
		}
		b, err := json.Marshal(target)
		if err != nil {
			return nil, fmt.Errorf("encode the target as JSON: %w", err)
		}
		return b, nil
	}
	if opts.Build != nil {
		build := opts.Build
		t.stages = func(ctx context.Context) ([]converge.TargetStage, error) {
			target, ok := r.Target()
			if !ok {
				return nil, nil
			}
			return build(ctx, target)
		}
	}
	t.snap.Name = t.name
	t.snap.Since = t.now()
	t.stop = r.Subscribe(t.observe)
	return t
}

// Name returns the target's name on the page.
func (t *Target) Name() string { return t.name }

// Close unsubscribes from the reconciler's events; the snapshot stays as
// it was.
func (t *Target) Close() { t.stop() }

// observe folds one event into the snapshot.
func (t *Target) observe(ev converge.TargetEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.snap
	s.DroppedEvents += ev.Dropped
	at := t.now()
	switch ev.Kind {
	case converge.TargetStateChanged:
		s.Changes++
		s.LastChange = &ChangeView{At: at, Pass: ev.Pass, Revision: ev.Revision, Stage: ev.Stage}
		if ev.Report != nil {
			s.LastChange.Summary = ev.Report.Summary()
			if t.running.pass != ev.Pass || t.running.walks == nil {
				t.running = passWalks{pass: ev.Pass, walks: map[string]*converge.Report{}}
			}
			t.running.walks[ev.Stage] = ev.Report
		}
	case converge.TargetActionRequired:
		s.Actions = append(s.Actions, ActionRequiredView{
			At: at, Pass: ev.Pass, Item: string(ev.Action.ID), Action: ev.Action.Action.String(), Reason: ev.Action.Reason,
		})
		if len(s.Actions) > MaxFailures {
			s.Actions = s.Actions[len(s.Actions)-MaxFailures:]
		}
	case converge.TargetPassFinished, converge.TargetPassFailed, converge.TargetPassPreempted:
		p := PassView{
			Pass:            ev.Pass,
			Revision:        ev.Revision,
			At:              at,
			Result:          passResult(ev.Kind),
			DurationSeconds: ev.Duration.Seconds(),
			Stage:           ev.Stage,
			Forced:          ev.Forced,
			Intermediate:    ev.Intermediate,
		}
		switch ev.Kind {
		case converge.TargetPassFinished:
			s.Finished++
			s.FailuresInARow = 0
			s.Locked = false
		case converge.TargetPassFailed:
			s.Failed++
			s.FailuresInARow++
			s.Locked = ev.Locked
			p.Locked = ev.Locked
			p.RetrySeconds = ev.Retry.Seconds()
			if ev.Err != nil {
				p.Error = ev.Err.Error()
			}
			p.Repeats, p.FirstAt = 1, at
			if prev := s.Failures; s.FailuresInARow > 1 && len(prev) > 0 && prev[0].Error == p.Error && prev[0].Locked == p.Locked {
				// The same failure again: one entry, counted.
				p.Repeats, p.FirstAt = prev[0].Repeats+1, prev[0].FirstAt
				s.Failures[0] = p
				break
			}
			s.Failures = append([]PassView{p}, s.Failures...)
			if len(s.Failures) > MaxFailures {
				s.Failures = s.Failures[:MaxFailures]
			}
		case converge.TargetPassPreempted:
			s.Preempted++
		}
		s.LastPass = &p
		t.passEnded(ev, p.Result)
	}
}

// passEnded keeps the walks of the pass ev ended as the newest pass's.
func (t *Target) passEnded(ev converge.TargetEvent, result string) {
	pw := t.running
	if pw.pass != ev.Pass || pw.walks == nil {
		pw = passWalks{pass: ev.Pass, walks: map[string]*converge.Report{}}
	}
	pw.result = result
	pw.timeline = ev.Walks
	var se *converge.TargetStageError
	if ev.Kind == converge.TargetPassFailed && errors.As(ev.Err, &se) {
		pw.failStage, pw.failWalk = se.Stage, se.Walk
		pw.failed = map[converge.ID]bool{}
		pw.notRun = errors.Is(se.Err, converge.ErrNotRun)
		for _, id := range failedItems(se.Err) {
			pw.failed[id] = true
		}
	}
	t.ended = &pw
	t.running = passWalks{}
}

// waterfall returns the time line of the newest pass that ended, nil
// before one ended or when it ran no walk.
func (t *Target) waterfall() *WaterfallView {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended == nil {
		return nil
	}
	return newWaterfall(t.ended.pass, t.ended.result, t.ended.timeline)
}

// failedItems returns the IDs of the *converge.ItemError in the tree of
// err.
func failedItems(err error) []converge.ID {
	var ie *converge.ItemError
	switch e := err.(type) {
	case nil:
		return nil
	case interface{ WrappedErrors() []error }: // go-multierror's
		var ids []converge.ID
		for _, w := range e.WrappedErrors() {
			ids = append(ids, failedItems(w)...)
		}
		return ids
	case interface{ Unwrap() []error }:
		var ids []converge.ID
		for _, w := range e.Unwrap() {
			ids = append(ids, failedItems(w)...)
		}
		return ids
	}
	if errors.As(err, &ie) {
		return []converge.ID{ie.ID}
	}
	return nil
}

// stageOutcomes is what the graph of one stage shows: the outcome of each
// item in the newest pass that ended (the pass under way before any
// ended), as a walk's report to draw when the page has the one that
// tells, or as outcomes it knows otherwise.
type stageOutcomes struct {
	pass     int
	report   *converge.Report
	outcomes map[converge.ID]string
}

// drawn is the report the stage's picture is drawn with: the walk's, or
// one made of the outcomes the page knows otherwise.
func (so stageOutcomes) drawn() *converge.Report {
	if so.report != nil || len(so.outcomes) == 0 {
		return so.report
	}
	rep := &converge.Report{Items: make([]converge.ItemResult, 0, len(so.outcomes))}
	for _, id := range slices.Sorted(maps.Keys(so.outcomes)) {
		var o converge.Outcome
		if o.UnmarshalText([]byte(so.outcomes[id])) == nil {
			rep.Items = append(rep.Items, converge.ItemResult{ID: id, Outcome: o})
		}
	}
	return rep
}

// outcomes returns the outcomes of each of stages in the newest pass that
// ended. A stage whose walks in that pass changed nothing was walked with
// every item unchanged when the pass finished, or when it failed in a
// later stage; in the stage a pass failed in, the items the error names
// failed and the items that wait for them waited (the others were
// unchanged, unless the walk was interrupted); stages after it were not
// walked.
func (t *Target) outcomes(stages []converge.TargetStage) []stageOutcomes {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]stageOutcomes, len(stages))
	pw := t.ended
	if pw == nil {
		for i, st := range stages {
			out[i] = stageOutcomes{pass: t.running.pass, report: t.running.walks[st.Name]}
		}
		return out
	}
	failAt := len(stages) // the index of the stage a failed pass stopped in
	if pw.result == PassFailed {
		failAt = slices.IndexFunc(stages, func(st converge.TargetStage) bool { return st.Name == pw.failStage })
		if failAt < 0 {
			failAt = -1 // failed before any stage (the build)
		}
	}
	for i, st := range stages {
		so := stageOutcomes{pass: pw.pass, report: pw.walks[st.Name]}
		switch {
		case pw.result == PassPreempted, i > failAt:
			// Not walked, or stopped somewhere: only a walk tells.
		case i == failAt && (so.report == nil || so.report.Walk != pw.failWalk):
			// The walk that failed changed nothing.
			so.report, so.outcomes = nil, failedOutcomes(st.Graph, pw.failed, pw.notRun)
		case so.report == nil:
			so.outcomes = allOutcomes(st.Graph, converge.OutcomeUnchanged.String())
		}
		out[i] = so
	}
	return out
}

// allOutcomes gives every item of g the outcome o.
func allOutcomes(g *converge.Graph, o string) map[converge.ID]string {
	out := map[converge.ID]string{}
	if g == nil {
		return out
	}
	ids, _ := g.Order()
	for _, id := range ids {
		out[id] = o
	}
	return out
}

// failedOutcomes are the outcomes of a walk of g that changed nothing and
// in which the items failed failed: they failed, the items that depend
// on them or are ordered after them (transitively) waited, and the
// others were unchanged, unless items were not run (notRun): their
// outcome is then unknown.
func failedOutcomes(g *converge.Graph, failed map[converge.ID]bool, notRun bool) map[converge.ID]string {
	out := map[converge.ID]string{}
	if g == nil {
		return out
	}
	ids, err := g.Order()
	if err != nil {
		return out
	}
	held := map[converge.ID]bool{}
	for _, id := range ids { // in order: what an item waits for comes first
		switch {
		case failed[id]:
			out[id], held[id] = converge.OutcomeFailed.String(), true
		case slices.ContainsFunc(append(g.Dependencies(id), g.Afters(id)...), func(d converge.ID) bool { return held[d] }):
			out[id], held[id] = converge.OutcomeWaiting.String(), true
		case !notRun:
			out[id] = converge.OutcomeUnchanged.String()
		}
	}
	return out
}

// passResult names the end of a pass as PassView.Result does.
func passResult(k converge.TargetEventKind) string {
	switch k {
	case converge.TargetPassFinished:
		return PassFinished
	case converge.TargetPassFailed:
		return PassFailed
	default:
		return PassPreempted
	}
}

// view returns a copy of the snapshot with the current revision.
func (t *Target) view() TargetView {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.snap
	v.Revision = t.revision()
	v.PendingActions = []PendingActionView{}
	for _, p := range t.pending() {
		v.PendingActions = append(v.PendingActions, PendingActionView{
			Action: p.Action.String(), Item: string(p.ID), Reason: p.Reason, Revision: p.Revision, Since: p.Since,
		})
	}
	if rb, ok := t.rollback(); ok {
		v.RolledBack = &RollbackView{From: rb.From, To: rb.To, Revision: rb.Revision, Failures: rb.Failures, At: rb.At, Error: rb.Err}
	}
	v.Graph = t.stages != nil
	v.Failures = append([]PassView(nil), v.Failures...)
	v.Actions = append([]ActionRequiredView(nil), v.Actions...)
	if v.LastPass != nil {
		p := *v.LastPass
		v.LastPass = &p
	}
	if v.LastChange != nil {
		c := *v.LastChange
		v.LastChange = &c
	}
	return v
}
