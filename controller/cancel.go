package controller

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge"
)

// ReasonCancelled is the Reason of the history entry of a cancel (Cancel,
// Controller.Cancel); its By names who asked.
const ReasonCancelled = "cancelled"

// HaltCancelled means someone cancelled the object (Cancel,
// Controller.Cancel): its running handler's context was cancelled and the
// handler is not run again until Controller.Enqueue, Controller.Request
// or Release wakes the object.
const HaltCancelled Halt = "cancelled"

// ErrCancelled is the cause of the context of a handler whose object was
// cancelled (context.Cause returns an error matching it).
var ErrCancelled = errors.New("controller: object cancelled")

// Cancel cancels the stored object of kind under key in store without a
// Controller at hand (an operator's command line, a page in another
// process): the object is halted (Object.Halted is HaltCancelled) and
// its history gets an entry with Reason ReasonCancelled and By by, the
// identity of who asked, in the same write. When the store is a
// converge.Queue the object is then made due, which the store's watch
// announces: the replica running the object's handler (Config.Owner set),
// in this process or another one, cancels the handler's context with
// cause ErrCancelled as soon as it hears of it, and writes nothing the
// handler returns. A controller on its own (no Owner) learns of it when
// it lists the store next; Controller.Cancel cancels its handler at once.
// Cancelling an object cancelled already changes nothing.
//
// It fails with an *ObjectError: ErrObjectNotFound for a key that is not
// stored, ErrObjectInvalid for an empty key, a kind that is empty or holds
// '/', or a nil store, or the store's error. The entry is stamped with
// time.Now.
func Cancel(ctx context.Context, store converge.Store, kind, key, by string) error {
	_, err := cancelObject(ctx, store, kind, key, by, time.Now())
	return err
}

// Cancel cancels the object key as the package's Cancel does, by by (the
// identity of who asks, stored in the history entry's By), and cancels
// its handler at once when this controller is running it; a controller
// on its own reads the object again at once, so that its view (Get,
// Objects) shows it halted.
func (c *Controller) Cancel(ctx context.Context, key, by string) error {
	changed, err := cancelObject(ctx, c.cfg.Store, c.cfg.Kind, key, by, c.now())
	if err != nil {
		return err
	}
	if e := c.entry(key); e != nil && changed {
		e.flags.Or(entryReload)
	}
	c.runs.cancel(key)
	if q := c.q.Load(); q != nil && changed {
		q.Add(key) // read again, and found halted
	}
	return nil
}

// cancelObject halts the object of kind under key at now as Cancel does,
// and reports whether it stored anything.
func cancelObject(ctx context.Context, store converge.Store, kind, key, by string, now time.Time) (bool, error) {
	return changeHalt(ctx, store, kind, key, now, func(obj *Object) (converge.HistoryEntry, bool) {
		if obj.Halted == HaltCancelled {
			return converge.HistoryEntry{}, false
		}
		if obj.Halted != "" {
			// Halted already (quarantined, terminal): it stays so, under
			// the cancel, until woken.
			obj.Retries = 0
		}
		obj.Halted = HaltCancelled
		return converge.HistoryEntry{At: now, From: string(obj.State), To: string(obj.State), Reason: ReasonCancelled, By: by}, true
	})
}

// handlerRuns holds what a cancel needs to reach the handlers running:
// a replica's claims by key (registered when claimed, see start), and the
// workers of a controller on its own (see worker), whose registration
// costs two atomic stores per handler run, not a context.
type handlerRuns struct {
	mu      sync.Mutex
	runs    map[string]*handlerCancel
	workers []*workerSlot // appended to as workers start
}

// handlerCancel is one registered run: its cancel function, and when its
// handler started.
type handlerCancel struct {
	cancel context.CancelCauseFunc
	// started is the monotonic reading (Controller.mono) when the
	// handler started, plus one; 0 while it does not run. Set only when
	// the controller has metrics.
	started atomic.Int64
}

// runEntryKey is the context key of the *handlerCancel of a run.
type runEntryKey struct{}

// start returns a context for the handler of key, derived from ctx, that
// a cancel of key cancels, and the function to call when it returns. A
// key registered twice (a claim of a key being handled) is cancelled
// through its newest registration.
func (r *handlerRuns) start(ctx context.Context, key string) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(ctx)
	mine := &handlerCancel{cancel: cancel}
	hctx = context.WithValue(hctx, runEntryKey{}, mine)
	r.mu.Lock()
	if r.runs == nil {
		r.runs = map[string]*handlerCancel{}
	}
	r.runs[key] = mine
	r.mu.Unlock()
	return hctx, func() {
		r.mu.Lock()
		if r.runs[key] == mine {
			delete(r.runs, key)
		}
		r.mu.Unlock()
		cancel(nil)
	}
}

