package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/errtext"
)

// maxRounds bounds the transitions one claim runs in a row before the
// object goes back to the shared queue, so one busy object cannot hold a
// worker (and its lease) for ever.
const maxRounds = 16

// runShared is Run for a controller that shares its store with other
// replicas (Config.Owner set): the store's queue, not an in-memory one,
// says which object runs next, and a lease hands each object to one
// replica at a time.
func (c *Controller) runShared(ctx context.Context, sq converge.Queue) error {
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	if c.timed {
		defer c.publish(true)
	}
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	w := &watch{sq: sq, prefix: c.prefix, fn: func(key string) { c.heard(hctx, key); poke() }}
	w.start(ctx)
	defer w.stop()
	rescanned := make(chan struct{})
	go func() {
		defer close(rescanned)
		// The view of every stored object is loaded while the replica
		// works: the store's queue, not the view, says what runs, so the
		// first object is handled without waiting for a list of them all.
		if c.load(ctx, nil) != nil {
			return // cancelled while loading
		}
		c.rescanWith(ctx, nil, func() { w.start(ctx) })
	}()
	defer func() { <-rescanned }()
	reported := make(chan struct{})
	go func() { defer close(reported); c.reportRunning(ctx) }()
	defer func() { <-reported }()

	// Claims wait in work until a goroutine takes them, one goroutine
	// for each of the 4×Workers objects that may be held at once;
	// Workers handler slots (slots) bound the handlers that run, and an
	// object holds a slot only while its handler runs. The fetcher claims
	// 2×Workers objects once none it holds waits to start and it holds at
	// most 2×Workers (renewWaiting covers the wait). docs/internals.md
	// ("A replica's slots and claims") gives the reasons.
	n := c.cfg.Workers
	work := make(chan claim, 4*n)
	var outstanding atomic.Int64 // claimed and not finished
	// waiting is the number of claimed objects whose handler has not
	// started, for MetricQueueDepth: it changes and is reported under
	// depthMu, so the gauge ends at the last value.
	var depthMu sync.Mutex
	waiting := 0
	addWaiting := func(delta int) {
		depthMu.Lock()
		waiting += delta
		c.metrics.Set(MetricQueueDepth, float64(waiting), c.cfg.Kind)
		depthMu.Unlock()
	}
	// An object that starts may let the fetcher claim again.
	slots := &handlerSlots{ch: make(chan struct{}, n), stop: ctx.Done(), started: func() { addWaiting(-1); poke() }}
	// running holds the keys being handled: a key claimed twice (a store
	// that hands out a key again while it is held, or a batch naming it
	// twice) is never handled twice at once by this replica.
	var runningMu sync.Mutex
	running := map[string]bool{}
	var wg sync.WaitGroup
	// finishing holds the Finish calls on their way: a worker does not
	// wait for them (see finish), Run does before it returns.
	var finishing sync.WaitGroup
	// turn makes the objects start in the order they were claimed (the
	// order they were due): a worker holds it (a place in the channel)
	// from taking a claim until the object's first handler run has its
	// slot, or needs none. A channel, not a mutex: a goroutine waiting
	// for it waits durably, as testing/synctest needs.
	turn := make(chan struct{}, 1)
	for range 4 * n {
		wg.Go(func() {
			for {
				turn <- struct{}{}
				cl, ok := <-work
				if !ok {
					<-turn
					return
				}
				key := cl.Lease.Key
				runningMu.Lock()
				busy := running[key]
				running[key] = true
				runningMu.Unlock()
				hr := &handlerRun{slots: slots, turn: turn}
				switch {
				case busy:
					// Handled by another worker right now: leave this claim.
				case hctx.Err() != nil || ctx.Err() != nil:
					// Stopping: hand the object back for another replica.
					c.finish(&finishing, sq, cl.Lease, c.now())
				default:
					asked := cl.asked
					if time.Since(asked) >= c.cfg.RenewDeadline/2 {
						// Waited for its turn until the lease needs
						// renewing: renew it before going on, or leave it.
						// (Once its turn comes, keep renews it.)
						var ok bool
						if asked, ok = c.renewWaiting(hctx, sq, cl.Lease); !ok {
							break
						}
					}
					c.runClaimed(cl.ctx, sq, cl.Claimed, asked, &finishing, hr)
				}
				cl.done()
				if hr.endTurn() {
					addWaiting(-1) // ended without its handler running
				}
				if !busy {
					runningMu.Lock()
					delete(running, key)
					runningMu.Unlock()
				}
				outstanding.Add(-1)
				poke()
			}
		})
	}

	poll := time.NewTimer(c.cfg.Poll)
	defer poll.Stop()
	for failures := 0; ctx.Err() == nil; {
		depthMu.Lock()
		started := waiting == 0
		depthMu.Unlock()
		if want := 2 * n; started && outstanding.Load() <= int64(want) {
			asked := time.Now()
			claimed, err := sq.ClaimDue(ctx, c.prefix, c.cfg.Owner, c.cfg.LeaseTTL, want)
			switch {
			case err != nil && ctx.Err() != nil:
			case err != nil:
				failures++
				c.metrics.Add(MetricErrors, 1, c.cfg.Kind, "")
				sleep(ctx, c.cfg.Backoff.Delay(failures, rand.Float64()))
				continue // the loop ends if ctx ended meanwhile
			default:
				failures = 0
				outstanding.Add(int64(len(claimed)))
				if len(claimed) > 0 {
					c.metrics.Add(MetricQueueAdds, float64(len(claimed)), c.cfg.Kind)
					addWaiting(len(claimed)) // before a worker takes one
				}
				for _, cl := range claimed {
					// Registered for Cancel from the claim on: a cancel
					// heard while the object waits to start ends its run
					// before it starts.
					rctx, done := c.runs.start(hctx, strings.TrimPrefix(cl.Lease.Key, c.prefix))
					work <- claim{cl, asked, rctx, done}
				}
				if len(claimed) == want {
					continue // there may be more due, once these start
				}
			}
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(c.cfg.Poll)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-poll.C:
		}
	}
	close(work)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	err := c.waitHandlers(finished, cancelHandlers)
	finishing.Wait() // every worker has returned: no Finish starts any more
	c.releasing.Wait()
	return err
}

