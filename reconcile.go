package converge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	// Round is the attempt of the stage that failed: the stage is walked
	// again while a walk changes something, and Round counts those walks
	// in this pass, from 1 ("attempt 1" in the message); 0 for a build
	// error.
	Round int
	Err   error
	// Walk is the walk that failed (empty for a build error); the message
	// does not repeat it.
	Walk WalkID
}

// Error describes the problem, naming its culprit.
func (e *TargetStageError) Error() string {
	if e.Round == 0 {
		return fmt.Sprintf("converge: stage %q: %s", e.Stage, causeText(e.Err))
	}
	return fmt.Sprintf("converge: stage %q, attempt %d: %s", e.Stage, e.Round, causeText(e.Err))
}

// Unwrap returns the stage's error.
func (e *TargetStageError) Unwrap() error { return e.Err }

// TargetReconcilerConfig configures a TargetReconciler. Build is required; every
// other zero field takes its default.
type TargetReconcilerConfig[T any] struct {
	// Name is the key of the last target in the Store and the value of
	// the label "target" of the reconciler's metric series and its walks'
	// (so two reconcilers in one program are told apart); empty means
	// TargetDefaultName. It is at most 63 letters, digits, '-', '_' or
	// '.': a label value must come from a small set.
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
	//
	// The store also keeps the reconciler's refresh log, unless
	// Walk.RefreshLog is set: one record under TargetRefreshKey(Name)
	// (NewStoreRefreshLog), so that a refresh that was due when the agent
	// stopped (a service to restart after its configuration was written)
	// happens in the first pass after it starts again. It keeps, too, the
	// host actions its items asked for and that have not happened yet,
	// under TargetActionsKey(Name) (see PendingActions).
	Store Store
	// Walk configures the walks. Its Grace is also what Run gives the
	// items in flight when it stops, its EventBuffer bounds the events
	// waiting for each subscriber, and its EventDrain how long a stopping
	// Run waits for them. Its Metrics receive the reconciler's own
	// (MetricTargetPasses and its siblings, labelled with the reconciler's
	// Name) besides the walks'; its Logger gets a line per target set
	// ("target set", Info) or resumed from the Store by Load ("target
	// resumed", Info), per pass that ended (Info; Warn when it failed) and the
	// walks' lines, every one with the attribute "target" (the Name) and
	// the target's "revision". Targets never reach the log. Its Name is
	// replaced by the reconciler's Name. Its RefreshLog, when nil, is a
	// log kept in Store (see Store).
	Walk WalkerConfig
	// MaxRounds bounds the walks of one stage in one pass (apply, re-read,
	// apply again until nothing changes); 0 means TargetDefaultMaxRounds.
	MaxRounds int
	// Backoff delays the pass after a failed one; the zero value means
	// DefaultBackoff. A new target resets it.
	Backoff Backoff
	// Interval, when positive, runs a pass that long after the last one
	// succeeded, to repair drift; 0 means passes run only when asked.
	Interval time.Duration
	// BootID returns the ID of the host's current boot, which changes at
	// every boot: a pending host action (PendingActions) is done once the
	// boot ID differs from the one read when the action was asked for. nil
	// means LinuxBootID. An empty ID means unknown: an action asked for
	// under an unknown boot ID, or checked while the boot ID is unknown,
	// stays pending until ClearPendingActions. An error is logged (Warn)
	// and counts as unknown; it never fails a pass.
	BootID func(ctx context.Context) (string, error)
	// RollbackAfter, when positive, rolls a target back after that many
	// failed passes in a row: the last target that converged on this
	// device (every stage of a pass converged), which the reconciler
	// keeps in Store (TargetRollbackKey), is set again under a new
	// revision, with a TargetRolledBack event, a history entry of that
	// record and a Warn log line. The rollback stays in force
	// (RolledBack) until a new target is set; a target rolled back to
	// that fails in its turn is not rolled back again, and a target that
	// never converged has nothing to roll back to. 0 (the zero value)
	// never rolls back.
	RollbackAfter int
	// TraceParent, when set with a Walk.Tracer that is a
	// TracePropagator, returns the W3C traceparent a target was handed out
	// under ("" for none): the spans of the passes that converge to it are
	// then children of that remote span, so a device's pass joins the
	// trace of the server that set its target. nil means the passes'
	// spans are children of Run's context's span.
	TraceParent func(target T) string
}

