package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
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
	stages   func(ctx context.Context) ([]converge.TargetStage, error)
	data     func() (json.RawMessage, error) // the current target as JSON, nil when none
	now      func() time.Time
	stop     func()

	mu      sync.Mutex
	snap    TargetView
	reports map[string]*converge.Report // newest changing walk per stage
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
		now:      opts.Now,
		reports:  map[string]*converge.Report{},
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
			t.reports[ev.Stage] = ev.Report
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
	}
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

// report returns the newest report of a walk of stage that changed
// something, or nil.
func (t *Target) report(stage string) *converge.Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reports[stage]
}