// workerSlot is one worker of a controller on its own: the context its
// handler runs get (cancelled by a cancel of the object it runs, then
// made anew), and the object whose handler runs now.
type workerSlot struct {
	parent context.Context
	mu     sync.Mutex // held to cancel, and to make ctx anew
	ctx    context.Context
	cancel context.CancelCauseFunc
	// cancelled says a cancel ended ctx: the worker makes it anew.
	cancelled atomic.Bool
	// entry is the entry of the object whose handler runs, nil between
	// runs.
	entry atomic.Pointer[ctrlEntry]
	// started is the monotonic reading when the worker's handler
	// started, plus one, stored before entry and kept after the run: it
	// tells when the run started only while entry is not nil.
	started atomic.Int64
	// queued says the worker's handler runs observe their queue
	// duration from their start reading (see Controller.run).
	queued bool
	// end is the monotonic reading when the worker's last handler run
	// returned, plus one; 0: none since the worker last used it. Only
	// the worker touches it.
	end time.Duration
	// obs holds what the worker's runs report until it hands it over
	// (see workerObs). Only the worker touches it.
	obs workerObs
}

// workerSlotKey is the context key of a worker's *workerSlot.
type workerSlotKey struct{}

// worker returns the slot of a new worker whose handlers' contexts
// derive from parent. Call it before the workers start.
func (r *handlerRuns) worker(parent context.Context) *workerSlot {
	w := &workerSlot{parent: parent}
	w.renew()
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
	return w
}

// renew makes the slot's context anew.
func (w *workerSlot) renew() {
	w.mu.Lock()
	defer w.mu.Unlock()
	ctx, cancel := context.WithCancelCause(w.parent)
	w.ctx, w.cancel = context.WithValue(ctx, workerSlotKey{}, w), cancel
}

// context returns the context for the worker's next object, made anew
// when a cancel ended the last one. Only the worker calls it.
func (w *workerSlot) context() context.Context {
	if w.cancelled.Load() {
		w.cancelled.Store(false)
		w.renew()
	}
	return w.ctx
}

// running returns, at the monotonic reading now, how many handlers run,
// how long they have run added up, and the longest.
func (r *handlerRuns) running(now time.Duration) (n int, total, longest time.Duration) {
	add := func(s int64) {
		if s != 0 {
			d := max(now-time.Duration(s-1), 0)
			n, total, longest = n+1, total+d, max(longest, d)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, run := range r.runs {
		add(run.started.Load())
	}
	for _, w := range r.workers {
		if w.entry.Load() != nil { // stored after started: see Controller.run
			add(w.started.Load())
		}
	}
	return n, total, longest
}

// registered reports whether a replica's claim of key is registered: its
// handler runs, or its object is claimed and waits to start.
func (r *handlerRuns) registered(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.runs[key]
	return ok
}

// cancel cancels the running handler of key, if any, with ErrCancelled.
func (r *handlerRuns) cancel(key string) {
	r.mu.Lock()
	run := r.runs[key]
	workers := r.workers
	r.mu.Unlock()
	if run != nil {
		run.cancel(ErrCancelled)
	}
	for _, w := range workers {
		if e := w.entry.Load(); e != nil && e.qi.Key == key {
			w.mu.Lock()
			if w.entry.Load() == e { // still that object's run
				w.cancel(ErrCancelled)
				w.cancelled.Store(true)
			}
			w.mu.Unlock()
		}
	}
}

// heard is called with a key the store's watch announced: when this
// replica runs the key's handler, it reads the object and cancels the
// handler if the object was cancelled. It does not block the watch.
func (c *Controller) heard(ctx context.Context, rkey string) {
	key, ok := strings.CutPrefix(rkey, c.prefix)
	if !ok || !c.runs.registered(key) {
		return
	}
	go func() {
		rec, err := c.cfg.Store.Get(ctx, rkey)
		if err != nil {
			return // gone, or the store failed: the run's own write tells
		}
		if obj, err := c.decode(rec); err == nil && obj.Halted == HaltCancelled {
			c.runs.cancel(key)
		}
	}()
}
