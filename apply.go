package converge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ConfigError names a configuration field that is out of range.
type ConfigError struct {
	Field  string
	Reason string
}

// Error describes the problem, naming its culprit.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("converge: config %s: %s", e.Field, e.Reason)
}

// Is makes ConfigError match ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// WalkerConfig tunes a walk. The zero value is usable: it means DefaultParallelism,
// no fail-fast, no grace period, no observer, no metrics, no logs and
// time.Now.
type WalkerConfig struct {
	// Name is the value of the label "target" of the walk's metric
	// series, so that the walks of two loops in one program are told
	// apart; a TargetReconciler sets it to its own Name. Empty (the
	// default for a Walker of its own) gives an empty label, which
	// Prometheus shows as no label. It is at most 63 letters, digits,
	// '-', '_' or '.': a label value must come from a small set.
	Name string
	// Parallelism is the most items processed at once; 0 means
	// DefaultParallelism. Negative values are invalid. With Parallelism 1
	// the items run in the order they were added, as far as their order
	// constraints allow. A walk after a quick one (no item applied, quick
	// checks) starts on one worker in that order and grows to Parallelism
	// workers once an item is about to Apply or is slow: a slow discovery
	// holds the items after it back for about two milliseconds, once per
	// walk. docs/internals.md explains the schedule.
	Parallelism int
	// FailFast stops scheduling new items after the first failure. Items
	// already running finish; the rest are reported as not run.
	FailFast bool
	// Grace is how long the items already running may go on when the walk
	// is interrupted (its context ends): no new item starts, the items in
	// flight keep a context that is not cancelled until they finish or
	// Grace runs out, and the rest are reported as OutcomeNotRun. When
	// Grace runs out, or a second interrupt arrives (see WithInterrupt),
	// their context is cancelled at once. Report.Interrupted says which of
	// the two happened. 0 means no grace: an interrupt cancels the items'
	// context at once. Negative values are invalid.
	Grace time.Duration
	// Observer receives progress events; nil means none. See Observer for
	// the ordering guarantees and what happens when it is slow.
	Observer Observer
	// EventBuffer is how many events wait for a busy Observer before the
	// oldest are dropped; 0 means DefaultEventBuffer. Negative values are
	// invalid.
	EventBuffer int
	// EventDrain is how long a walk whose items are done waits for its
	// Observer to take the events still waiting before it returns anyway
	// (a TargetReconciler's Run waits as long for its subscribers); 0
	// means DefaultEventDrain. Negative values are invalid.
	EventDrain time.Duration
	// Metrics receives the walk's measurements (MetricWalkItems and its
	// siblings); nil means none (MetricsNop).
	Metrics Metrics
	// Logger receives a line per item that failed (Warn), changed (Info)
	// or was unchanged (Debug), and one per finished walk (Info, Debug
	// when nothing changed), with the attributes "walk", "item", "phase",
	// "outcome", "refresh" (the dependencies a refreshed item was
	// refreshed for) and, in a TargetReconciler, "revision". States never
	// reach the log: they may hold secrets. nil means no logging.
	Logger *slog.Logger
	// RefreshLog keeps the refreshes that are due and have not happened
	// (see Refresher) from one walk to the next; nil means a MemRefreshLog
	// for the Walker's life (the package-level Apply, ApplyDry and Clean
	// share one). A program that must not lose a refresh when it is
	// killed between a write and the refresh gives it a durable log:
	// NewStoreRefreshLog over a boltstore, which a TargetReconciler does
	// itself. Walks of graphs without a Refresher never use it.
	RefreshLog RefreshLog
	// Tracer, when set, starts a span per walk (SpanWalk, a child of the
	// span in the walk's context) and, when that span is recorded, one per
	// item (SpanItem) with the events "apply" and "verify" of an item that
	// changes, the outcome and the phase it failed in; an item resolved as
	// waiting gets a span of its own with no duration. The items' context
	// carries the Tracer and the item's span, so the spans an adapter
	// starts for an item (StartSpan) are its children. nil means none.
	Tracer Tracer
	// Now returns the current time; nil means time.Now. With time.Now a
	// walk reads the wall clock once, when it starts, and after that only
	// the monotonic clock, which costs half as much: the times in its
	// Report are its start plus the monotonic time elapsed since.
	Now func() time.Time
}

// DefaultWalkerConfig returns the configuration used by the package-level walk
// functions.
func DefaultWalkerConfig() WalkerConfig {
	return WalkerConfig{Parallelism: DefaultParallelism, Now: time.Now}
}

// Validate reports the first field out of range as a *ConfigError.
func (c WalkerConfig) Validate() error {
	if reason := nameProblem(c.Name); reason != "" {
		return &ConfigError{Field: "Name", Reason: reason}
	}
	switch {
	case c.Parallelism < 0:
		return &ConfigError{Field: "Parallelism", Reason: fmt.Sprintf("must not be negative, got %d", c.Parallelism)}
	case c.Grace < 0:
		return &ConfigError{Field: "Grace", Reason: fmt.Sprintf("must not be negative, got %s", c.Grace)}
	case c.EventBuffer < 0:
		return &ConfigError{Field: "EventBuffer", Reason: fmt.Sprintf("must not be negative, got %d", c.EventBuffer)}
	case c.EventDrain < 0:
		return &ConfigError{Field: "EventDrain", Reason: fmt.Sprintf("must not be negative, got %s", c.EventDrain)}
	}
	return nil
}

// Walker runs walks over graphs with one Config. It is safe for concurrent
// use: every walk has its own state.
type Walker struct {
	cfg    WalkerConfig
	labels *walkLabels // when cfg.Metrics is set
	// quick: this walker's last walk of more than one worker was quick
	// (walkState.slow), so its next one starts on one worker and grows
	// (walkState.grow).
	quick atomic.Bool
}