// claim is a claimed object waiting for a goroutine to handle it, with the time (on the
// monotonic clock) when the ClaimDue that claimed it started: the renew
// deadline counts from there.
type claim struct {
	converge.Claimed
	asked time.Time
	// ctx is the replica's handler context for this object, which a
	// Cancel of it cancels; done unregisters it.
	ctx  context.Context
	done func()
}

// renewWaiting renews lease, claimed a while ago and not started yet,
// and returns when the renewal started; false when the lease lapsed (it
// expired, or another owner holds the key) or the store did not answer
// within the renew deadline, which leaves the lease to expire. A lease
// renewed with its own token never lapsed, however long ago it was
// claimed, so nobody else can have handled the object meanwhile.
//
// A renewal that returns another token found the old lease lapsed, and
// the lease it returns is left to expire, never given back (Release):
// Claim renews whatever lease the owner holds, and one owner name covers
// every worker of the replica, so when the lapsed claim waited while the
// replica claimed the object again, the lease returned is that newer
// claim, which another worker handles or is about to. Releasing it would
// let another replica take the object while that worker handles it. A
// lease the renewal made itself costs at most one LeaseTTL before the
// object is due again. keep does the same.
func (c *Controller) renewWaiting(ctx context.Context, sq converge.Queue, lease converge.Lease) (time.Time, bool) {
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RenewDeadline)
	defer cancel()
	l, err := sq.Claim(rctx, lease.Key, c.cfg.Owner, c.cfg.LeaseTTL)
	if err == nil && l.Token == lease.Token {
		return start, true
	}
	return time.Time{}, false
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// runClaimed handles one claimed object, whose lease the store call
// started at asked gave: the handler runs (again at once after each
// transition, up to maxRounds) with the object's lease renewed while it
// runs, every write is fenced by the lease's token, and the lease is
// finished with the time the object is due next, in the background on
// finishing (see finish). A lease lost (not
// renewed by the renew deadline, or held by another owner) cancels the
// handler and ends the run with nothing more written.
func (c *Controller) runClaimed(ctx context.Context, sq converge.Queue, cl converge.Claimed, asked time.Time, finishing *sync.WaitGroup, hr *handlerRun) {
	lease := cl.Lease
	e := c.viewClaimed(cl.Record)
	if e == nil {
		// A record we cannot read is not ours to fix: count it and look
		// again at the next periodic pass.
		c.metrics.Add(MetricErrors, 1, c.cfg.Kind, "")
		c.finish(finishing, sq, lease, c.now().Add(c.resync()))
		return
	}
	if cl.HasHistory {
		c.histClaimed(e, cl.Record.Version, cl.History)
	}
	if c.timed {
		hr.due = cl.Due
	}
	cur := e.load()
	obj := &cur
	hctx, stop := c.keep(ctx, sq, lease, asked, obj.State, hr)
	defer stop()
	var next time.Time
	for round := 1; ; round++ {
		how, d, err := c.step(hctx, e, obj, lease.Token)
		switch {
		case how == stepAgain && round < maxRounds:
			e.fails.Store(0)
			cur = e.load()
			obj = &cur
			continue
		case how == stepAgain:
			e.fails.Store(0)
			next = c.now()
		case how == stepGone:
			next = time.Time{}
		case how == stepLimited:
			// Put off by a limit, with no handler time in between: the
			// delay counts on the store's clock (read from the lease), so
			// a replica whose clock is behind the store's does not make
			// the object due at once again and again.
			e.fails.Store(0)
			next = lease.Expires.Add(time.Since(asked) - c.cfg.LeaseTTL + d)
		case how == stepLater, how == stepFailed, how == stepHalted && d >= 0:
			e.fails.Store(0)
			next = c.now().Add(d)
		case how == stepHalted:
			e.fails.Store(0)
			next = time.Time{} // not due until woken (Enqueue, Request, Release)
		case errors.Is(err, converge.ErrLeaseLost):
			return // someone else holds the object now
		case errors.Is(err, ErrCancelled):
			// Halted by the cancel: not due, unless the cancel's Schedule
			// (which Finish keeps) makes it due to be found halted.
			next = time.Time{}
		case errors.Is(err, errStopping):
			next = c.now() // hand it back: another replica takes it at once
		case hctx.Err() != nil && ctx.Err() == nil:
			return // the lease was lost while the handler ran
		case errors.Is(err, converge.ErrStoreStale):
			// Written by someone else (an intent): read it again and
			// run the handler on what is stored.
			rec, gerr := c.cfg.Store.Get(hctx, cl.Record.Key)
			if gerr == nil {
				if fresh, derr := c.decode(rec); derr == nil && round < maxRounds {
					c.replace(e, fresh)
					obj = fresh
					continue
				}
			}
			next = c.now()
		default:
			// The store failed, or the controller is stopping: try again
			// after a backoff.
			fails := int(e.fails.Add(1))
			c.metrics.Add(MetricErrors, 1, c.cfg.Kind, string(obj.State))
			c.metrics.Add(MetricRetries, 1, c.cfg.Kind)
			next = c.now().Add(c.cfg.Backoff.Delay(fails, rand.Float64()))
		}
		break
	}
	stop()
	if errors.Is(context.Cause(hctx), converge.ErrLeaseLost) {
		return // lost after the last write: write nothing more
	}
	c.finish(finishing, sq, lease, next)
}

