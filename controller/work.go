package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/workqueue"
)

// process runs the handler once for the key of it and acts on its
// verdict. It returns what the worker tells the queue: whether to reset
// the key's backoff, and when to run it next (negative: not at all, the
// error paths having queued it with backoff already, or the object being
// halted).
func (c *Controller) process(ctx context.Context, q *workqueue.Queue[ctrlEntry], it *workqueue.Item[ctrlEntry]) (forget bool, next time.Duration) {
	key := it.Key
	e := it.Entry
	if e == nil || e.flags.Load()&entryGone != 0 {
		if e = c.entry(key); e == nil {
			return true, -1
		}
		it.Entry = e // only the worker holding it touches it.Entry
	}
	cur := e.load()
	obj := &cur
	if e.flags.Load()&entryReload != 0 {
		e.flags.And(^entryReload)
		rec, err := c.cfg.Store.Get(ctx, c.prefix+key)
		switch {
		case errors.Is(err, converge.ErrStoreNotFound):
			c.forget(key, e)
			return true, -1
		case err != nil:
			e.flags.Or(entryReload)
			c.fail(q, key, obj)
			return false, -1
		}
		fresh, err := c.decode(rec)
		if err != nil {
			c.fail(q, key, obj)
			return false, -1
		}
		c.replace(e, fresh)
		obj = fresh
	}
	how, d, err := c.step(ctx, e, obj, 0)
	switch how {
	case stepAgain:
		return true, 0
	case stepGone:
		return true, -1
	case stepLater, stepHalted, stepLimited:
		return true, d
	case stepFailed:
		return false, d
	}
	return false, c.storeFailed(q, key, e, obj, err)
}

// stepped says what one step of an object came to.
type stepped uint8

const (
	stepLater   stepped = iota // handled: run again after the returned delay
	stepAgain                  // transitioned: run again at once
	stepGone                   // deleted
	stepFailed                 // the handler failed: run again after the returned delay
	stepHalted                 // halted: not run, or look again after the returned delay (negative: never)
	stepStore                  // the store failed (the returned error): nothing was stored
	stepLimited                // put off by a limit: run again after the returned delay
)

// step is one turn of an object in either mode: it reports a breach of
// the state's SLA, runs the handler on obj (read at obj.Version, entry e)
// unless the object is halted, and stores what follows, fencing every
// write with token when it is not zero. For stepLater, stepFailed and
// stepHalted it returns the delay before the next run (negative: none);
// for stepStore the store's error, or the cause of ctx when the handler
// failed because ctx ended.
func (c *Controller) step(ctx context.Context, e *ctrlEntry, obj *Object, token uint64) (stepped, time.Duration, error) {
	if token != 0 && ctx.Err() != nil {
		return stepStore, 0, context.Cause(ctx) // the lease is lost: run nothing more
	}
	obj, err := c.checkSLA(ctx, e, obj, token)
	if err != nil {
		return stepStore, 0, err
	}
	if obj.Halted != "" {
		return stepHalted, c.untilSLA(e, obj), nil
	}
	if err := c.recent(ctx, e, obj); err != nil {
		return stepStore, 0, err
	}
	res, end, herr := c.run(ctx, e, obj)
	if token != 0 && ctx.Err() != nil {
		// The lease was lost (or the replica is stopping) while the
		// handler ran: what it returned is not written, since another
		// replica may own the object by now.
		return stepStore, 0, context.Cause(ctx)
	}
	if errors.Is(herr, errStopping) {
		return stepStore, 0, herr // not run: the replica is stopping
	}
	if errors.Is(herr, errLimited) {
		// Not run (or cut short): every slot of the state's limit was
		// held. Looked at again later, or when a slot frees.
		c.logRun(ctx, slog.LevelDebug, obj, "limited", nil)
		return stepLimited, limitedDelay(c.cfg.Poll), nil
	}
	if errors.Is(herr, ErrCancelled) {
		// Cancelled while it ran: the cancel wrote a newer version, which
		// is read again (and found halted) instead of storing anything.
		return stepStore, 0, fmt.Errorf("%w (%w)", herr, converge.ErrStoreStale)
	}
	if herr == nil {
		how, d, err := c.settle(ctx, e, obj, res, token)
		switch {
		case errors.Is(err, errVerdict):
			herr = err
		case err != nil:
			c.logStore(ctx, obj, err)
			return stepStore, 0, err
		case how == settledAgain:
			c.reconciled(ctx, true, end)
			c.logRun(ctx, slog.LevelInfo, obj, res.Verdict.String(), nil, slog.String("next", string(res.Next)))
			return stepAgain, 0, nil
		case how == settledGone:
			c.reconciled(ctx, true, end)
			c.logRun(ctx, slog.LevelInfo, obj, res.Verdict.String(), nil)
			return stepGone, 0, nil
		case how == settledLimited:
			c.reconciled(ctx, true, end)
			c.logRun(ctx, slog.LevelDebug, obj, "limited", nil, slog.String("next", string(res.Next)))
			return stepLimited, d, nil
		default:
			c.reconciled(ctx, true, end)
			c.logRun(ctx, slog.LevelDebug, obj, res.Verdict.String(), nil)
			return stepLater, d, nil
		}
	}
	if ctx.Err() != nil {
		// Stopping, or the lease was lost: not the handler's failure.
		return stepStore, 0, context.Cause(ctx)
	}
	c.reconciled(ctx, false, end)
	failed, err := c.failed(ctx, e, obj, herr, token)
	if err != nil {
		c.logStore(ctx, obj, err)
		return stepStore, 0, err
	}
	if failed.Halted != "" {
		c.logRun(ctx, slog.LevelError, obj, string(failed.Halted), herr)
		return stepHalted, c.untilSLA(e, failed), nil
	}
	c.logRun(ctx, slog.LevelWarn, obj, "error", herr, slog.Int("retries", failed.Retries))
	c.metrics.Add(MetricRetries, 1, c.cfg.Kind)
	return stepFailed, c.cfg.Backoff.Delay(failed.Retries, rand.Float64()), nil
}

