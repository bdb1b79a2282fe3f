package controller

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge"
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

	if c.load(ctx, nil) != nil {
		return nil // cancelled while loading: nothing runs yet, a clean stop
	}
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	w := &watch{sq: sq, prefix: c.prefix, fn: func(string) { poke() }}
	w.start(ctx)
	defer w.stop()
	rescanned := make(chan struct{})
	go func() {
		defer close(rescanned)
		c.rescanWith(ctx, nil, func() { w.start(ctx) })
	}()
	defer func() { <-rescanned }()

	// Claims wait in work until a worker takes them; the fetcher claims
	// again when at least Workers places are free, so claims come in
	// batches even when handlers are quick.
	n := c.cfg.Workers
	work := make(chan converge.Claimed, 2*n)
	var outstanding atomic.Int64 // claimed and not finished
	// waiting is the number of claims in work, for MetricQueueDepth: it
	// changes and is reported under depthMu, so the gauge ends at the
	// last value.
	var depthMu sync.Mutex
	waiting := 0
	addWaiting := func(delta int) {
		depthMu.Lock()
		waiting += delta
		c.metrics.Set(MetricQueueDepth, float64(waiting), c.cfg.Kind)
		depthMu.Unlock()
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for cl := range work {
				addWaiting(-1)
				if hctx.Err() != nil || ctx.Err() != nil {
					// Stopping: hand the object back for another replica.
					c.finish(sq, cl.Lease, c.now())
				} else {
					c.runClaimed(hctx, sq, cl)
				}
				outstanding.Add(-1)
				poke()
			}
		})
	}

	poll := time.NewTimer(c.cfg.Poll)
	defer poll.Stop()
	for failures := 0; ctx.Err() == nil; {
		free := 2*n - int(outstanding.Load())
		if free >= n {
			claimed, err := sq.ClaimDue(ctx, c.prefix, c.cfg.Owner, c.cfg.LeaseTTL, free)
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
					work <- cl
				}
				if len(claimed) == free {
					continue // there may be more due
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
	return c.waitHandlers(finished, cancelHandlers)
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

// runClaimed handles one claimed object: the handler runs (again at once
// after each transition, up to maxRounds) with the object's lease renewed
// while it runs, every write is fenced by the lease's token, and the
// lease is finished with the time the object is due next.
func (c *Controller) runClaimed(ctx context.Context, sq converge.Queue, cl converge.Claimed) {
	lease := cl.Lease
	obj, err := c.decode(cl.Record)
	if err != nil {
		// A record we cannot read is not ours to fix: count it and look
		// again at the next periodic pass.
		c.metrics.Add(MetricErrors, 1, c.cfg.Kind, "")
		c.finish(sq, lease, c.now().Add(c.resync()))
		return
	}
	e := c.view(obj)
	cur := e.load()
	obj = &cur
	hctx, lost := c.keep(ctx, sq, lease)
	defer lost(nil)
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
		case how == stepLater, how == stepFailed, how == stepHalted && d >= 0:
			e.fails.Store(0)
			next = c.now().Add(d)
		case how == stepHalted:
			e.fails.Store(0)
			next = time.Time{} // not due until woken (Enqueue, Request, Release)
		case errors.Is(err, converge.ErrLeaseLost):
			return // someone else holds the object now
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
	lost(nil)
	c.finish(sq, lease, next)
}

// finish ends lease with the object due at next; a lease lost meanwhile
// needs nothing, and any other failure leaves the lease to expire, after
// which any replica takes the object over.
func (c *Controller) finish(sq converge.Queue, lease converge.Lease, next time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.LeaseTTL)
	defer cancel()
	_ = sq.Finish(ctx, lease, next)
}

// keep renews lease while the handler runs, from half its duration on,
// and cancels the returned context when the lease is lost. The returned
// function stops the renewal; it may be called more than once.
func (c *Controller) keep(ctx context.Context, sq converge.Queue, lease converge.Lease) (context.Context, func(error)) {
	hctx, cancel := context.WithCancelCause(ctx)
	ttl := c.cfg.LeaseTTL
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	renew := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		l, err := sq.Claim(hctx, lease.Key, c.cfg.Owner, ttl)
		switch {
		case err == nil && l.Token == lease.Token:
			t.Reset(ttl / 2)
		case err == nil:
			// The lease expired and was claimed anew: someone may have
			// handled the object in between. Give the new lease back,
			// or the object would stay held by nobody at work on it.
			_ = sq.Release(context.WithoutCancel(hctx), l)
			cancel(converge.ErrLeaseLost)
		case errors.Is(err, converge.ErrClaimHeld):
			cancel(converge.ErrLeaseLost)
		case hctx.Err() == nil:
			t.Reset(ttl / 8) // the store failed: try again soon
		}
	}
	mu.Lock()
	t = time.AfterFunc(ttl/2, renew)
	mu.Unlock()
	return hctx, func(error) {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		cancel(nil)
	}
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