// NewWalker validates cfg and returns a Walker that uses it.
func NewWalker(cfg WalkerConfig) (*Walker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Parallelism == 0 {
		cfg.Parallelism = DefaultParallelism
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.EventBuffer == 0 {
		cfg.EventBuffer = DefaultEventBuffer
	}
	if cfg.EventDrain == 0 {
		cfg.EventDrain = DefaultEventDrain
	}
	if _, nop := cfg.Metrics.(MetricsNop); nop {
		cfg.Metrics = nil
	}
	if cfg.RefreshLog == nil {
		cfg.RefreshLog = &MemRefreshLog{}
	}
	w := &Walker{cfg: cfg}
	if cfg.Metrics != nil {
		w.labels = newWalkLabels(cfg.Name)
	}
	return w, nil
}

// WalkID identifies one walk: it is in the walk's Report, in each of its
// progress events and in each of its *ItemError values, so that the events
// and log lines of concurrent or successive walks can be told apart. It is
// unique within the process: a random prefix chosen when the process
// starts, a dash and a counter ("3f9a2c1e-17").
type WalkID string

var (
	walkPrefix = fmt.Sprintf("%08x", rand.Uint32())
	walkSeq    atomic.Uint64
)

func newWalkID() WalkID {
	var buf [32]byte
	b := append(append(buf[:0], walkPrefix...), '-')
	return WalkID(strconv.AppendUint(b, walkSeq.Add(1), 10)) // one allocation
}

// CurrentWalk returns the ID of the walk that runs an item, from the
// context the walk passes to the item's methods; ok is false for any other
// context. Items that share work across the items of one walk — reading a
// file once for all the keys in it, say — key it on the walk.
func CurrentWalk(ctx context.Context) (WalkID, bool) {
	id, ok := ctx.Value(keyWalk).(WalkID)
	return id, ok
}

// WithInterrupt returns a context for a walk or a TargetReconciler's Run
// that can be interrupted in two steps, as a program's first and second
// Ctrl-C, and the function that interrupts it. The first call cancels ctx:
// a graceful interrupt (no new item starts; the items already running get
// WalkerConfig.Grace to finish). The second call is immediate: the contexts of
// the items still running are cancelled at once. Further calls do nothing.
// Cancelling parent is an immediate interrupt too.
//
// Without WithInterrupt, cancelling a walk's context is a graceful
// interrupt that only the end of WalkerConfig.Grace makes immediate. With a
// Grace of 0 every interrupt is immediate. The contexts hold resources of
// parent until interrupt was called twice or parent ends.
//
//	ctx, interrupt := converge.WithInterrupt(context.Background())
//	sig := make(chan os.Signal, 2)
//	signal.Notify(sig, os.Interrupt)
//	go func() {
//		for range sig {
//			interrupt()
//		}
//	}()
//	rep, err := walker.Apply(ctx, g)
func WithInterrupt(parent context.Context) (ctx context.Context, interrupt func()) {
	hard, stopNow := context.WithCancel(parent)
	soft, stop := context.WithCancel(context.WithValue(hard, keyHardStop, hard))
	var calls atomic.Int32
	return soft, func() {
		switch calls.Add(1) {
		case 1:
			stop()
		case 2:
			stop()
			stopNow()
		}
	}
}

var defaultWalker, _ = NewWalker(DefaultWalkerConfig())

// Apply converges every item of g to its presence using DefaultWalkerConfig. See
// Walker.Apply.
func Apply(ctx context.Context, g *Graph) (*Report, error) { return defaultWalker.Apply(ctx, g) }

// ApplyDry simulates Apply using DefaultWalkerConfig. See Walker.ApplyDry.
func ApplyDry(ctx context.Context, g *Graph) (*Report, error) {
	return defaultWalker.ApplyDry(ctx, g)
}

// Clean removes every item of g using DefaultWalkerConfig. See Walker.Clean.
func Clean(ctx context.Context, g *Graph) (*Report, error) { return defaultWalker.Clean(ctx, g) }

// Apply converges every item of g: Present items to their goal, after their
// dependencies; Absent items to their clean state, after their dependents;
// every item after the items it is ordered after (Graph.After).
//
// For each item it discovers the current state, computes the target, checks,
// applies when required, then discovers and checks again: an item that
// still requires work fails in PhaseVerify with ErrNotConverged. When an
// item fails, the items that wait on it are reported as OutcomeWaiting, and
// independent branches go on (unless WalkerConfig.FailFast). Cancelling ctx
// interrupts the walk: no new item starts and the rest are reported as
// OutcomeNotRun; items in flight see their context cancelled at once, or,
// with a WalkerConfig.Grace, only when it runs out or a second interrupt arrives
// (see WithInterrupt); Report.Interrupted says which.
//
// Items see the values of ctx: a walk under WithForce(ctx) is forced past
// update locks (Forced(ctx) is true in every item).
//
// Apply returns a Report for every valid graph, even when items failed, and
// an error aggregating the item errors (nil when everything converged). An
// invalid graph returns a nil Report and the validation error.
func (w *Walker) Apply(ctx context.Context, g *Graph) (*Report, error) {
	return w.walk(ctx, g, ModeApply, false)
}

// ApplyDry is Apply with every Apply replaced by ApplyDry: it reads the real
// system but writes nothing, and reports the state each item would reach.
// Dependents compute their goals from the simulated states.
func (w *Walker) ApplyDry(ctx context.Context, g *Graph) (*Report, error) {
	return w.walk(ctx, g, ModeApply, true)
}

// Clean converges every item of g to its clean state, whatever its
// presence, in reverse dependency order; an ordering edge between two
// Present items is reversed too, one with an Absent end is ignored (see
// Graph.After). Every item must implement CleanNode (Cleaner for typed
// items).
func (w *Walker) Clean(ctx context.Context, g *Graph) (*Report, error) {
	return w.walk(ctx, g, ModeClean, false)
}

// CleanDry simulates Clean.
func (w *Walker) CleanDry(ctx context.Context, g *Graph) (*Report, error) {
	return w.walk(ctx, g, ModeClean, true)
}

// walkOpts are what a reconciler adds to a walk.
type walkOpts struct {
	// rev is the revision of the target the walk belongs to.
	rev uint64
	// yield, when it ends, stops the walk at the next item boundary: no
	// new item starts, the items in flight finish, without a time limit.
	yield context.Context
}

// walkState is the state of one walk.
type walkState struct {
	cfg     *WalkerConfig
	c       *compiled
	id      WalkID
	ctx     context.Context
	itemCtx context.Context // the context items see
	yield   context.Context // walkOpts.yield
	mode    Mode
	dry     bool
	rev     uint64       // walkOpts.rev
	log     *slog.Logger // cfg.Logger
	kinds   *itemKinds   // when cfg.Metrics is set
	// traceItems: the walk's span (cfg.Tracer) is recorded, and so each
	// item gets one.
	traceItems bool
	// kindLabels and labels are the label values of the walk's metrics
	// (kindLabels by index in kinds.names), when cfg.Metrics is set.
	kindLabels []kindLabels
	labels     *walkLabels
	// refresh is the refresh state of a walk of a graph with Refreshers
	// (not of a CleanDry); nil otherwise.
	refresh *walkRefresh
	results []ItemResult
	// published[k] is set once results[k].After is final: a DepStates reads
	// After only then. (A flag, not a pointer, keeps the GC off it.) Only
	// an Apply or ApplyDry of a graph with Absent items keeps it: only there
	// may an item read the state of a dependency that no order constraint
	// puts before or after it (see depView.State); nil otherwise.
	published []atomic.Bool
	views     []depView
	em        *emitter
	clock     walkClock

	// solo: the walk has one worker, which runs on the walk's goroutine
	// (workSolo) in the order of schedule.solo, without the ready queue.
	// The wait counts and the tallies below are then the worker's alone,
	// and it takes mu only to stop. solo is written by that worker only,
	// under mu when it grows the walk.
	solo bool
	// grow, in a solo walk that may use more workers, is how many it may
	// use (0: it may not): it starts the others (growFrom) once an item
	// is about to Apply, or items were slow (slowItem), or its worker
	// spent longer than slowBudget in one item (watchSolo), and is no
	// longer solo from then on; grew is set by whoever grows it, once.
	// inItem is k+1 while the solo worker runs item k, 0 between items,
	// and -(k+1) once watchSolo grew the walk during item k. workers
	// waits for the workers it started.
	grow    int
	grew    atomic.Bool
	inItem  atomic.Int64
	workers sync.WaitGroup
	// applied: an item of the walk is about to Apply or applied.
	// slowItems counts the items that took quickItem or more, slowTime
	// their time in nanoseconds. A solo walk that may grow grows once an
	// item is about to Apply or slowTime reaches slowBudget; the walker's
	// next walk starts solo unless an item applied or slowTime reached
	// slowBudget with at least one item in slowShare slow (see slow).
	applied   atomic.Bool
	slowItems atomic.Int32
	slowTime  atomic.Int64
	// soloStopped: workSolo failed fast (it reads ws.stop under ws.mu).
	soloStopped bool
	// deferring: the solo worker of a walk without an Observer leaves the
	// wait counts alone while every item succeeds, since it reaches each
	// item after the items it waits for anyway: the items it completed so
	// are then the first resolved of sched.solo. The first failure, or
	// growth, settles them (settleDeferred), which ends the deferring: a
	// cascade and a ready queue need the counts. (With an Observer the
	// counts tell when an item's wait ends, for its EventQueued.)
	deferring bool

	mu        sync.Mutex
	cond      sync.Cond
	ready     readyQueue
	remaining []int32
	blocked   [][]ID
	sched     *schedule
	resolved  int
	stop      bool
	stopCause error
	failures  int

	// Interrupts: see onCancelLocked.
	hardCtx     context.Context         // the immediate interrupt, from WithInterrupt
	hard        context.CancelCauseFunc // cancels itemCtx; nil when items see ctx
	grace       *time.Timer
	cancelSeen  bool
	finished    bool
	interrupted Interrupt
}

func (w *Walker) walk(ctx context.Context, g *Graph, mode Mode, dry bool) (*Report, error) {
	return w.walkWith(ctx, g, mode, dry, walkOpts{})
}

func (w *Walker) walkWith(ctx context.Context, g *Graph, mode Mode, dry bool, opts walkOpts) (*Report, error) {
	if g == nil {
		return nil, &GraphError{Err: ErrNilItem, Index: -1}
	}
	c, err := g.compile()
	if err != nil {
		return nil, err
	}
	if mode == ModeClean {
		if err := checkCleanable(c); err != nil {
			return nil, err
		}
	}
	n := len(c.items)
	var span Span
	if w.cfg.Tracer != nil {
		ctx, span = w.cfg.Tracer.Start(ctx, SpanWalk, StringAttr(AttrMode, mode.String()),
			BoolAttr(AttrDry, dry), IntAttr(AttrItems, int64(n)))
		ctx = WithTracer(ctx, w.cfg.Tracer)
	}
	clock, start := newWalkClock(w.cfg.Now)
	ws := &walkState{
		clock:     clock,
		cfg:       &w.cfg,
		c:         c,
		id:        newWalkID(),
		ctx:       ctx,
		itemCtx:   ctx,
		yield:     opts.yield,
		mode:      mode,
		dry:       dry,
		rev:       opts.rev,
		log:       w.cfg.Logger,
		results:   make([]ItemResult, n),
		views:     make([]depView, n),
		remaining: make([]int32, n),
	}
	ws.cond.L = &ws.mu
	if span != nil {
		ws.traceItems = span.Recording()
	}
	if mode != ModeClean && c.hasAbsent {
		ws.published = make([]atomic.Bool, n)
	}
	if c.refresh != nil && (mode == ModeApply || !dry) {
		ws.refresh = startRefresh(ctx, w.cfg.RefreshLog)
	}
	if w.cfg.Metrics != nil {
		ws.kinds = c.kinds()
		ws.kindLabels = ws.kinds.labelsFor(w.cfg.Name)
		ws.labels = w.labels
	}
	if ws.log != nil && ws.log.Enabled(ctx, slog.LevelDebug) {
		ws.log.LogAttrs(ctx, slog.LevelDebug, "walk started", slog.String("walk", string(ws.id)),
			slog.String("mode", walkModeNames[mode][boolIndex(dry)]), slog.Int("items", n))
	}
	if w.cfg.Observer != nil {
		ws.em = newEmitter(w.cfg.Observer, &w.cfg, ws.clock.Now, ws.id, opts.rev)
	}
	if w.cfg.Grace > 0 {
		// Items get a context of their own that an interrupt cancels only
		// when the grace period ends, or at a second interrupt.
		var itemCtx context.Context
		itemCtx, ws.hard = context.WithCancelCause(context.WithoutCancel(ctx))
		ws.itemCtx = itemCtx
		defer ws.hard(nil)
		if hard, ok := ctx.Value(keyHardStop).(context.Context); ok {
			ws.hardCtx = hard
			stopHard := context.AfterFunc(hard, func() {
				ws.mu.Lock()
				ws.onCancelLocked()
				ws.stopNowLocked()
				ws.mu.Unlock()
			})
			defer stopHard()
		}
	}
	ws.itemCtx = context.WithValue(ws.itemCtx, keyWalk, ws.id)
	if opts.yield != nil {
		stopYield := context.AfterFunc(opts.yield, func() {
			ws.mu.Lock()
			ws.yieldLocked()
			ws.mu.Unlock()
		})
		defer stopYield()
	}
	sch := c.schedule(mode)
	ws.sched = sch
	copy(ws.remaining, sch.indeg)
	workers := min(w.cfg.Parallelism, n)
	ws.solo = workers <= 1
	if !ws.solo {
		if w.quick.Load() {
			// The last walk was quick: start on one worker, and grow
			// (with a ready queue) when an item is not quick.
			ws.solo, ws.grow = true, workers
		} else {
			ws.ready = newReadyQueue(sch)
		}
	}
	for k := 0; k < n; k++ {
		if ws.remaining[k] == 0 {
			ws.pushReady(k)
		}
	}
	ws.deferring = ws.solo && ws.em == nil

	stopWatch := context.AfterFunc(ctx, func() {
		ws.mu.Lock()
		ws.onCancelLocked()
		ws.mu.Unlock()
	})
	if ws.solo {
		var stop chan struct{}
		var watched sync.WaitGroup
		if ws.grow > 0 {
			stop = make(chan struct{})
			watched.Go(func() { ws.watchSolo(stop) })
		}
		k, grew := ws.workSolo()
		if stop != nil {
			close(stop)
			watched.Wait()
		}
		if grew {
			ws.work(k)
		}
		ws.workers.Wait()
	} else {
		for range workers {
			ws.workers.Go(func() { ws.work(-1) })
		}
		ws.workers.Wait()
	}
	stopWatch()
	ws.mu.Lock()
	ws.finished = true
	if ws.grace != nil {
		ws.grace.Stop()
	}
	interrupted := ws.interrupted
	stopped := ws.stop
	ws.mu.Unlock()
	if slow := ws.slow(); workers > 1 && (!stopped || slow) {
		// A walk cut short says nothing of its items' pace unless it was
		// slow.
		w.quick.Store(!slow)
	}

	// Whatever was not resolved was never started. (A result is filled in
	// when its item runs or is resolved, in one pass over its memory.)
	var notRun int
	for k := 0; k < n && ws.resolved+notRun < n; k++ {
		if r := &ws.results[k]; r.Outcome == outcomePending {
			ws.initResult(k)
			r.Outcome = OutcomeNotRun
			r.Err = fmt.Errorf("%w: %w", ErrNotRun, ws.stopCause)
			notRun++
			ws.emit(Event{ID: r.ID, Kind: EventSkipped, Outcome: OutcomeNotRun, Err: r.Err})
		}
	}
	var dropped int
	if ws.em != nil {
		dropped = closeMailboxes(w.cfg.EventDrain, ws.em.box)[0]
	}
	rep := &Report{
		Walk:          ws.id,
		Revision:      opts.rev,
		Mode:          mode,
		Dry:           dry,
		Items:         ws.results,
		Started:       start,
		Duration:      ws.clock.Now().Sub(start),
		Interrupted:   interrupted,
		EventsDropped: dropped,
		index:         c.index,
		notRun:        notRun,
		cause:         ws.stopCause,
	}
	if w.cfg.Metrics != nil || ws.log != nil {
		ws.observeWalk(rep)
	}
	if ws.failures == 0 && notRun == 0 {
		if span != nil {
			span.End(nil)
		}
		return rep, nil // what rep.Err finds, without a pass over the items
	}
	err = rep.Err()
	if span != nil {
		span.SetAttrs(IntAttr(AttrNotRun, int64(notRun)), IntAttr(AttrWaiting, int64(rep.Count(OutcomeWaiting))))
		if ws.failures == 0 {
			span.End(nil) // interrupted or preempted, not failed
		} else {
			span.End(err)
		}
	}
	return rep, err
}

func checkCleanable(c *compiled) error {
	var errs []error
	for i, it := range c.items {
		if it.clean == nil {
			errs = append(errs, &GraphError{Err: ErrNoClean, Index: i, ID: it.id})
		}
	}
	return joinGraphErrors(errs)
}

// onCancelLocked interrupts the walk when its context ended: no new item
// starts; the items in flight see their context cancelled at once, or when
// the grace period ends. Callers hold ws.mu.
func (ws *walkState) onCancelLocked() {
	if ws.finished || ws.cancelSeen {
		return
	}
	ws.cancelSeen = true
	if !ws.stop {
		ws.stop, ws.stopCause = true, ws.ctx.Err()
		if ws.stopCause == nil { // only the immediate interrupt ended
			ws.stopCause = context.Canceled
		}
	}
	ws.cond.Broadcast()
	switch {
	case ws.hard == nil: // items see ctx: cancelled already
		ws.interrupted = InterruptImmediate
	case ws.hardCtx != nil && ws.hardCtx.Err() != nil:
		ws.stopNowLocked()
	default:
		ws.interrupted = InterruptGraceful
		ws.grace = time.AfterFunc(ws.cfg.Grace, func() {
			ws.mu.Lock()
			ws.stopNowLocked()
			ws.mu.Unlock()
		})
	}
}

// yieldLocked stops the walk at the item boundary: the items in flight
// finish, without a time limit. Callers hold ws.mu.
func (ws *walkState) yieldLocked() {
	if !ws.stop && !ws.finished {
		ws.stop, ws.stopCause = true, errPreempted
		ws.interrupted = InterruptGraceful
	}
	ws.cond.Broadcast()
}

// stopNowLocked cancels the context of the items in flight. Callers hold
// ws.mu.
func (ws *walkState) stopNowLocked() {
	if ws.finished || ws.interrupted == InterruptImmediate {
		return
	}
	ws.interrupted = InterruptImmediate
	ws.hard(context.Cause(ws.ctx))
}

// presence is the presence item k converges to in this walk.
func (ws *walkState) presence(k int) Presence { return ws.c.presenceIn(ws.mode, k) }

func (c *compiled) presenceIn(mode Mode, k int) Presence {
	if mode == ModeClean {
		return Absent
	}
	return c.items[k].presence
}

// schedule is the order constraints of a walk mode over a compiled graph,
// computed once per graph and mode and shared by every walk.
type schedule struct {
	// next[at[k]:at[k+1]] lists the items that may start only after item
	// k: the dependents of a Present item, the dependencies of an Absent
	// one when those are Absent too, and the items ordered after it
	// (addOrderEdges). One array holds every list.
	next []int32
	at   []int32
	// indeg counts, for every item, the items it waits for.
	indeg []int32
	// rank is the number of items on the longest chain that starts with
	// the item. Running the items with the longest chains first keeps the
	// critical path moving when more items are ready than workers.
	rank []int32
	// rankAt[r:r+1] is where the items of rank r lie in an array of every
	// item sorted by rank: the bucket of rank r in a walk's ready queue.
	rankAt []int32
	// solo is the order in which a walk of one worker runs the items: the
	// lowest index first of the items whose wait is over. With one worker
	// the order does not change how long the walk takes, and insertion
	// order keeps the worker's writes to the results, and its reads of the
	// items, close together in memory.
	solo []int32
}

// successors returns the items that may start only after item k.
func (sch *schedule) successors(k int) []int32 { return sch.next[sch.at[k]:sch.at[k+1]] }

func (c *compiled) schedule(mode Mode) *schedule {
	c.schedOnce[mode].Do(func() { c.sched[mode] = newSchedule(c, mode) })
	return c.sched[mode]
}

func newSchedule(c *compiled, mode Mode) *schedule {
	n := len(c.items)
	sch := &schedule{indeg: make([]int32, n), rank: make([]int32, n)}
	succs := make([][]int, n)
	for k, it := range c.items {
		for _, d := range it.deps {
			switch {
			case c.presenceIn(mode, k) == Present:
				succs[d] = append(succs[d], k) // d first, then k
				sch.indeg[k]++
			case c.presenceIn(mode, d) == Absent:
				succs[k] = append(succs[k], d) // k removed before d
				sch.indeg[d]++
			}
		}
	}
	addOrderEdges(c, mode, succs, sch.indeg)
	indeg := append([]int32(nil), sch.indeg...)
	order := make([]int, 0, n)
	for k := range n {
		if indeg[k] == 0 {
			order = append(order, k)
		}
	}
	for i := 0; i < len(order); i++ {
		for _, s := range succs[order[i]] {
			if indeg[s]--; indeg[s] == 0 {
				order = append(order, s)
			}
		}
	}
	sch.at = make([]int32, n+1)
	for k, ss := range succs {
		sch.at[k+1] = sch.at[k] + int32(len(ss))
	}
	sch.next = make([]int32, 0, sch.at[n])
	for _, ss := range succs {
		for _, x := range ss {
			sch.next = append(sch.next, int32(x))
		}
	}
	for i := len(order) - 1; i >= 0; i-- {
		k := order[i]
		var m int32
		for _, s := range succs[k] {
			m = max(m, sch.rank[s])
		}
		sch.rank[k] = m + 1
	}
	var hi int32
	for _, r := range sch.rank {
		hi = max(hi, r)
	}
	sch.rankAt = make([]int32, hi+2)
	for _, r := range sch.rank {
		sch.rankAt[r+1]++
	}
	for r := 1; r < len(sch.rankAt); r++ {
		sch.rankAt[r] += sch.rankAt[r-1]
	}
	sch.solo = lowestFirst(sch, n)
	return sch
}

// addOrderEdges adds the ordering edges (Graph.After) to the successors
// and wait counts of a schedule, once each whatever the dependencies say
// already. In an Apply, x after y means y first, then x, whatever their
// presences; Clean removes x before y when both are Present in the graph
// and ignores an edge with an Absent end (see Graph.After), so that its
// order stays acyclic: the walk up refused every cycle it could make.
func addOrderEdges(c *compiled, mode Mode, succs [][]int, indeg []int32) {
	var has map[[2]int]bool // first, then
	for x, it := range c.items {
		for _, y := range it.after {
			first, then := y, x
			if mode == ModeClean {
				if it.presence == Absent || c.items[y].presence == Absent {
					continue
				}
				first, then = x, y
			}
			if has == nil {
				has = make(map[[2]int]bool)
				for k, ss := range succs {
					for _, s := range ss {
						has[[2]int{k, s}] = true
					}
				}
			}
			if has[[2]int{first, then}] {
				continue
			}
			has[[2]int{first, then}] = true
			succs[first] = append(succs[first], then)
			indeg[then]++
		}
	}
}

// lowestFirst returns the order of schedule.solo: repeatedly the lowest
// index among the items whose wait is over (Kahn's algorithm over a
// min-heap of indexes).
func lowestFirst(sch *schedule, n int) []int32 {
	indeg := append([]int32(nil), sch.indeg...)
	var h minHeap
	for k := range n {
		if indeg[k] == 0 {
			h.push(int32(k))
		}
	}
	order := make([]int32, 0, n)
	for len(h) > 0 {
		k := h.pop()
		order = append(order, k)
		for _, s := range sch.successors(int(k)) {
			if indeg[s]--; indeg[s] == 0 {
				h.push(s)
			}
		}
	}
	return order
}

// minHeap is a binary min-heap of item indexes.
type minHeap []int32

func (h *minHeap) push(x int32) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p] <= a[i] {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *minHeap) pop() int32 {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < len(a) && a[l] < a[m] {
			m = l
		}
		if r < len(a) && a[r] < a[m] {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}

// readyQueue holds the ready items by rank, highest rank first, in the
// order they became ready within a rank. Ranks are small integers (chain
// lengths), so a bucket per rank makes push and pop constant time.
type readyQueue struct {
	rank    []int32
	buckets [][]int
	heads   []int
	top     int // no bucket above top holds items
	n       int
}

func newReadyQueue(sch *schedule) readyQueue {
	// Every item is queued at most once per walk: one array holds every
	// bucket, each with room for the items of its rank (the schedule
	// counted them once for every walk), so pushes never grow a bucket.
	ranks := len(sch.rankAt) - 1
	all := make([]int, len(sch.rank))
	buckets := make([][]int, ranks)
	for r := range buckets {
		buckets[r] = all[sch.rankAt[r]:sch.rankAt[r]:sch.rankAt[r+1]]
	}
	return readyQueue{rank: sch.rank, buckets: buckets, heads: make([]int, ranks)}
}

func (q *readyQueue) len() int { return q.n }

func (q *readyQueue) push(k int) {
	r := int(q.rank[k])
	q.buckets[r] = append(q.buckets[r], k)
	q.top = max(q.top, r)
	q.n++
}

// pop removes the first item of the highest non-empty rank; the queue must
// not be empty.
func (q *readyQueue) pop() int {
	for q.heads[q.top] == len(q.buckets[q.top]) {
		q.buckets[q.top], q.heads[q.top] = q.buckets[q.top][:0], 0
		q.top--
	}
	k := q.buckets[q.top][q.heads[q.top]]
	q.heads[q.top]++
	q.n--
	return k
}

// pushReady queues item k (a solo walk has no queue: its worker reaches k
// in the order of schedule.solo). Callers hold ws.mu, or run before the
// workers or as the solo worker.
func (ws *walkState) pushReady(k int) {
	if !ws.solo {
		ws.ready.push(k)
	}
	if ws.em != nil { // no Event is built for a walk without an Observer
		ws.em.emit(Event{ID: ws.c.items[k].id, Kind: EventQueued})
	}
}

// Batching: a worker whose last item was quick takes up to maxBatch items
// at once when the ready queue holds enough for every worker, and runs them
// one after the other with no lock between them, accounting for them
// together. On a walk of converged items that cuts the lock traffic, which
// is most of the cost of parallel no-op items (a single worker has no lock
// traffic to cut, and does not batch). The items of a batch not
// started yet go back to the queue as soon as one of its items is about to
// Apply, or took quickItem or more, or failed, or the walk is stopping: a
// batch holds other items back only while one item discovers and checks.
// A batch of 16 rather than 4 pays for the lock, and for the wait for the
// results' memory (touchBatch), once per 16 items when the queue holds
// enough for every worker.
const (
	maxBatch  = 16
	quickItem = 20 * time.Microsecond
	// A solo walk that may grow (see walkState.grow) grows once its items
	// that took quickItem or more took slowBudget together, or its worker
	// spent one to two slowBudget in one item: a few items made slow by a
	// garbage collection or the operating system's scheduler do not make
	// a walk of quick items parallel, and ready items wait at most about
	// two slowBudget for a solo walk to grow.
	slowBudget = time.Millisecond
	slowShare  = 64
)

// batch is the items a worker took from the queue at once; items[next:n]
// have not started.
type batch struct {
	items   [maxBatch]int
	next, n int
}

// touchBatch fills in the ID and presence of the results of the items of
// b before the first of them runs, and writes the zero values they still
// hold into a field on each other cache line a run writes. The ready queue
// hands items out longest chain first, so the results a worker writes lie
// far apart in memory and each item's first writes miss the cache; the
// writes that miss hold the core's store buffer, which stalls the worker
// when it fills and which every locked instruction drains. Written here
// one after the other, the misses of the whole batch overlap instead of
// each stalling its item in turn. runItem writes the same lines again,
// from the cache. (Writing them is harmless for an item given back
// unstarted: the ID and presence are what any run or resolution of the
// item writes, the rest is still zero.)
func (ws *walkState) touchBatch(b *batch) {
	for _, k := range b.items[:b.n] {
		r := ws.initResult(k)
		// A result is 216 bytes at any offset from a cache line: the
		// bytes a run writes, up to Duration, span two or three lines,
		// which these fields reach whatever the offset.
		r.Outcome, r.Started, r.Duration = outcomePending, time.Time{}, 0
	}
}

// giveBack returns the items of b that have not started to the queue.
func (ws *walkState) giveBack(b *batch) {
	if b == nil || b.next >= b.n {
		return
	}
	ws.mu.Lock()
	for _, k := range b.items[b.next:b.n] {
		ws.ready.push(k)
	}
	ws.cond.Broadcast()
	ws.mu.Unlock()
	b.n = b.next
}

// work is one worker of a walk of several. first, when not negative, is
// an item that the worker ran before (the one a solo walk grew at) and
// that it accounts for first.
func (ws *walkState) work(first int) {
	// last is when this worker finished its previous item: when it takes
	// the next one without waiting, that is when the next one starts, which
	// saves reading the clock once per item.
	var last time.Time
	var b batch
	var done [maxBatch]int
	nDone := 0
	if first >= 0 {
		if res := &ws.results[first]; res.Outcome != OutcomeFailed && ws.em != nil {
			ws.em.emit(Event{ID: res.ID, Kind: EventDone, Outcome: res.Outcome})
		}
		done[0], nDone = first, 1
	}
	quick := false // the previous item took less than quickItem
	workers := min(ws.cfg.Parallelism, len(ws.results))
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for {
		ws.settle(done[:nDone])
		nDone = 0
		waited := last.IsZero()
		for !ws.stop && ws.ready.len() == 0 && ws.resolved < len(ws.results) {
			ws.cond.Wait()
			waited = true
		}
		// The AfterFuncs that set stop run asynchronously: do not start
		// new work in the meantime.
		if !ws.cancelSeen && ws.ctx.Err() != nil {
			ws.onCancelLocked()
		}
		if !ws.stop && ws.yield != nil && ws.yield.Err() != nil {
			ws.yieldLocked()
		}
		if ws.stop || ws.resolved == len(ws.results) {
			return
		}
		b.next, b.n = 0, 1
		if quick && workers > 1 && ws.ready.len() >= 2*workers {
			b.n = min(maxBatch, ws.ready.len()/workers)
		}
		for i := range b.n {
			b.items[i] = ws.ready.pop()
		}
		ws.mu.Unlock()
		if b.n > 1 {
			ws.touchBatch(&b)
		}
		start := last
		if waited {
			start = ws.clock.Now()
		}
		for b.next < b.n {
			if b.next > 0 && (!quick || ws.stopping()) {
				ws.giveBack(&b)
				break
			}
			k := b.items[b.next]
			b.next++
			var applied time.Duration
			res := &ws.results[k]
			last, applied = ws.runItem(k, res, start, &b)
			if ws.kinds != nil || ws.log != nil {
				ws.observeItem(k, res, applied)
			}
			quick = res.Outcome != OutcomeFailed && applied < 0 && last.Sub(start) < quickItem
			if !quick && applied < 0 && res.Outcome != OutcomeFailed {
				ws.slowItem(last.Sub(start))
			}
			start = last
			done[nDone] = k
			nDone++
			if res.Outcome != OutcomeFailed && ws.em != nil {
				// Before the EventQueued of every item after k, which
				// only this worker's settle can queue.
				ws.em.emit(Event{ID: res.ID, Kind: EventDone, Outcome: res.Outcome})
			}
		}
		ws.mu.Lock()
	}
}

// settle accounts, under ws.mu, for the items a worker ran (done), in
// the order it ran them: it counts them, fails or stops the walk for a
// failed item and blocks the items after it, lowers the wait counts of the
// items after a successful one and queues those whose wait is over, or
// resolves as waiting those that an item before them blocked, and wakes
// idle workers for what it queued beyond the item its caller takes next.
// The wait counts are read and written only here and in releaseCascade,
// under ws.mu, with plain instructions: a quick worker settles a batch of
// up to maxBatch items at once, so the lock is taken once per batch, and a
// locked decrement per wait count would cost more than the lock.
func (ws *walkState) settle(done []int) {
	if len(done) == 0 {
		return
	}
	queued := 0
	for _, k := range done {
		ws.resolved++
		res := &ws.results[k]
		if res.Outcome != OutcomeFailed {
			for _, s := range ws.sched.successors(k) {
				if ws.remaining[s]--; ws.remaining[s] == 0 {
					queued += ws.readyLocked(int(s))
				}
			}
			continue
		}
		ws.failures++
		ws.emit(Event{ID: res.ID, Kind: EventFailed, Outcome: res.Outcome, Err: res.Err, Phase: res.Phase})
		if ws.cfg.FailFast {
			ws.failFast()
		}
		queued += ws.releaseCascade(k, true)
	}
	if ws.stop || ws.resolved == len(ws.results) {
		ws.cond.Broadcast()
		return
	}
	for range min(queued-1, ws.cfg.Parallelism) {
		ws.cond.Signal()
	}
}

// readyLocked takes item s, whose wait is over, into the walk: it queues
// it, or, when an item before it failed or waits, resolves it as waiting
// and blocks the items after it in turn. It returns the number of items
// queued. Callers hold ws.mu.
func (ws *walkState) readyLocked(s int) int {
	if ws.blocked == nil || len(ws.blocked[s]) == 0 {
		ws.pushReady(s)
		return 1
	}
	ws.resolveWaiting(s)
	return ws.releaseCascade(s, true)
}

// resolveWaiting resolves item s, which an item before it blocked, as
// waiting.
func (ws *walkState) resolveWaiting(s int) {
	r := ws.initResult(s)
	r.Outcome = OutcomeWaiting
	r.WaitingFor = ws.blocked[s]
	ws.resolved++
	if ws.traceItems {
		_, sp := ws.cfg.Tracer.Start(ws.itemCtx, SpanItem, StringAttr(AttrItem, string(r.ID)),
			StringAttr(AttrPresence, r.Presence.String()), StringAttr(AttrOutcome, OutcomeWaiting.String()))
		sp.End(nil)
	}
	ws.emit(Event{ID: r.ID, Kind: EventSkipped, Outcome: OutcomeWaiting, WaitingFor: r.WaitingFor})
}

// workSolo runs every item of a walk with one worker, in the order of
// ws.sched.solo: an item's wait is over when the worker reaches it, since
// the items it waits for come before it, so the worker needs no ready
// queue, and an item resolved as waiting (its Outcome set) is passed over.
// No other worker reads or writes the wait counts or the tallies, so it
// needs no lock and no condition variable for them. What it shares with
// the AfterFuncs of an interrupt or a yield — stop and its cause — it
// reads and writes under ws.mu, which it takes only when the walk's
// context or yield context ended or the walk stops failing fast.
//
// A walk that may grow (ws.grow) grows (growFrom) once an item is about
// to Apply, or its slow items took slowBudget (slowItem), or watchSolo
// found its worker in one item for too long: workSolo then returns the
// item it was in, run but not accounted for, and true, and its caller
// goes on as one of the walk's workers.
func (ws *walkState) workSolo() (int, bool) {
	var last time.Time // when the previous item ended; zero before the first
	for _, k32 := range ws.sched.solo {
		k := int(k32)
		res := &ws.results[k]
		if res.Outcome != outcomePending {
			continue // resolved as waiting
		}
		if ws.stopping() || ws.soloStopped {
			ws.mu.Lock()
			if !ws.cancelSeen && ws.ctx.Err() != nil {
				ws.onCancelLocked()
			}
			if !ws.stop && ws.yield != nil && ws.yield.Err() != nil {
				ws.yieldLocked()
			}
			stop := ws.stop
			ws.mu.Unlock()
			if stop {
				return 0, false
			}
		}
		start := last
		if start.IsZero() {
			start = ws.clock.Now()
		}
		var applied time.Duration
		if ws.grow > 0 {
			ws.inItem.Store(int64(k) + 1)
		}
		last, applied = ws.runItem(k, res, start, nil)
		if ws.kinds != nil || ws.log != nil {
			ws.observeItem(k, res, applied)
		}
		if ws.grow > 0 {
			grewDuringK := !ws.inItem.CompareAndSwap(int64(k)+1, 0)
			if ws.slowItem(last.Sub(start)) && !grewDuringK {
				ws.growFrom(k)
			}
			if grewDuringK {
				// watchSolo grew the walk during k: see what it did.
				ws.mu.Lock()
				ws.mu.Unlock() //nolint:staticcheck // an empty critical section orders us after growFrom
				return k, true
			}
		}
		if !ws.solo {
			return k, true
		}
		ws.complete(k)
	}
	return 0, false
}

// slowItem counts an item that took d, and reports whether a solo walk
// that may grow should grow (see walkState.applied).
func (ws *walkState) slowItem(d time.Duration) bool {
	if d < quickItem {
		return false
	}
	ws.slowItems.Add(1)
	return ws.slowTime.Add(int64(d)) >= int64(slowBudget)
}

// slow tells whether the walk's items were not quick: an item applied,
// or slowBudget went by in items that took quickItem or more and at least
// one item in slowShare did. A walk of quick items whose worker the
// garbage collector or the operating system held up in a few items, for
// however long, is still quick.
func (ws *walkState) slow() bool {
	return ws.applied.Load() || ws.slowTime.Load() >= int64(slowBudget) && int(ws.slowItems.Load())*slowShare >= len(ws.results)
}

// watchSolo grows a solo walk that may grow once its worker has been in
// one item for one to two slowBudget (it finds the worker in the same
// item at two of its ticks in a row), until stop is closed or the walk
// grew. It only grows the walk while the worker is inside an item
// (runItem), which touches no wait count: the worker finds out when it
// leaves the item (inItem).
func (ws *walkState) watchSolo(stop <-chan struct{}) {
	t := time.NewTimer(slowBudget)
	defer t.Stop()
	var seen int64
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if ws.grew.Load() {
			return
		}
		cur := ws.inItem.Load()
		if cur > 0 && cur == seen && ws.inItem.CompareAndSwap(cur, -cur) {
			ws.growFrom(int(cur - 1))
			return
		}
		seen = cur
		t.Reset(slowBudget)
	}
}

