package converge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// TargetStage is one ordered step of a target: a graph whose walk must
// converge before the next stage starts (host configuration before
// applications, for example).
type TargetStage struct {
	// Name identifies the stage in events and errors.
	Name string
	// Graph holds the stage's items.
	Graph *Graph
	// Clean, when true, walks the graph with Clean instead of Apply
	// (every item converges to its clean state), as an intermediate target
	// that stops everything does.
	Clean bool
}

// TargetBuildFunc turns a target into the stages to walk, in order. It is
// called at the start of every pass; the items it builds read the real
// system, so a pass never works from a stale copy of the state. A docker
// Compose project, a list of host configuration items, or anything that
// yields graphs can be a target this way.
type TargetBuildFunc[T any] func(ctx context.Context, target T) ([]TargetStage, error)

// TargetStageError is the error of a pass that failed in one stage: the
// stages after it did not run. It wraps the stage's error (the walk's
// aggregated item errors, a build error, or ErrTargetNotSettled when its
// walks kept changing things for MaxRounds walks).
type TargetStageError struct {
	// Stage is the stage's name, or "build" when Build failed.
	Stage string
	// Round is the walk of the stage that failed, from 1; 0 for a build
	// error.
	Round int
	Err   error
}

// Error describes the problem, naming its culprit.
func (e *TargetStageError) Error() string {
	if e.Round == 0 {
		return fmt.Sprintf("converge: stage %q: %s", e.Stage, causeText(e.Err))
	}
	return fmt.Sprintf("converge: stage %q (walk %d): %s", e.Stage, e.Round, causeText(e.Err))
}

// Unwrap returns the stage's error.
func (e *TargetStageError) Unwrap() error { return e.Err }

// TargetConfig configures a TargetReconciler. Build is required; every
// other zero field takes its default.
type TargetConfig[T any] struct {
	// Name is the key of the last target in the Store; empty means
	// TargetDefaultName.
	Name string
	// Build turns the target into stages at the start of each pass.
	Build TargetBuildFunc[T]
	// Store keeps the last target so a restarted process resumes it; nil
	// means a new MemStore (nothing survives the process). A device agent
	// that must come back with its last target after a restart or a power
	// cut passes a durable store: boltstore.Open(path, ...) is the one for
	// one process (every PutTarget is on disk before SetTarget returns).
	// Give the store a Sealer when the target holds secrets (environment
	// variables, credentials): the target is then sealed at rest.
	Store Store
	// Walk configures the walks.
	Walk Config
	// MaxRounds bounds the walks of one stage in one pass (apply, re-read,
	// apply again until nothing changes); 0 means TargetDefaultMaxRounds.
	MaxRounds int
	// Backoff delays the pass after a failed one; the zero value means
	// DefaultBackoff. A new target resets it.
	Backoff Backoff
	// Interval, when positive, runs a pass that long after the last one
	// succeeded, to repair drift; 0 means passes run only when asked.
	Interval time.Duration
}

// Validate reports the first field out of range as a *ConfigError.
func (c TargetConfig[T]) Validate() error {
	switch {
	case c.Build == nil:
		return &ConfigError{Field: "Build", Reason: "must not be nil"}
	case c.MaxRounds < 0:
		return &ConfigError{Field: "MaxRounds", Reason: fmt.Sprintf("must not be negative, got %d", c.MaxRounds)}
	case c.Interval < 0:
		return &ConfigError{Field: "Interval", Reason: fmt.Sprintf("must not be negative, got %s", c.Interval)}
	}
	if err := c.Walk.Validate(); err != nil {
		return err
	}
	return c.Backoff.Validate()
}

// TargetEventKind says what a TargetEvent reports.
type TargetEventKind uint8

const (
	// TargetStateChanged means a walk of the pass changed the real system;
	// Event.Report is that walk's report.
	TargetStateChanged TargetEventKind = iota + 1
	// TargetPassFinished means a pass converged every stage.
	TargetPassFinished
	// TargetPassFailed means a pass failed; Event.Err says why and
	// Event.Retry when the next attempt runs (0 when at once).
	TargetPassFailed
	// TargetActionRequired means an item asked for a reboot or shutdown;
	// Event.Action says which.
	TargetActionRequired
)