// publishEvery is how many handler runs of one result a controller's
// counts may wait before a worker publishes them (see publish).
const publishEvery = 64

// ctrlStats are the figures of a controller's hot path that its metrics
// show: counted with atomics where they happen (some under the queue's
// lock), and handed to Metrics by publish, in one call per metric for
// many runs.
type ctrlStats struct {
	// Written under the queue's lock, on every add.
	adds atomic.Int64 // queue adds not yet published
	_    [56]byte     // the workers' figures below on a cache line of their own

	// Written by a replica's handler runs, once or twice each, and by
	// the workers of a controller on its own when they hand their
	// counts over (see workerObs).
	success, error atomic.Int64 // handler runs, by result, since the start
	lastSuccess    atomic.Int64 // the monotonic reading of a recent success, plus one; 0: none yet
	_              [40]byte

	local         bool       // Run's own queue: depth and adds are counted here (not a replica's)
	published     sync.Mutex // held by the publishing worker; guards the fields below
	lastPublished int64      // lastSuccess as last published
	pubSuccess    int64      // success as last published
	pubError      int64      // error as last published
}

// reconciled counts a handler run whose verdict was stored (ok) or that
// failed, ended at end (the monotonic clock's reading): with its worker
// (see workerObs) for a worker of a controller on its own, which ctx
// carries, else in the controller's counts at once.
func (c *Controller) reconciled(ctx context.Context, ok bool, end time.Duration) {
	if !c.timed {
		return
	}
	if w, _ := ctx.Value(workerSlotKey{}).(*workerSlot); w != nil {
		w.obs.ran(c, ok, end)
		return
	}
	var n int64
	if ok {
		n = c.stats.success.Add(1)
		// Workers racing here may leave a success a few microseconds
		// older than the newest: no CAS loop on the hot path for that.
		c.stats.lastSuccess.Store(int64(end) + 1)
	} else {
		n = c.stats.error.Add(1)
	}
	if n%publishEvery == 0 {
		c.publish(false)
	}
}