// growFrom makes a solo walk that may grow a walk of ws.grow workers, while
// its worker runs item k, unless it grew already: it queues every item
// whose wait is over but k (their EventQueued was sent when their wait
// ended) and starts the other workers. From then on the walk is not solo:
// the wait counts and the tallies are read and written under ws.mu.
func (ws *walkState) growFrom(k int) {
	if !ws.grew.CompareAndSwap(false, true) {
		return
	}
	ws.mu.Lock()
	ws.settleDeferred()
	ws.ready = newReadyQueue(ws.sched)
	for _, j32 := range ws.sched.solo {
		if j := int(j32); j != k && ws.remaining[j] == 0 && ws.results[j].Outcome == outcomePending {
			ws.ready.push(j)
		}
	}
	others := ws.grow - 1
	ws.solo = false
	ws.mu.Unlock()
	for range others {
		ws.workers.Go(func() { ws.work(-1) })
	}
}

// stopping reports, without ws.mu, whether the walk is about to stop
// starting items: its context or its yield context ended. (A fail-fast
// stop follows a failed item, which ends the batch anyway.)
func (ws *walkState) stopping() bool {
	return ws.ctx.Err() != nil || (ws.yield != nil && ws.yield.Err() != nil)
}

// complete accounts for the result of item k, which the solo worker wrote
// into ws.results[k], and releases or blocks the items after it, or, while
// the worker defers the wait counts (walkState.deferring) and k succeeded,
// only counts it as resolved. (The workers of a walk of several do this
// in settle.)
func (ws *walkState) complete(k int) {
	res := &ws.results[k]
	if ws.deferring && res.Outcome != OutcomeFailed {
		ws.resolved++
		return
	}
	ws.settleDeferred() // before k counts among the resolved
	ws.resolved++
	if res.Outcome == OutcomeFailed {
		ws.failures++
		ws.emit(Event{ID: res.ID, Kind: EventFailed, Outcome: res.Outcome, Err: res.Err, Phase: res.Phase})
		if ws.cfg.FailFast {
			ws.failFast()
		}
	} else {
		if ws.em != nil {
			ws.em.emit(Event{ID: res.ID, Kind: EventDone, Outcome: res.Outcome})
		}
	}
	ws.release(k, res.Outcome == OutcomeFailed)
}