// histClaimed keeps h, the newest history entries that the claim of
// version v of e's object returned with it, as the entry's copy, so that
// the handler's input costs no History call: when h holds the
// HandlerHistory entries the handler sees, or the whole history (fewer
// than converge.ClaimHistoryEntries entries).
func (c *Controller) histClaimed(e *ctrlEntry, v uint64, h []converge.HistoryEntry) {
	n := c.cfg.HandlerHistory
	if n == 0 || len(h) < n && len(h) >= converge.ClaimHistoryEntries {
		return
	}
	h = slices.Clone(h[max(len(h)-n, 0):])
	e.mu.Lock()
	e.hist, e.histAt = h, v
	e.mu.Unlock()
}

// finish ends lease with the object due at next, in the background (on
// finishing): the worker is free for the next object at once. The lease
// is held until the Finish commits, so no replica (this one included)
// claims the object before; a Finish that fails or never commits (the
// replica dies) leaves the lease to expire, after which any replica
// takes the object over and runs its handler again (at least once). A
// lease lost meanwhile needs nothing.
func (c *Controller) finish(finishing *sync.WaitGroup, sq converge.Queue, lease converge.Lease, next time.Time) {
	finishing.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.LeaseTTL)
		defer cancel()
		_ = sq.Finish(ctx, lease, next)
	})
}