// publish hands the counts gathered since the last call to Metrics:
// MetricReconciles and MetricLastSuccess, and for Run's own queue
// MetricQueueDepth and MetricQueueAdds (a replica sets those where it
// claims). A worker calls it every publishEvery runs and before it waits
// for the queue, and Run once more when it returns (final), so a scrape sees
// figures at most publishEvery runs old, and exact ones whenever the
// controller is idle. Unless final, it gives way to a worker already
// publishing.
func (c *Controller) publish(final bool) {
	if final {
		c.stats.published.Lock()
	} else if !c.stats.published.TryLock() {
		return
	}
	defer c.stats.published.Unlock()
	if c.stats.local {
		if q := c.q.Load(); q != nil {
			c.metrics.Set(MetricQueueDepth, float64(q.Len()), c.kindLabels...)
		}
		if n := c.stats.adds.Swap(0); n > 0 {
			c.metrics.Add(MetricQueueAdds, float64(n), c.kindLabels...)
		}
	}
	if n := c.stats.success.Load(); n > c.stats.pubSuccess {
		c.metrics.Add(MetricReconciles, float64(n-c.stats.pubSuccess), c.resultLabels[0]...)
		c.stats.pubSuccess = n
	}
	if n := c.stats.error.Load(); n > c.stats.pubError {
		c.metrics.Add(MetricReconciles, float64(n-c.stats.pubError), c.resultLabels[1]...)
		c.stats.pubError = n
	}
	if t := c.stats.lastSuccess.Load(); t != c.stats.lastPublished {
		c.stats.lastPublished = t
		// Back to the wall clock: now, less the time since the success.
		at := c.now().Add(-(c.mono() - time.Duration(t-1)))
		c.metrics.Set(MetricLastSuccess, float64(at.UnixNano())/1e9, c.kindLabels...)
	}
}

// logRun logs, at level, what a handler run on obj came to: its outcome,
// herr when it failed, and attrs.
func (c *Controller) logRun(ctx context.Context, level slog.Level, obj *Object, outcome string, herr error, attrs ...slog.Attr) {
	if c.log == nil || !c.log.Enabled(ctx, level) {
		return
	}
	all := make([]slog.Attr, 0, 5+len(attrs))
	all = append(all, slog.String("controller", c.cfg.Kind), slog.String("key", obj.Key),
		slog.String("state", string(obj.State)), slog.String("outcome", outcome))
	if herr != nil {
		all = append(all, slog.String("error", herr.Error()))
	}
	c.log.LogAttrs(ctx, level, "controller: handled", append(all, attrs...)...)
}

// logStore logs that what followed a handler run on obj could not be
// stored; a stale write (someone else wrote first) is not a failure and
// is logged at Debug.
func (c *Controller) logStore(ctx context.Context, obj *Object, err error) {
	level := slog.LevelWarn
	if errors.Is(err, converge.ErrStoreStale) || errors.Is(err, converge.ErrLeaseLost) || ctx.Err() != nil {
		level = slog.LevelDebug
	}
	if c.log == nil || !c.log.Enabled(ctx, level) {
		return
	}
	c.log.LogAttrs(ctx, level, "controller: store failed",
		slog.String("controller", c.cfg.Kind), slog.String("key", obj.Key),
		slog.String("state", string(obj.State)), slog.String("outcome", "store-error"),
		slog.String("error", err.Error()))
}

// failed stores a failure of the handler of obj with herr: one more
// failure in the state and in a row, the error, and the halt it calls
// for (a terminal error, or as many failures in a row as the state's
// quarantine). It returns the object as stored.
func (c *Controller) failed(ctx context.Context, e *ctrlEntry, obj *Object, herr error, token uint64) (*Object, error) {
	c.metrics.Add(MetricErrors, 1, c.cfg.Kind, string(obj.State))
	if errors.Is(herr, ErrTerminal) {
		c.metrics.Add(MetricTerminalErrors, 1, c.cfg.Kind, string(obj.State))
	}
	upd := *obj
	upd.History = nil
	upd.Failures++
	upd.Retries++
	f := Failure{At: c.now(), State: obj.State, Error: clipText(herr.Error(), MaxErrorText)}
	upd.LastError = &f
	if upd.FailingSince.IsZero() {
		upd.FailingSince = f.At
	}
	upd.RecentFailures = keepFailures(obj.RecentFailures, f, c.cfg.FailureHistory)
	var hist []converge.HistoryEntry
	switch limit := c.quarantineAfter(obj.State); {
	case errors.Is(herr, ErrTerminal):
		upd.Halted = HaltTerminal
		hist = c.haltEntry(obj, ReasonTerminal, upd.LastError)
	case limit > 0 && upd.Retries >= limit:
		upd.Halted = HaltQuarantined
		hist = c.haltEntry(obj, ReasonQuarantined, upd.LastError)
	}
	if err := c.rewrite(ctx, e, obj, &upd, token, hist...); err != nil {
		return nil, err
	}
	return &upd, nil
}