// Validate reports the first field out of range as a *ConfigError.
func (c TargetReconcilerConfig[T]) Validate() error {
	if reason := nameProblem(c.Name); reason != "" {
		return &ConfigError{Field: "Name", Reason: reason}
	}
	switch {
	case c.Build == nil:
		return &ConfigError{Field: "Build", Reason: "must not be nil"}
	case c.MaxRounds < 0:
		return &ConfigError{Field: "MaxRounds", Reason: fmt.Sprintf("must not be negative, got %d", c.MaxRounds)}
	case c.Interval < 0:
		return &ConfigError{Field: "Interval", Reason: fmt.Sprintf("must not be negative, got %s", c.Interval)}
	case c.RollbackAfter < 0:
		return &ConfigError{Field: "RollbackAfter", Reason: fmt.Sprintf("must not be negative, got %d", c.RollbackAfter)}
	}
	walk := c.Walk
	walk.Name = "" // replaced by Name
	if err := walk.Validate(); err != nil {
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
	// Event.Action says which. It comes once per pass that asked; the
	// action is in PendingActions from then on, until the host booted
	// again, across restarts too.
	TargetActionRequired
	// TargetPassPreempted means a new target (SetTarget) or an
	// intermediate one (ApplyIntermediate) ended the pass before it
	// finished; the next pass runs that target. It is not a failure.
	TargetPassPreempted
	// TargetRolledBack means the target of Event.Revision failed
	// TargetReconcilerConfig.RollbackAfter passes in a row and the last
	// target that converged was set again; Event.Rollback says which.
	TargetRolledBack
)

var targetEventNames = [...]string{"", "state-changed", "pass-finished", "pass-failed", "action-required", "pass-preempted", "rolled-back"}

// String returns the lower-case name of the kind.
func (k TargetEventKind) String() string {
	return enumString("target-event", targetEventNames[:], uint8(k))
}

// TargetEvent is what subscribers of a TargetReconciler receive.
type TargetEvent struct {
	Kind TargetEventKind
	// Pass numbers the passes of this TargetReconciler value from 1: it
	// counts the passes since the reconciler was built, and starts at 1
	// again in a restarted process (Revision does not).
	Pass int
	// Revision is the revision of the target the pass converges (see
	// TargetReconciler.Revision): events of one target never carry
	// another's revision, even when a new target arrives while a pass
	// runs. The Report of a TargetStateChanged event carries it too.
	Revision uint64
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
	// Dropped is how many events this subscriber lost just before this
	// one because it was too slow (see Subscribe); usually 0.
	Dropped int
	// Rollback is the rollback made (TargetRolledBack).
	Rollback *TargetRollback
	// Walks are every walk the pass ran, in the order they ran, stage
	// after stage (pass events: TargetPassFinished, TargetPassFailed,
	// TargetPassPreempted): the time line of the pass, with each item's
	// start and duration in the walks' reports, including the walks that
	// changed nothing. Empty when the pass failed before its first walk.
	Walks []TargetWalk
}

// TargetWalk is one walk of a TargetReconciler's pass.
type TargetWalk struct {
	// Stage is the stage walked, Round the walk's number in it, from 1
	// (a stage is walked again until a walk changes nothing).
	Stage string
	Round int
	// Report is the walk's report.
	Report *Report
}

// TargetReconciler keeps one device converged to a target: each pass
// builds the target's stages and walks them in order; a stage is walked
// again until a walk changes nothing, then the next stage starts. Triggers
// coalesce into at most one pending pass; a forced trigger raises the flag
// of the running pass (items see it through Forced) and of the pending
// one; failed passes back off; a new target preempts the running pass at
// the next item boundary; intermediate targets preempt the regular loop
// and hand back to it.
//
// The last target is kept in the Store with its revision, which the Store
// assigns: revisions only grow, across restarts and across processes
// sharing the store, and the events and reports of a target's passes carry
// its revision. A restarted program resumes its last target with Load (or
// LoadOrSet, which sets a default when none is stored), before Run or by
// Run itself.
//
// Create it with NewTargetReconciler (the zero value is not usable), set or
// load a target and call Run once. Its methods are safe for concurrent use.
type TargetReconciler[T any] struct {
	cfg    TargetReconcilerConfig[T]
	walker *Walker
	name   string
	obs    targetObs
	// actions are the pending host actions; they have their own lock.
	actions actionBook
	// rollback keeps the last target that converged; nil without
	// RollbackAfter.
	rollback *rollbackBook

	mu           sync.Mutex
	target       T
	hasTarget    bool
	rev          uint64 // revision of target, from the Store
	pending      bool
	pendingForce bool
	// unreported counts the SetTarget calls still reporting their target
	// (targetObs.targetSet, outside the lock): no pass of the current
	// target starts until they are done, so what they reset (failures in
	// a row, backoff) cannot overwrite what its pass reports.
	unreported int
	notBefore  time.Time // backoff: regular passes wait until then
	failures   int
	inter      []*targetIntermediate[T]
	running    *targetRun
	passes     int
	started    bool
	stopped    bool
	subs       map[int]*mailbox[TargetEvent]
	nextSub    int

	wake chan struct{}
}

type targetIntermediate[T any] struct {
	target T
	rev    uint64
	done   chan error
}

// targetRun is the pass being walked.
type targetRun struct {
	force      atomic.Bool
	preempted  atomic.Bool // by an intermediate target: cancelled
	superseded atomic.Bool // by a new target: yields at an item boundary
	cancel     context.CancelFunc
	yield      context.CancelFunc
}

// NewTargetReconciler validates cfg and returns a reconciler that is not
// running yet.
func NewTargetReconciler[T any](cfg TargetReconcilerConfig[T]) (*TargetReconciler[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	name := cfg.Name
	if name == "" {
		name = TargetDefaultName
	}
	if cfg.Store == nil {
		cfg.Store = NewMemStore()
	}
	wcfg := cfg.Walk
	wcfg.Name = name
	if wcfg.Logger != nil {
		wcfg.Logger = wcfg.Logger.With(slog.String("target", name))
	}
	if wcfg.RefreshLog == nil {
		wcfg.RefreshLog = NewStoreRefreshLog(cfg.Store, TargetRefreshKey(name))
	}
	w, err := NewWalker(wcfg)
	if err != nil {
		return nil, err
	}
	if cfg.MaxRounds == 0 {
		cfg.MaxRounds = TargetDefaultMaxRounds
	}
	if cfg.BootID == nil {
		cfg.BootID = LinuxBootID
	}
	r := &TargetReconciler[T]{
		cfg: cfg, walker: w, name: name, obs: newTargetObs(name, w.cfg.Metrics, w.cfg.Logger, w.cfg.Now),
		subs: map[int]*mailbox[TargetEvent]{},
		wake: make(chan struct{}, 1),
	}
	r.actions = actionBook{store: cfg.Store, key: TargetActionsKey(name), bootID: cfg.BootID, now: w.cfg.Now, obs: &r.obs}
	if cfg.RollbackAfter > 0 {
		r.rollback = &rollbackBook{store: cfg.Store, key: TargetRollbackKey(name), after: cfg.RollbackAfter}
	}
	return r, nil
}

func (r *TargetReconciler[T]) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// SetTarget stores t as the last target under the next revision (the
// Store assigns it, so revisions only grow, across restarts too), makes it
// the current target and asks for a pass, resetting the backoff. A pass of
// the previous target that is running stops at the next item boundary (the
// items applying finish; no item is cut in the middle), ends with
// TargetPassPreempted, and the new target's pass starts. When the store
// fails, the target is not changed and the error is returned.
//
// SetTarget before Run (or before Load) replaces the stored target: t is
// the target Run starts with, under a revision above the stored one's, and
// the stored target is not loaded. To resume the stored target and set t
// only when none is stored, call LoadOrSet instead.
//
// When two SetTarget calls race, the target the Store numbered last is the
// current one when both have returned.
func (r *TargetReconciler[T]) SetTarget(ctx context.Context, t T) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("converge: target %q: encode: %w", r.name, bare(err))
	}
	rev, err := r.cfg.Store.PutTarget(ctx, r.name, b)
	if err != nil {
		return fmt.Errorf("converge: target %q: store: %w", r.name, bare(err))
	}
	if r.adopt(ctx, t, rev, false) {
		r.clearRollback(ctx, rev)
	}
	return nil
}