var targetEventNames = [...]string{"", "state-changed", "pass-finished", "pass-failed", "action-required"}

// String returns the lower-case name of the kind.
func (k TargetEventKind) String() string {
	return enumString("target-event", targetEventNames[:], uint8(k))
}

// TargetEvent is what subscribers of a TargetReconciler receive.
type TargetEvent struct {
	Kind TargetEventKind
	// Pass numbers the passes of the reconciler from 1.
	Pass int
	// Intermediate is true for a pass of an intermediate target.
	Intermediate bool
	// Forced is true when the pass ran (or was raised to run) past update
	// locks.
	Forced bool
	// Stage is the stage the event comes from (empty for pass events that
	// concern the whole pass).
	Stage string
	// Report is the walk that changed something (TargetStateChanged).
	Report *Report
	// Err is why the pass failed (TargetPassFailed).
	Err error
	// Locked is true when the pass failed because an update lock is held
	// (Err matches ErrLocked).
	Locked bool
	// Retry is the delay before the next attempt (TargetPassFailed).
	Retry time.Duration
	// Action is the host action an item asked for (TargetActionRequired).
	Action RequiredAction
	// Duration is how long the pass took (pass events).
	Duration time.Duration
}

// TargetReconciler keeps one device converged to a target (see DESIGN §3):
// each pass builds the target's stages and walks them in order; a stage is
// walked again until a walk changes nothing, then the next stage starts.
// Triggers coalesce into at most one pending pass; a forced trigger raises
// the flag of the running pass (items see it through Forced) and of the
// pending one; failed passes back off; intermediate targets preempt the
// regular loop and hand back to it; the last target is kept in the Store.
//
// Create it with NewTargetReconciler (the zero value is not usable), set a
// target and call Run once. Its methods are safe for concurrent use.
type TargetReconciler[T any] struct {
	cfg    TargetConfig[T]
	walker *Walker
	name   string

	mu           sync.Mutex
	target       T
	hasTarget    bool
	pending      bool
	pendingForce bool
	notBefore    time.Time // backoff: regular passes wait until then
	failures     int
	inter        []*targetIntermediate[T]
	running      *targetRun
	passes       int
	started      bool
	stopped      bool
	subs         map[int]func(TargetEvent)
	nextSub      int

	wake chan struct{}
}

type targetIntermediate[T any] struct {
	target T
	done   chan error
}

// targetRun is the pass being walked.
type targetRun struct {
	force     atomic.Bool
	preempted atomic.Bool
	cancel    context.CancelFunc
}

// NewTargetReconciler validates cfg and returns a reconciler that is not
// running yet.
func NewTargetReconciler[T any](cfg TargetConfig[T]) (*TargetReconciler[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w, err := NewWalker(cfg.Walk)
	if err != nil {
		return nil, err
	}
	if cfg.Store == nil {
		cfg.Store = NewMemStore()
	}
	if cfg.MaxRounds == 0 {
		cfg.MaxRounds = TargetDefaultMaxRounds
	}
	name := cfg.Name
	if name == "" {
		name = TargetDefaultName
	}
	return &TargetReconciler[T]{
		cfg: cfg, walker: w, name: name,
		subs: map[int]func(TargetEvent){},
		wake: make(chan struct{}, 1),
	}, nil
}

func (r *TargetReconciler[T]) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// SetTarget stores t as the last target and asks for a pass, resetting the
// backoff. When the store fails, the target is not changed and the error is
// returned.
func (r *TargetReconciler[T]) SetTarget(ctx context.Context, t T) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("converge: target %q: encode: %w", r.name, bare(err))
	}
	if err := r.cfg.Store.PutTarget(ctx, r.name, b); err != nil {
		return fmt.Errorf("converge: target %q: store: %w", r.name, bare(err))
	}
	r.mu.Lock()
	r.target, r.hasTarget = t, true
	r.pending = true
	r.failures, r.notBefore = 0, time.Time{}
	r.mu.Unlock()
	r.signal()
	return nil
}

// Target returns the current target, and false when none is set.
func (r *TargetReconciler[T]) Target() (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.target, r.hasTarget
}