// keepFailures returns a new slice of the newest n of have and f, oldest
// first (nil when n is 0); have is not modified.
func keepFailures(have []Failure, f Failure, n int) []Failure {
	if n <= 0 {
		return nil
	}
	have = have[max(len(have)+1-n, 0):]
	out := make([]Failure, 0, len(have)+1)
	return append(append(out, have...), f)
}

// haltEntry returns the history entry of obj halted for reason (one of
// ReasonTerminal, ReasonQuarantined) by the failure f.
func (c *Controller) haltEntry(obj *Object, reason string, f *Failure) []converge.HistoryEntry {
	return []converge.HistoryEntry{{At: f.At, From: string(obj.State), To: string(obj.State), Reason: reason + ": " + f.Error}}
}

// rewrite stores upd, obj (read at obj.Version, entry e) changed in
// anything but its state, with the history entries hist, fencing the
// write with token when it is not zero, and installs it in the view with
// its new version.
func (c *Controller) rewrite(ctx context.Context, e *ctrlEntry, obj, upd *Object, token uint64, hist ...converge.HistoryEntry) error {
	v, err := c.put(ctx, upd, obj.Version, token, hist...)
	if err != nil {
		return err
	}
	upd.Version = v
	c.replace(e, upd)
	c.histMoved(e, obj.Version, v, hist...)
	return nil
}

// quarantineAfter returns the failures in a row that quarantine an object
// in state (0: never).
func (c *Controller) quarantineAfter(state State) int {
	if n, ok := c.cfg.QuarantineAfterIn[state]; ok {
		return n
	}
	return c.cfg.QuarantineAfter
}

// clipText returns s cut to at most n bytes, on a rune boundary, ending
// with "…" when it was cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// recent sets obj.History to the newest transitions of obj for its
// handler, from the entry's copy when it is of obj's version, else from
// the store.
func (c *Controller) recent(ctx context.Context, e *ctrlEntry, obj *Object) error {
	n := c.cfg.HandlerHistory
	if n == 0 {
		return nil
	}
	e.mu.Lock()
	if e.histAt != 0 && e.histAt == obj.Version {
		obj.History = e.hist
		e.mu.Unlock()
		return nil
	}
	e.mu.Unlock()
	h, err := c.cfg.Store.History(ctx, c.prefix+obj.Key)
	if err != nil {
		return err
	}
	h = slices.Clone(h[max(len(h)-n, 0):])
	e.mu.Lock()
	e.hist, e.histAt = h, obj.Version
	e.mu.Unlock()
	obj.History = h
	return nil
}

// histMoved notes that the controller wrote version to of an object,
// appending add to the history of version from: the entry's copy of the
// history stays valid when it was of version from.
func (c *Controller) histMoved(e *ctrlEntry, from, to uint64, add ...converge.HistoryEntry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.histAt == 0 || e.histAt != from {
		return
	}
	if len(add) > 0 {
		h := append(slices.Clip(e.hist), add...)
		e.hist = h[max(len(h)-c.cfg.HandlerHistory, 0):]
	}
	e.histAt = to
}