// adopt makes t, stored under rev, the current target, unless a target of
// a higher revision is current already, and asks for its pass. resumed is
// true when t was read from the Store (Load) rather than set.
func (r *TargetReconciler[T]) adopt(ctx context.Context, t T, rev uint64, resumed bool) bool {
	r.mu.Lock()
	if r.hasTarget && rev <= r.rev {
		r.mu.Unlock()
		return false
	}
	r.target, r.hasTarget = t, true
	r.rev = rev
	r.pending = true
	r.failures, r.notBefore = 0, time.Time{}
	if r.running != nil {
		r.running.superseded.Store(true)
		r.running.yield()
	}
	r.unreported++
	r.mu.Unlock()
	r.obs.targetSet(ctx, rev, resumed)
	r.mu.Lock()
	r.unreported--
	r.mu.Unlock()
	r.signal()
	return true
}

// Load reads the target stored under the reconciler's Name, with its
// revision, and makes it the current target (readable with Target and
// Revision at once, and the target Run converges) unless the current
// target is already that one or a newer one. It reports whether the
// reconciler has a target now: false, with a nil error, when the Store
// holds none and none was set. It fails when the stored target cannot be
// read or decoded, changing nothing.
//
// Load may be called before Run (Run loads the stored target itself when
// no target is set) or while it runs: a newer target that another process
// stored then preempts the running pass as SetTarget does.
func (r *TargetReconciler[T]) Load(ctx context.Context) (bool, error) {
	r.loadActions(ctx)
	if r.rollback != nil {
		if err := r.rollback.load(ctx); err != nil {
			r.obs.logAttrs(ctx, slog.LevelWarn, "rollback record unreadable", slog.String("error", err.Error()))
		}
	}
	b, rev, err := r.cfg.Store.Target(ctx, r.name)
	if errors.Is(err, ErrStoreNotFound) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.hasTarget, nil
	}
	if err != nil {
		return false, fmt.Errorf("converge: target %q: load: %w", r.name, bare(err))
	}
	var t T
	if err := json.Unmarshal(b, &t); err != nil {
		return false, fmt.Errorf("converge: target %q: decode: %w", r.name, bare(err))
	}
	r.adopt(ctx, t, rev, true)
	return true, nil
}