// settleDeferred decrements the wait counts that the solo worker left
// alone (see walkState.deferring): those of the items after the first
// ws.resolved of sched.solo, every one of which succeeded. It ends the
// deferring. It runs on the solo worker, or in growFrom while that worker
// is inside an item.
func (ws *walkState) settleDeferred() {
	if !ws.deferring {
		return
	}
	for _, j := range ws.sched.solo[:ws.resolved] {
		for _, s := range ws.sched.successors(int(j)) {
			ws.remaining[s]--
		}
	}
	ws.deferring = false
}

// failFast stops the walk after a failure. Callers hold ws.mu, unless the
// walk is solo: then it takes ws.mu, which the AfterFuncs of an interrupt
// share, and marks the stop for workSolo.
func (ws *walkState) failFast() {
	if ws.solo {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		ws.soloStopped = true
	}
	if !ws.stop {
		// The failed item is in the report: the cause does not name it
		// again, so the walk's error names it once.
		ws.stop, ws.stopCause = true, errFailFast
	}
}

// release decrements the wait counts of the items after k, in a solo
// walk. When k did not succeed they are blocked; an item whose wait is
// over is queued, or, when blocked, resolved as waiting, which releases
// the items after it in turn.
func (ws *walkState) release(k int, failed bool) {
	if failed || ws.failures > 0 {
		ws.releaseCascade(k, failed)
		return
	}
	// No item failed so far: nothing is blocked and nothing cascades.
	for _, s := range ws.sched.successors(k) {
		if ws.remaining[s]--; ws.remaining[s] == 0 {
			ws.pushReady(int(s))
		}
	}
}