// run runs the handler on obj, measuring its latency when the controller
// is timed; it returns when the handler returned, on the controller's
// monotonic clock (0 when not timed).
func (c *Controller) run(ctx context.Context, e *ctrlEntry, obj *Object) (_ Result, _ time.Duration, rerr error) {
	// A worker of a controller on its own finds its slot first in ctx; a
	// replica's run is registered at its claim (see handlerRuns).
	w, _ := ctx.Value(workerSlotKey{}).(*workerSlot)
	var hr *handlerRun
	if w == nil {
		hr, _ = ctx.Value(handlerRunKey{}).(*handlerRun)
	}
	if hr != nil {
		// A replica's handler under a lease: it runs in one of the
		// replica's handler slots, is not started once the lease is lost
		// or the replica is stopping, and is watched for running on after
		// the lease is lost (keep).
		if ctx.Err() != nil {
			return Result{}, 0, context.Cause(ctx)
		}
		if err := hr.enter(ctx); err != nil {
			return Result{}, 0, err
		}
		defer hr.leave()
		if !hr.due.IsZero() {
			c.observeQueued(nil, c.now().Sub(hr.due))
			hr.due = time.Time{}
		}
	}
	if c.limits != nil {
		// The state's concurrency limit: a slot first, held until the
		// handler returns, or the object is put off.
		l, s, sctx, err := c.acquireSlot(ctx, obj, hr)
		if err != nil {
			return Result{}, 0, err
		}
		if s != nil {
			var sq converge.Queue
			if hr != nil {
				sq, _ = c.shared()
			}
			defer func() {
				if hr != nil {
					// The handler returned: nothing after it overruns a
					// lease (see keep).
					hr.running.Store(false)
				}
				l.release(sq, s)
			}()
			if s.stop != nil {
				// The slot's lease lost (not renewed in time) cancels the
				// handler as the object's would: a failure then is the
				// limit's, not the handler's.
				outer := ctx
				defer func() {
					if rerr != nil && outer.Err() == nil && s.ctx.Err() != nil {
						rerr = errLimited
					}
				}()
			}
			ctx = sctx
		}
	}
	// The monotonic clock: with time.Now it reads one clock where
	// time.Now reads two, and a handler run takes two readings.
	var start time.Duration
	if c.timed {
		start = c.mono()
	}
	// Registered for Cancel and the running handlers' gauges: a
	// replica's run when it was claimed, a worker's here. A worker's
	// start is stored before its entry, which says whether it runs (see
	// handlerRuns.running), so one store ends its run.
	var started *atomic.Int64
	if w != nil {
		if c.timed {
			w.started.Store(int64(start) + 1)
			w.obs.starting(c, start)
		}
		w.entry.Store(e) // the entry, not obj, which would escape to the heap
		defer w.entry.Store(nil)
	} else if c.timed {
		if run, ok := ctx.Value(runEntryKey{}).(*handlerCancel); ok {
			started = &run.started
			started.Store(int64(start) + 1)
		}
	}
	if w != nil && w.queued {
		if ready, ok := e.qi.ReadyAt(); ok {
			c.observeQueued(w, start-c.queueClock-ready)
		}
	}
	res, err := c.handle(ctx, *obj)
	if c.timed && started != nil {
		started.Store(0)
	}
	if err != nil && errors.Is(context.Cause(ctx), ErrCancelled) {
		err = context.Cause(ctx)
	}
	if c.timed {
		end := c.mono()
		if w != nil {
			w.end = end + 1
		}
		c.observeHandler(w, obj.State, end-start)
		return res, end, err
	}
	return res, 0, err
}

// settled says what follows a handler's verdict once it is stored.
type settled uint8

const (
	settledLater   settled = iota // run again after the returned delay
	settledAgain                  // transitioned: run again at once
	settledGone                   // deleted
	settledLimited                // a transition deferred by the entry rate: run again after the returned delay
)

// errVerdict means a handler returned a verdict that cannot be carried
// out (a transition without a next state); it counts as a handler error.
var errVerdict = errors.New("controller: transition without a next state")