// loadActions reads the pending host actions from the Store; a failure is
// logged and left for the next pass to report.
func (r *TargetReconciler[T]) loadActions(ctx context.Context) {
	if err := r.actions.sync(ctx, "", false); err != nil {
		r.obs.logAttrs(ctx, slog.LevelWarn, "pending actions unreadable", slog.String("error", err.Error()))
	}
}

// LoadOrSet resumes the stored target, or sets def when there is none: it
// calls Load, and SetTarget(ctx, def) when Load found no target. It reports
// whether a target was found (stored, or set in this reconciler before),
// in which case def is not used. It is the one call a program makes before
// Run to come back with its last target after a restart and start with a
// default the first time. It is not atomic across processes sharing the
// Store: two that call it at once on an empty store both set their def,
// and the one stored last wins.
func (r *TargetReconciler[T]) LoadOrSet(ctx context.Context, def T) (found bool, err error) {
	found, err = r.Load(ctx)
	if err != nil || found {
		return found, err
	}
	return false, r.SetTarget(ctx, def)
}

// Revision returns the revision of the current target, as the Store
// numbered it: targets stored under the reconciler's Name are numbered
// from 1 in the order they were stored, and ApplyIntermediate's targets
// take numbers from the same count, so a revision is never reused for
// another target, not after a restart either. It is 0 when no target is
// set (before SetTarget, Load, LoadOrSet, or Run's own load). Called
// right after SetTarget from the goroutine that set it, it is that
// target's revision, as the TargetEvent values of its passes carry it.
func (r *TargetReconciler[T]) Revision() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rev
}