// keep renews lease while the handler runs and cancels the returned
// context when the lease is lost: found held by another owner, or not
// renewed by the renew deadline (Config.RenewDeadline), counted on the
// monotonic clock from asked, the start of the last store call that
// claimed or renewed the lease. Each renewal is bounded by the deadline,
// so a store that hangs cannot hold it back. The returned function stops
// the renewal and cancels the context; it may be called more than once.
// A handler still running when its lease may have expired, after a lost
// lease cancelled its context, is reported (MetricHandlerOverruns).
func (c *Controller) keep(ctx context.Context, sq converge.Queue, lease converge.Lease, asked time.Time, state State, hr *handlerRun) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(ctx)
	hctx = context.WithValue(hctx, handlerRunKey{}, hr)
	ttl, deadline := c.cfg.LeaseTTL, c.cfg.RenewDeadline
	done := make(chan struct{})
	stopped := make(chan struct{})
	// The renewals start when the first one is due, half the deadline
	// after asked, on the goroutine of that timer: a handler that returns
	// before (most do) costs one timer, and no goroutine.
	renew := func() {
		defer close(stopped)
		var overrun *time.Timer
		defer func() {
			if overrun != nil {
				overrun.Stop()
			}
		}()
		// lost cancels the handler with cause, and watches for a handler
		// that goes on until the lease may have expired.
		lost := func(cause error) {
			cancel(cause)
			// The lease may expire TTL after the last renewal asked; a
			// lease found held by another owner has expired already, so
			// the handler gets the time between deadline and TTL to return.
			overrun = time.AfterFunc(max(time.Until(asked.Add(ttl)), ttl-deadline), func() {
				if hr.running.Load() {
					c.overran(lease.Key, state)
				}
			})
		}
		expire := time.NewTimer(time.Until(asked.Add(deadline)))
		defer expire.Stop()
		wait := time.NewTimer(0) // the first renewal is due
		defer wait.Stop()
		for {
			select {
			case <-done:
				return
			case <-expire.C:
				lost(fmt.Errorf("controller: lease on %s not renewed within %s: %w", lease.Key, deadline, errtext.Bare(converge.ErrLeaseLost, "converge: ")))
				<-done
				return
			case <-wait.C:
			}
			start := time.Now()
			rctx, rcancel := context.WithDeadline(hctx, asked.Add(deadline))
			l, err := sq.Claim(rctx, lease.Key, c.cfg.Owner, ttl)
			rcancel()
			switch {
			case hctx.Err() != nil:
				// Stopped, or the deadline passed during the call: the
				// next turn of the loop tells which.
				wait.Reset(time.Until(asked.Add(deadline)))
			case err == nil && l.Token == lease.Token:
				asked = start
				expire.Reset(time.Until(asked.Add(deadline)))
				wait.Reset(time.Until(asked.Add(deadline / 2)))
			case err == nil:
				// The lease expired and was claimed anew: someone may have
				// handled the object in between. The new lease is left to
				// expire, not released: it may be this replica's own newer
				// claim (see renewWaiting).
				lost(converge.ErrLeaseLost)
				<-done
				return
			case errors.Is(err, converge.ErrClaimHeld):
				lost(converge.ErrLeaseLost)
				<-done
				return
			default:
				wait.Reset(deadline / 10) // the store failed: try again soon
			}
		}
	}
	first := time.AfterFunc(time.Until(asked.Add(deadline/2)), renew)
	var once sync.Once
	return hctx, func() {
		once.Do(func() {
			if !first.Stop() {
				// The renewals started: end them.
				close(done)
				<-stopped
			}
			cancel(nil)
		})
	}
}

// handlerRunKey is the context key of the *handlerRun that keep gives a
// claimed object's handler context.
type handlerRunKey struct{}

// errStopping means that a claimed object's handler did not start
// because the replica is stopping: the object is handed back.
var errStopping = errors.New("controller: stopping")