// settle stores what the handler's res says about obj (read at
// obj.Version, entry e), fencing the write with token when it is not
// zero, and updates the controller's view. For settledLater it returns
// the delay before the object's next run. A store error is returned as is
// (nothing changed in the view); errVerdict means res is not valid.
func (c *Controller) settle(ctx context.Context, e *ctrlEntry, obj *Object, res Result, token uint64) (settled, time.Duration, error) {
	key := obj.Key
	switch res.Verdict {
	case VerdictTransition:
		if res.Next == "" {
			return 0, 0, errVerdict
		}
		var tok *rateToken
		if c.limits != nil && res.Next != obj.State {
			t, d, limited, err := c.enter(ctx, e, obj, res.Next, token)
			if limited || err != nil {
				return settledLimited, d, err
			}
			tok = t
		}
		now, mono := c.now(), c.mono()
		next := &Object{Key: key, State: res.Next, Since: now, Reason: res.Reason, Data: obj.Data, RecentFailures: obj.RecentFailures, Priority: obj.Priority, Watches: obj.Watches}
		if res.Data != nil {
			next.Data = slices.Clone(res.Data)
		}
		h := converge.HistoryEntry{At: now, From: string(obj.State), To: string(res.Next), Reason: res.Reason}
		pctx := ctx
		if tok != nil {
			// The write is due by the entry token's deadline.
			var cancel context.CancelFunc
			pctx, cancel = context.WithDeadline(ctx, tok.deadline)
			defer cancel()
		}
		v, err := c.put(pctx, next, obj.Version, token, h)
		if err != nil {
			return 0, 0, err
		}
		if tok != nil {
			tok.entered()
		}
		next.Version = v
		c.replace(e, next)
		c.histMoved(e, obj.Version, v, h)
		if obj.SLABreached {
			c.reportSLA(e, obj, now, false) // e is still anchored to obj.Since
		}
		c.anchorSLA(e, now, mono)
		return settledAgain, 0, nil
	case VerdictDeleted:
		now := c.now()
		err := c.cfg.Store.Delete(ctx, c.prefix+key, obj.Version, converge.HistoryEntry{At: now, From: string(obj.State), Reason: "deleted"})
		if err != nil && !errors.Is(err, converge.ErrStoreNotFound) {
			return 0, 0, err
		}
		c.forget(key, e)
		if err == nil && obj.SLABreached {
			c.reportSLA(e, obj, now, false)
		}
		return settledGone, 0, nil
	}
	// VerdictNoChange, VerdictWait: store what changed besides the state.
	failing := obj.Retries > 0 || !obj.FailingSince.IsZero()
	if res.Verdict == VerdictWait || res.Data != nil || len(obj.Intents) > 0 || failing {
		upd := *obj
		upd.History = nil
		upd.Intents = nil
		upd.Retries = 0
		upd.FailingSince = time.Time{}
		if res.Verdict == VerdictWait {
			upd.Reason = res.Reason
		}
		if res.Data != nil {
			upd.Data = slices.Clone(res.Data)
		}
		if upd.Reason != obj.Reason || res.Data != nil || len(obj.Intents) > 0 || failing {
			if err := c.rewrite(ctx, e, obj, &upd, token); err != nil {
				return 0, 0, err
			}
		}
	}
	d := res.RequeueAfter
	if d <= 0 {
		d = c.resync()
	}
	if until := c.untilSLA(e, obj); until >= 0 {
		// Look again when the SLA runs out, so a breach is seen on time.
		d = min(d, until)
	}
	return settledLater, d, nil
}

// The span of a handler run and its attributes (Config.Tracer).
const (
	SpanHandle   = "controller.handle"
	AttrKind     = "controller.kind"    // Config.Kind
	AttrState    = "controller.state"   // the object's lifecycle state
	AttrAttempt  = "controller.attempt" // 1, or 1 + the runs that failed in a row before
	AttrReplica  = "controller.replica" // Config.Owner, when set
	AttrOutcome  = converge.AttrOutcome // a Verdict's name, "error", "terminal" or "cancelled"
	OutcomeError = "error"
)

// handle runs the handler, turning a panic into an error, in a span of
// its own with a Tracer.
func (c *Controller) handle(ctx context.Context, obj Object) (Result, error) {
	t := c.cfg.Tracer
	if t == nil {
		return c.handleRun(ctx, obj)
	}
	attrs := []converge.SpanAttr{converge.StringAttr(AttrKind, c.cfg.Kind), converge.StringAttr(AttrState, string(obj.State)),
		converge.IntAttr(AttrAttempt, int64(obj.Retries)+1)}
	if c.cfg.Owner != "" {
		attrs = append(attrs, converge.StringAttr(AttrReplica, c.cfg.Owner))
	}
	ctx, sp := t.Start(ctx, SpanHandle, attrs...)
	res, err := c.handleRun(ctx, obj)
	switch {
	case err != nil && errors.Is(context.Cause(ctx), ErrCancelled):
		sp.SetAttrs(converge.StringAttr(AttrOutcome, "cancelled"))
		sp.End(nil) // asked for, not a failure
	case err != nil && errors.Is(err, ErrTerminal):
		sp.SetAttrs(converge.StringAttr(AttrOutcome, "terminal"))
		sp.End(err)
	case err != nil:
		sp.SetAttrs(converge.StringAttr(AttrOutcome, OutcomeError))
		sp.End(err)
	default:
		sp.SetAttrs(converge.StringAttr(AttrOutcome, res.Verdict.String()))
		sp.End(nil)
	}
	return res, err
}