// Target returns the current target, and false when none is set: a
// target stored by an earlier process is current once Load (or LoadOrSet,
// or Run) has read it.
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
// function that unregisters it.
//
// Each subscriber has a goroutine of its own that calls f in order, so a
// slow subscriber never stalls the loop nor the other subscribers: its
// events wait in a buffer of Walk.EventBuffer events, the oldest are
// dropped when it is full, and the next event f gets says how many it lost
// (TargetEvent.Dropped). When Run stops, it waits at most Walk.EventDrain
// for the subscribers to take their events, then drops the rest. An f that
// never returns holds only its own goroutine, which ends when f returns.
func (r *TargetReconciler[T]) Subscribe(f func(TargetEvent)) (unsubscribe func()) {
	box := newMailbox(r.walker.cfg.EventBuffer, func(e TargetEvent, _ uint64, dropped int) {
		e.Dropped = dropped
		f(e)
	})
	r.mu.Lock()
	id := r.nextSub
	r.nextSub++
	r.subs[id] = box
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.subs, id)
		r.mu.Unlock()
		box.abandon()
	}
}

func (r *TargetReconciler[T]) emit(e TargetEvent) {
	r.mu.Lock()
	ids := make([]int, 0, len(r.subs))
	for id := range r.subs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	boxes := make([]*mailbox[TargetEvent], 0, len(ids))
	for _, id := range ids {
		boxes = append(boxes, r.subs[id])
	}
	r.mu.Unlock()
	for _, b := range boxes {
		b.push(e)
	}
}