// handlerSlots bounds the handlers that a replica runs at once
// (Config.Workers), whatever the number of objects it holds.
type handlerSlots struct {
	ch chan struct{} // a place for each handler running
	// stop is closed when Run's context ends: no handler starts after.
	stop <-chan struct{}
	// started is called when an object's first handler run gets a slot
	// (MetricQueueDepth counts the objects waiting for it).
	started func()
}

// handlerRun is one claimed object's use of its replica's handler slots,
// which keep gives its handler context (handlerRunKey): Controller.run
// enters before the handler runs and leaves after. A handler holds a slot
// only while it runs, not while what it returned is written.
type handlerRun struct {
	slots   *handlerSlots
	running atomic.Bool // the handler runs (keep's overrun watch reads it)
	// turn is the replica's turn to start an object, held until the
	// object's first handler run has its slot (nil after): objects start
	// in the order they were claimed. It is used on the goroutine of the
	// worker that handles the object, where its handler runs are.
	turn chan struct{}
	// due is when the object became due (converge.Claimed.Due), for
	// MetricQueueDuration, observed when its first handler run gets its
	// slot; zero after, or when unknown.
	due time.Time
}

// endTurn gives the replica's turn to start an object back, if this
// object still holds it, and tells whether it did: the object's handler
// never got a slot.
func (r *handlerRun) endTurn() bool {
	if r.turn == nil {
		return false
	}
	<-r.turn
	r.turn = nil
	return true
}

// enter waits for a handler slot and marks the handler running. It
// returns errStopping, starting nothing, once the replica is stopping,
// and ctx's cause when ctx ends first (the lease was lost).
func (r *handlerRun) enter(ctx context.Context) error {
	select {
	case <-r.slots.stop:
		return errStopping
	default:
	}
	select {
	case r.slots.ch <- struct{}{}:
	case <-r.slots.stop:
		return errStopping
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if r.endTurn() {
		r.slots.started()
	}
	r.running.Store(true)
	return nil
}

// leave marks the handler returned and frees its slot.
func (r *handlerRun) leave() {
	r.running.Store(false)
	<-r.slots.ch
}

// overran reports a handler of key, in state, that was cancelled when its
// lease was lost and is still running when the lease may have expired.
func (c *Controller) overran(key string, state State) {
	c.metrics.Add(MetricHandlerOverruns, 1, c.cfg.Kind, string(state))
	if c.log != nil {
		c.log.LogAttrs(context.Background(), slog.LevelError, "controller: handler ignored its cancelled context after its lease was lost; another replica may run the object too",
			slog.String("controller", c.cfg.Kind), slog.String("key", strings.TrimPrefix(key, c.prefix)), slog.String("state", string(state)))
	}
}

// viewClaimed returns the entry of rec, a record that a claim read, with
// rec installed in it unless the view holds that version of the object
// or a newer one already: the handler runs on the view's object, so rec
// is decoded only when the view does not have it (view would keep the
// entry's object then too). It returns nil when rec must be decoded and
// cannot be.
func (c *Controller) viewClaimed(rec converge.StoreRecord) *ctrlEntry {
	c.mu.RLock()
	e := c.objs[strings.TrimPrefix(rec.Key, c.prefix)]
	c.mu.RUnlock()
	if e != nil && e.version() >= rec.Version {
		return e
	}
	obj, err := c.decode(rec)
	if err != nil {
		return nil
	}
	return c.view(obj)
}

// view installs obj, read from the store, in the controller's view of the
// objects and returns its entry.
func (c *Controller) view(obj *Object) *ctrlEntry {
	c.mu.RLock()
	e := c.objs[obj.Key]
	c.mu.RUnlock()
	if e == nil {
		c.adopt(obj, false)
		return c.entry(obj.Key)
	}
	if old := e.load(); old.Version < obj.Version {
		c.replace(e, obj)
	}
	return e
}

// watch keeps a Queue.Watch running, starting it again when it could not
// be started.
type watch struct {
	sq     converge.Queue
	prefix string
	fn     func(string)

	mu      sync.Mutex
	stopper func()
}

func (w *watch) start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopper != nil || ctx.Err() != nil {
		return
	}
	if stop, err := w.sq.Watch(ctx, w.prefix, w.fn); err == nil {
		w.stopper = stop
	}
}

func (w *watch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopper != nil {
		w.stopper()
		w.stopper = nil
	}
}