// handleRun runs the handler, turning a panic into an error.
func (c *Controller) handleRun(ctx context.Context, obj Object) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &converge.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return c.cfg.Handler.Handle(ctx, obj)
}

func (c *Controller) resync() time.Duration {
	d := c.cfg.Resync
	if c.cfg.ResyncJitter > 0 {
		d += time.Duration(float64(d) * c.cfg.ResyncJitter * rand.Float64())
	}
	return d
}

// fail counts an error of obj and retries it with backoff.
func (c *Controller) fail(q *workqueue.Queue[ctrlEntry], key string, obj *Object) {
	c.metrics.Add(MetricErrors, 1, c.cfg.Kind, string(obj.State))
	c.metrics.Add(MetricRetries, 1, c.cfg.Kind)
	q.AddRateLimited(key)
}

// storeFailed handles a failed write: a stale version means someone else
// wrote, so read again and run at once (it returns 0); any other error may
// or may not have been written, so read again after a backoff (it returns
// -1, having queued the key with backoff).
func (c *Controller) storeFailed(q *workqueue.Queue[ctrlEntry], key string, e *ctrlEntry, obj *Object, err error) time.Duration {
	e.flags.Or(entryReload)
	if errors.Is(err, converge.ErrStoreStale) {
		return 0
	}
	c.fail(q, key, obj)
	return -1
}

// replace installs next in e and accounts for what changed since the
// object it replaces: its state, and its halt.
func (c *Controller) replace(e *ctrlEntry, next *Object) {
	prev := e.swap(next)
	if (prev.Halted != "" || next.Halted != "") && (prev.Halted != next.Halted || prev.State != next.State) {
		c.countHalt(&prev, -1)
		c.countHalt(next, 1)
	}
	if prev.State == next.State && prev.Since.Equal(next.Since) {
		return
	}
	kind, from, to := c.cfg.Kind, string(prev.State), string(next.State)
	if e.flags.Load()&entryAboveSLA != 0 {
		e.flags.And(^entryAboveSLA)
		c.metrics.Add(MetricAboveSLA, -1, kind, from)
	}
	if prev.State != next.State {
		c.metrics.Add(MetricObjects, -1, kind, from)
		c.metrics.Add(MetricObjects, 1, kind, to)
	}
	c.exited(&prev, next.Since)
	c.metrics.Add(MetricStateEntered, 1, kind, to)
}

// exited counts obj leaving its state at t.
func (c *Controller) exited(obj *Object, t time.Time) {
	state := string(obj.State)
	c.metrics.Add(MetricStateExited, 1, c.cfg.Kind, state)
	c.metrics.Observe(MetricTimeInState, t.Sub(obj.Since).Seconds(), c.cfg.Kind, state)
}

// countHalt adds delta to the count of halted objects for obj, when it is
// halted.
func (c *Controller) countHalt(obj *Object, delta int) {
	if obj.Halted == "" {
		return
	}
	if obj.Halted == HaltTerminal || obj.Halted == HaltCancelled {
		c.terminal.Add(int64(delta))
	}
	c.metrics.Add(MetricHalted, float64(delta), c.cfg.Kind, string(obj.State), string(obj.Halted))
}

// forget drops a deleted object from the view.
func (c *Controller) forget(key string, e *ctrlEntry) {
	e.flags.Or(entryGone)
	c.mu.Lock()
	known := c.objs[key] == e
	if known {
		delete(c.objs, key)
	}
	c.mu.Unlock()
	if !known {
		return // forgotten already
	}
	obj := e.load()
	kind := c.cfg.Kind
	if e.flags.Load()&entryAboveSLA != 0 {
		c.metrics.Add(MetricAboveSLA, -1, kind, string(obj.State))
	}
	c.countHalt(&obj, -1)
	c.metrics.Add(MetricObjects, -1, kind, string(obj.State))
	c.exited(&obj, c.now())
}