// ApplyIntermediate preempts the regular loop to converge the intermediate
// target t (stop everything, for example, before the regular target
// restores it): the running regular pass is interrupted (its items see
// their context cancelled, after Walk.Grace when there is one) and ends
// with TargetPassPreempted, t gets one pass under a revision of its own,
// and the regular loop resumes with a pass right after. It blocks until
// the intermediate pass ends and returns its error, or ctx's error.
// Intermediate targets are not stored, but their revision is taken from
// the Store (PutTarget without a target), which fails ApplyIntermediate
// when the store does. Run must be running, or be started before ctx
// ends.
func (r *TargetReconciler[T]) ApplyIntermediate(ctx context.Context, t T) error {
	req := &targetIntermediate[T]{target: t, done: make(chan error, 1)}
	r.mu.Lock()
	stopped := r.stopped
	r.mu.Unlock()
	if stopped {
		return ErrTargetStopped
	}
	rev, err := r.cfg.Store.PutTarget(ctx, r.name, nil)
	if err != nil {
		return fmt.Errorf("converge: target %q: intermediate revision: %w", r.name, bare(err))
	}
	req.rev = rev
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

// Run loads the last target from the Store (as Load does, unless a target
// is set already: by SetTarget, Load or LoadOrSet) and reconciles until
// ctx ends. Then it interrupts the running pass as a
// walk is interrupted: no new item starts, and the items already applying
// get Walk.Grace to finish before their context is cancelled (at once
// when Grace is 0, or at a second interrupt of a ctx made by
// WithInterrupt). Once the pass ended and the subscribers took their
// events (waiting at most Walk.EventDrain), Run returns nil. It fails when
// the stored target cannot be read or decoded. Run may be called only
// once.
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
		if _, err := r.Load(ctx); err != nil {
			return err
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
		var rev uint64
		var force, run bool
		switch {
		case len(r.inter) > 0:
			inter = r.inter[0]
			r.inter = r.inter[1:]
			target, rev, run = inter.target, inter.rev, true
		case r.pending && r.hasTarget && r.unreported == 0 && (r.pendingForce || !now.Before(r.notBefore)):
			target, rev, force, run = r.target, r.rev, r.pendingForce, true
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
		var yield context.Context
		if inter == nil {
			yield, run1.yield = context.WithCancel(context.Background())
			r.running = run1
		}
		r.passes++
		var walks []TargetWalk
		info := passInfo{pass: r.passes, rev: rev, inter: inter != nil, yield: yield, walks: &walks}
		r.mu.Unlock()
		r.obs.passStarted(ctx, info, force)

		start := time.Now()
		passCtx, span := r.startPass(passCtx, info, force, target)
		err := r.pass(&forceCtx{Context: passCtx, run: run1}, info, target)
		if span != nil {
			r.endPass(ctx, span, err, run1)
		}
		cancel()
		if run1.yield != nil {
			run1.yield()
		}
		took := time.Since(start)
		forced := run1.force.Load()
		pass := info.pass
		ev := TargetEvent{Pass: pass, Revision: rev, Intermediate: inter != nil, Forced: forced, Duration: took, Walks: walks}

		r.mu.Lock()
		r.running = nil
		var retry time.Duration
		converged := false
		switch {
		case inter != nil:
			// Hand back to the regular loop at once.
			r.pending, r.notBefore = true, time.Time{}
		case err != nil && ctx.Err() == nil && (run1.preempted.Load() || run1.superseded.Load()):
			// Preempted: the next pass runs the intermediate or the new
			// target, then the regular loop goes on.
			r.pending = true
			r.mu.Unlock()
			ev.Kind = TargetPassPreempted
			r.obs.passEnded(ctx, ev, 0)
			r.emit(ev)
			continue
		case err == nil:
			r.failures, r.notBefore = 0, time.Time{}
			converged = true
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
		failures := r.failures
		r.mu.Unlock()
		if converged {
			r.converged(ctx, target, rev)
		}
		if inter != nil {
			inter.done <- err
		}
		if ctx.Err() != nil && err != nil {
			return nil
		}
		if err == nil {
			ev.Kind = TargetPassFinished
		} else {
			ev.Kind, ev.Err, ev.Retry, ev.Locked = TargetPassFailed, err, retry, errors.Is(err, ErrLocked)
		}
		r.obs.passEnded(ctx, ev, failures)
		r.emit(ev)
		if err != nil && inter == nil && !errors.Is(err, ErrLocked) {
			if rb := r.maybeRollBack(ctx, rev, failures, err); rb != nil {
				r.emit(TargetEvent{Kind: TargetRolledBack, Pass: pass, Revision: rev, Rollback: rb})
			}
		}
	}
}

// stop fails the intermediate targets still waiting and lets the
// subscribers take their events, for Walk.EventDrain at most.
func (r *TargetReconciler[T]) stop() {
	r.mu.Lock()
	r.stopped = true
	inter := r.inter
	r.inter = nil
	boxes := make([]*mailbox[TargetEvent], 0, len(r.subs))
	for _, b := range r.subs {
		boxes = append(boxes, b)
	}
	r.mu.Unlock()
	for _, in := range inter {
		in.done <- ErrTargetStopped
	}
	closeMailboxes(r.walker.cfg.EventDrain, boxes...)
}

// passInfo is what the events and walks of a pass carry.
type passInfo struct {
	pass  int
	rev   uint64
	inter bool
	// yield ends when a new target preempts the pass (nil for an
	// intermediate pass).
	yield context.Context
	// walks collects the reports of the pass's walks (TargetEvent.Walks).
	walks *[]TargetWalk
}

// pass walks every stage of target in order, each until a walk changes
// nothing. A preempted pass stops at the next item boundary.
func (r *TargetReconciler[T]) pass(ctx context.Context, info passInfo, target T) error {
	if err := r.actions.sync(ctx, "", false); err != nil {
		return err
	}
	stages, err := r.cfg.Build(ctx, target)
	if err != nil {
		return &TargetStageError{Stage: "build", Err: err}
	}
	seen := map[RequiredAction]bool{}
	for _, st := range stages {
		if err := r.stage(ctx, info, st, seen); err != nil {
			return err
		}
	}
	return nil
}

// stage walks stage st of a pass until a walk changes nothing, in a span
// of its own when the walks have a Tracer.
func (r *TargetReconciler[T]) stage(ctx context.Context, info passInfo, st TargetStage, seen map[RequiredAction]bool) (err error) {
	if t := r.walker.cfg.Tracer; t != nil {
		var span Span
		var rounds int
		ctx, span = t.Start(ctx, SpanStage, StringAttr(AttrStage, st.Name))
		defer func() {
			span.SetAttrs(IntAttr(AttrRound, int64(rounds)))
			if ctx.Err() != nil || (info.yield != nil && info.yield.Err() != nil) {
				span.End(nil) // preempted or cancelled: the pass's span says which
				return
			}
			span.End(err)
		}()
		return r.stageRounds(ctx, info, st, seen, &rounds)
	}
	var rounds int
	return r.stageRounds(ctx, info, st, seen, &rounds)
}

// stageRounds is stage's loop; it counts the walks in *rounds.
func (r *TargetReconciler[T]) stageRounds(ctx context.Context, info passInfo, st TargetStage, seen map[RequiredAction]bool, rounds *int) error {
	for round := 1; ; round++ {
		if info.yield != nil && info.yield.Err() != nil {
			return errPreempted
		}
		*rounds = round
		mode := ModeApply
		if st.Clean {
			mode = ModeClean
		}
		rep, err := r.walker.walkWith(ctx, st.Graph, mode, false, walkOpts{rev: info.rev, yield: info.yield})
		if rep != nil && info.walks != nil {
			*info.walks = append(*info.walks, TargetWalk{Stage: st.Name, Round: round, Report: rep})
		}
		forced := Forced(ctx)
		ev := TargetEvent{Pass: info.pass, Revision: info.rev, Intermediate: info.inter, Forced: forced, Stage: st.Name}
		// Recorded before the events, so a subscriber finds them in
		// PendingActions, and even when the pass was cancelled (the
		// host changed already); a failure fails the pass after its
		// events.
		recErr := r.actions.record(context.WithoutCancel(ctx), rep, info.rev)
		for _, a := range rep.Actions() {
			if !seen[a] {
				seen[a] = true
				ev.Kind, ev.Action = TargetActionRequired, a
				r.emit(ev)
			}
		}
		if rep.Changed() {
			ev.Kind, ev.Action, ev.Report = TargetStateChanged, RequiredAction{}, rep
			r.emit(ev)
		}
		if recErr != nil && err == nil {
			return recErr
		}
		if err != nil {
			se := &TargetStageError{Stage: st.Name, Round: round, Err: err}
			if rep != nil {
				se.Walk = rep.Walk
			}
			return se
		}
		if !rep.Changed() {
			break
		}
		if round == r.cfg.MaxRounds {
			return &TargetStageError{Stage: st.Name, Round: round, Walk: rep.Walk, Err: fmt.Errorf("%w: still changing after %d walks", ErrTargetNotSettled, round)}
		}
	}
	return nil
}

// The outcomes of a pass, in the attribute AttrOutcome of its span.
const (
	PassFinished  = "finished"
	PassFailed    = "failed"
	PassPreempted = "preempted"
	PassCancelled = "cancelled"
)

// startPass starts the span of a pass (nil without a Tracer): a child of
// the remote span the target was handed out under (TraceParent), or else
// of ctx's.
func (r *TargetReconciler[T]) startPass(ctx context.Context, info passInfo, force bool, target T) (context.Context, Span) {
	t := r.walker.cfg.Tracer
	if t == nil {
		return ctx, nil
	}
	if r.cfg.TraceParent != nil {
		if tp := r.cfg.TraceParent(target); tp != "" {
			ctx = WithTraceParent(ctx, t, tp)
		}
	}
	return t.Start(ctx, SpanPass, StringAttr(AttrTarget, r.name), IntAttr(AttrRevision, int64(info.rev)),
		IntAttr(AttrPass, int64(info.pass)), BoolAttr(AttrIntermediate, info.inter), BoolAttr(AttrForced, force))
}

// endPass ends the span of a pass that returned err: a pass preempted by
// another target, or cancelled with Run's context, is not a failure.
func (r *TargetReconciler[T]) endPass(ctx context.Context, span Span, err error, run *targetRun) {
	switch {
	case err == nil:
		span.SetAttrs(StringAttr(AttrOutcome, PassFinished))
		span.End(nil)
	case ctx.Err() == nil && (run.preempted.Load() || run.superseded.Load()):
		span.SetAttrs(StringAttr(AttrOutcome, PassPreempted))
		span.End(nil)
	case ctx.Err() != nil:
		span.SetAttrs(StringAttr(AttrOutcome, PassCancelled))
		span.End(nil)
	default:
		span.SetAttrs(StringAttr(AttrOutcome, PassFailed))
		span.End(err)
	}
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