// Trigger asks for a pass. Triggers while a pass is pending merge with it;
// triggers while a pass runs make one more pass after it. A trigger does
// not cut short a backoff.
func (r *TargetReconciler[T]) Trigger() {
	r.mu.Lock()
	r.pending = true
	r.mu.Unlock()
	r.signal()
}

// TriggerForced asks for a pass forced past update locks: items see
// Forced(ctx) true. It raises the flag of the running pass (items that
// check after now proceed past locks) and of the pending pass, which runs
// at once, without waiting for a backoff. It is never lost.
func (r *TargetReconciler[T]) TriggerForced() {
	r.mu.Lock()
	r.pending, r.pendingForce = true, true
	if r.running != nil {
		r.running.force.Store(true)
	}
	r.mu.Unlock()
	r.signal()
}

// Subscribe registers f for every event from now on and returns the
// function that unregisters it. f is called from the loop goroutine, in
// order, and must not block.
func (r *TargetReconciler[T]) Subscribe(f func(TargetEvent)) (unsubscribe func()) {
	r.mu.Lock()
	id := r.nextSub
	r.nextSub++
	r.subs[id] = f
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.subs, id)
		r.mu.Unlock()
	}
}

func (r *TargetReconciler[T]) emit(e TargetEvent) {
	r.mu.Lock()
	ids := make([]int, 0, len(r.subs))
	for id := range r.subs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	fs := make([]func(TargetEvent), 0, len(ids))
	for _, id := range ids {
		fs = append(fs, r.subs[id])
	}
	r.mu.Unlock()
	for _, f := range fs {
		f(e)
	}
}

// ApplyIntermediate preempts the regular loop to converge the intermediate
// target t (stop everything, for example, before the regular target
// restores it): the running regular pass is cancelled, t gets one pass,
// and the regular loop resumes with a pass right after. It blocks until
// the intermediate pass ends and returns its error, or ctx's error.
// Intermediate targets are not stored. Run must be running, or be started
// before ctx ends.
func (r *TargetReconciler[T]) ApplyIntermediate(ctx context.Context, t T) error {
	req := &targetIntermediate[T]{target: t, done: make(chan error, 1)}
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return ErrTargetStopped
	}
	r.inter = append(r.inter, req)
	if r.running != nil {
		r.running.preempted.Store(true)
		r.running.cancel()
	}
	r.mu.Unlock()
	r.signal()
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run loads the last target from the Store (unless SetTarget was called)
// and reconciles until ctx is cancelled, then stops the running pass
// (items in flight see a cancelled context) and returns nil once it ended.
// It fails when the stored target cannot be read or decoded. Run may be
// called only once.
func (r *TargetReconciler[T]) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return ErrTargetRunning
	}
	r.started = true
	has := r.hasTarget
	r.mu.Unlock()
	defer r.stop()

	if !has {
		b, err := r.cfg.Store.Target(ctx, r.name)
		switch {
		case errors.Is(err, ErrStoreNotFound):
		case err != nil:
			return fmt.Errorf("converge: target %q: load: %w", r.name, bare(err))
		default:
			var t T
			if err := json.Unmarshal(b, &t); err != nil {
				return fmt.Errorf("converge: target %q: decode: %w", r.name, bare(err))
			}
			r.mu.Lock()
			if !r.hasTarget {
				r.target, r.hasTarget, r.pending = t, true, true
			}
			r.mu.Unlock()
		}
	}

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var nextPeriodic time.Time
	for {
		if ctx.Err() != nil {
			return nil
		}
		r.mu.Lock()
		now := time.Now()
		if !nextPeriodic.IsZero() && !now.Before(nextPeriodic) && r.hasTarget {
			r.pending, nextPeriodic = true, time.Time{}
		}
		var inter *targetIntermediate[T]
		var target T
		var force, run bool
		switch {
		case len(r.inter) > 0:
			inter = r.inter[0]
			r.inter = r.inter[1:]
			target, run = inter.target, true
		case r.pending && r.hasTarget && (r.pendingForce || !now.Before(r.notBefore)):
			target, force, run = r.target, r.pendingForce, true
			r.pending, r.pendingForce = false, false
		}
		if !run {
			wait := time.Duration(-1)
			if r.pending && r.hasTarget {
				wait = r.notBefore.Sub(now)
			}
			if !nextPeriodic.IsZero() {
				if d := nextPeriodic.Sub(now); wait < 0 || d < wait {
					wait = d
				}
			}
			r.mu.Unlock()
			if wait >= 0 {
				timer.Reset(wait)
			}
			select {
			case <-ctx.Done():
			case <-r.wake:
			case <-timer.C:
			}
			timer.Stop()
			continue
		}
		passCtx, cancel := context.WithCancel(ctx)
		run1 := &targetRun{cancel: cancel}
		run1.force.Store(force)
		if inter == nil {
			r.running = run1
		}
		r.passes++
		pass := r.passes
		r.mu.Unlock()

		start := time.Now()
		err := r.pass(&forceCtx{Context: passCtx, run: run1}, pass, inter != nil, target)
		cancel()
		took := time.Since(start)
		forced := run1.force.Load()

		r.mu.Lock()
		r.running = nil
		var retry time.Duration
		switch {
		case inter != nil:
			// Hand back to the regular loop at once.
			r.pending, r.notBefore = true, time.Time{}
		case run1.preempted.Load() && ctx.Err() == nil:
			r.pending = true // preempted: run again after the intermediate
			r.mu.Unlock()
			continue
		case err == nil:
			r.failures, r.notBefore = 0, time.Time{}
			if r.cfg.Interval > 0 {
				nextPeriodic = time.Now().Add(r.cfg.Interval)
			}
		case ctx.Err() != nil:
		default:
			r.failures++
			retry = r.cfg.Backoff.Delay(r.failures, rand.Float64())
			r.notBefore = time.Now().Add(retry)
			r.pending = true
			if r.pendingForce {
				retry = 0
			}
		}
		r.mu.Unlock()
		if inter != nil {
			inter.done <- err
		}
		if ctx.Err() != nil && err != nil {
			return nil
		}
		ev := TargetEvent{Pass: pass, Intermediate: inter != nil, Forced: forced, Duration: took}
		if err == nil {
			ev.Kind = TargetPassFinished
		} else {
			ev.Kind, ev.Err, ev.Retry, ev.Locked = TargetPassFailed, err, retry, errors.Is(err, ErrLocked)
		}
		r.emit(ev)
	}
}