// releaseCascade is release once an item failed: it records which items
// are blocked and resolves, transitively, those whose wait is over as
// waiting.
func (ws *walkState) releaseCascade(k int, failed bool) int {
	if ws.blocked == nil {
		ws.blocked = make([][]ID, len(ws.results))
	}
	queued := 0
	type pending struct {
		k      int
		failed bool
	}
	stack := []pending{{k, failed}}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		id := ws.c.items[p.k].id
		for _, s32 := range ws.sched.successors(p.k) {
			s := int(s32)
			if p.failed {
				ws.blocked[s] = append(ws.blocked[s], id)
			}
			if ws.remaining[s]--; ws.remaining[s] > 0 {
				continue
			}
			if len(ws.blocked[s]) == 0 {
				ws.pushReady(s)
				queued++
				continue
			}
			ws.resolveWaiting(s)
			stack = append(stack, pending{s, true})
		}
	}
	return queued
}

// emit hands e to the Observer, if any. On the per-item paths the callers
// test ws.em themselves, so that a walk without an Observer does not even
// build the Event.
func (ws *walkState) emit(e Event) {
	if ws.em != nil {
		ws.em.emit(e)
	}
}

// initResult fills in the ID and presence of item k's result, once the
// item runs or is resolved without running, and returns the result.
func (ws *walkState) initResult(k int) *ItemResult {
	r := &ws.results[k]
	r.ID, r.Presence = ws.c.items[k].id, ws.presence(k)
	return r
}