// stop fails the intermediate targets still waiting.
func (r *TargetReconciler[T]) stop() {
	r.mu.Lock()
	r.stopped = true
	inter := r.inter
	r.inter = nil
	r.mu.Unlock()
	for _, in := range inter {
		in.done <- ErrTargetStopped
	}
}

// pass walks every stage of target in order, each until a walk changes
// nothing.
func (r *TargetReconciler[T]) pass(ctx context.Context, pass int, inter bool, target T) error {
	stages, err := r.cfg.Build(ctx, target)
	if err != nil {
		return &TargetStageError{Stage: "build", Err: err}
	}
	seen := map[RequiredAction]bool{}
	for _, st := range stages {
		for round := 1; ; round++ {
			walk := r.walker.Apply
			if st.Clean {
				walk = r.walker.Clean
			}
			rep, err := walk(ctx, st.Graph)
			forced := Forced(ctx)
			for _, a := range rep.Actions() {
				if !seen[a] {
					seen[a] = true
					r.emit(TargetEvent{Kind: TargetActionRequired, Pass: pass, Intermediate: inter, Forced: forced, Stage: st.Name, Action: a})
				}
			}
			if rep.Changed() {
				r.emit(TargetEvent{Kind: TargetStateChanged, Pass: pass, Intermediate: inter, Forced: forced, Stage: st.Name, Report: rep})
			}
			if err != nil {
				return &TargetStageError{Stage: st.Name, Round: round, Err: err}
			}
			if !rep.Changed() {
				break
			}
			if round == r.cfg.MaxRounds {
				return &TargetStageError{Stage: st.Name, Round: round, Err: fmt.Errorf("%w: still changing after %d walks", ErrTargetNotSettled, round)}
			}
		}
	}
	return nil
}

// forceCtx makes Forced(ctx) follow the flag of a running pass, so that a
// forced trigger reaches items of the pass already under way.
type forceCtx struct {
	context.Context
	run *targetRun
}

func (c *forceCtx) Value(key any) any {
	if key == keyForce && c.run.force.Load() {
		return true
	}
	return c.Context.Value(key)
}