// depView is the DepStates an item sees: the states of its own dependencies that
// have finished in this walk.
type depView struct {
	ws *walkState
	k  int
}

// State reads dependency j's result only when it is final. A Present item
// starts after its dependencies succeeded: their results are final. An
// Absent item starts before its Absent dependencies: they have no state
// yet. Only the Present dependencies of an Absent item (in an Apply or
// ApplyDry) may run at any time, before, during or after it: for those the
// walk keeps the published flags.
func (d *depView) State(id ID) (any, bool) {
	ws := d.ws
	j, ok := ws.c.index[id]
	if !ok {
		return nil, false
	}
	for _, dep := range ws.c.items[d.k].deps {
		if dep != j {
			continue
		}
		switch {
		case ws.presence(d.k) == Present:
			return ws.results[j].After, true
		case ws.presence(j) == Absent:
			return nil, false
		case ws.published[j].Load():
			return ws.results[j].After, true
		}
		return nil, false
	}
	return nil, false
}

// runItem runs the discover, goal, check, apply and verify phases of item k;
// before an Apply it gives the items of b, the worker's batch, that have not
// started back to the queue.
// A panic in any phase becomes the item's *PanicError in that phase. It
// returns when the item ended and how long its Apply took (negative when it
// did not apply).
func (ws *walkState) runItem(k int, res *ItemResult, start time.Time, b *batch) (end time.Time, applied time.Duration) {
	if !ws.traceItems {
		return ws.runItemIn(ws.itemCtx, nil, k, res, start, b)
	}
	ctx, sp := ws.cfg.Tracer.Start(ws.itemCtx, SpanItem, ws.c.itemSpanAttrs(k, ws.presence(k))...)
	end, applied = ws.runItemIn(ctx, sp, k, res, start, b)
	if res.Outcome == OutcomeFailed && int(res.Phase) < len(failedSpanAttrs) {
		sp.SetAttrs(failedSpanAttrs[res.Phase]...)
	} else if int(res.Outcome) < len(outcomeSpanAttrs) {
		sp.SetAttrs(outcomeSpanAttrs[res.Outcome]...)
	}
	sp.End(res.Err)
	return end, applied
}

// runItemIn is runItem with the context ctx for the item's methods and
// the item's span sp (nil when the item has none).
func (ws *walkState) runItemIn(ctx context.Context, sp Span, k int, res *ItemResult, start time.Time, b *batch) (end time.Time, applied time.Duration) {
	it := &ws.c.items[k]
	ws.initResult(k) // the rest of res is still zero
	res.Started = start
	if ws.em != nil {
		ws.em.emit(Event{ID: it.id, Kind: EventChecking})
	}
	deps := &ws.views[k]
	deps.ws, deps.k = ws, k
	var run *itemRun
	var applyStart time.Time
	applied = -1
	phase := PhaseDiscover
	fail := func(err error) {
		res.Outcome = OutcomeFailed
		res.Phase = phase
		res.Err = &ItemError{ID: it.id, Phase: phase, Err: err, Walk: ws.id}
		end = ws.clock.Now()
		res.Duration = end.Sub(res.Started)
		if run != nil {
			res.Actions = run.takeActions()
		}
		if phase == PhaseApply && !applyStart.IsZero() {
			applied = end.Sub(applyStart)
			res.ApplyDuration = applied
		}
	}
	defer func() {
		if v := recover(); v != nil {
			fail(newPanicError(v))
		}
	}()

	var err error
	res.Before, err = it.node.StateCurrent(ctx, deps)
	switch {
	case err == nil:
	case errors.Is(err, ErrStateUnknown):
		res.Before, res.Unknown = nil, true
	default:
		fail(err)
		return end, applied
	}
	phase = PhaseGoal
	if res.Presence == Absent {
		res.Target, err = it.clean.StateClean(ctx, deps)
	} else {
		res.Target, err = it.node.StateGoal(ctx, deps)
	}
	if err != nil {
		fail(err)
		return end, applied
	}
	phase = PhaseCheck
	if res.Unknown {
		res.Decision = Required(WorkUnitsUnknown)
	} else if res.Decision, err = it.node.Check(ctx, res.Before, res.Target); err != nil {
		fail(err)
		return end, applied
	}
	if !res.Decision.Required() {
		res.After = res.Before
		res.Outcome = OutcomeUnchanged
		if ws.refresh != nil {
			phase = PhaseRefresh
			if err := ws.refreshItem(k, res, b, &run); err != nil {
				fail(err)
				return end, applied
			}
			if run != nil {
				res.Actions = run.takeActions()
			}
		}
		ws.publish(k)
		end = ws.clock.Now()
		res.Duration = end.Sub(res.Started)
		return end, applied
	}

	// The rest of the worker's batch, or of a solo walk that may grow,
	// must not wait for an Apply.
	ws.giveBack(b)
	ws.applied.Store(true)
	if ws.grow > 0 && !ws.grew.Load() {
		ws.growFrom(k) // a solo walk that may grow
	}

	// Only items that change get a context of their own, to report
	// progress and required host actions.
	phase = PhaseApply
	if ws.refresh != nil {
		// Before the write: a process killed after it still refreshes
		// the Refreshers that depend on k on its next walk.
		if err := ws.recordRefresh(k); err != nil {
			fail(err)
			return end, applied
		}
	}
	run = &itemRun{id: it.id}
	if ws.em != nil {
		run.units = func(done, total int) {
			ws.emit(Event{ID: it.id, Kind: EventApplying, Done: done, Total: total})
		}
	}
	actx := context.WithValue(ctx, keyItemRun, run)
	ws.emit(Event{ID: it.id, Kind: EventApplying, Done: 0, Total: res.Decision.WorkUnits})
	if sp != nil {
		sp.Event("apply")
	}
	applyStart = ws.clock.Now()
	res.ApplyStart = applyStart.Sub(res.Started)
	if ws.dry {
		res.After, err = it.node.ApplyDry(actx, res.Before, res.Target)
	} else {
		res.After, err = it.node.Apply(actx, res.Before, res.Target)
	}
	if err != nil {
		fail(err)
		return end, applied
	}
	applied = ws.clock.Now().Sub(applyStart)
	res.ApplyDuration = applied
	phase = PhaseVerify
	if sp != nil {
		sp.Event("verify")
	}
	if !ws.dry {
		if res.After, err = it.node.StateCurrent(ctx, deps); err != nil {
			fail(err)
			return end, applied
		}
	}
	verdict, err := it.node.Check(ctx, res.After, res.Target)
	if err != nil {
		fail(err)
		return end, applied
	}
	if verdict.Required() {
		fail(ErrNotConverged)
		return end, applied
	}
	if ws.dry {
		res.Outcome = OutcomeWouldChange
	} else {
		res.Outcome = OutcomeChanged
	}
	if ws.refresh != nil {
		phase = PhaseRefresh
		if err := ws.refreshItem(k, res, b, &run); err != nil {
			fail(err)
			return end, applied
		}
	}
	ws.publish(k)
	res.Actions = run.takeActions()
	end = ws.clock.Now()
	res.Duration = end.Sub(res.Started)
	return end, applied
}

// publish makes the state item k reached, its result's After, visible to
// the items that read it. The worker does not write After again. Where no
// item can read a dependency's state before that dependency ends (see
// depView.State), the order of the walk publishes it, without a flag.
func (ws *walkState) publish(k int) {
	if ws.published != nil {
		ws.published[k].Store(true)
	}
}
