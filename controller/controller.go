package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/errtext"
	"github.com/convergekit/converge/internal/sysclock"
	"github.com/convergekit/converge/internal/workqueue"
)

// Controller drives many objects of one kind through their lifecycle
// states with a Handler: a transition re-runs the handler
// at once, everything else waits for the periodic pass, errors back off
// per object, and Enqueue asks for a run as soon as possible. One handler
// runs per object at a time, Workers objects in parallel. Every transition
// is stored with its time in the converge.Store's history.
//
// Create it with New (the zero value is not usable), add objects
// with Add (before or while it runs; AddObject stores them without a
// Controller) and call Run once. Its methods are
// safe for concurrent use.
type Controller struct {
	cfg     Config
	prefix  string
	metrics converge.Metrics
	log     *slog.Logger // nil: no logging
	now     func() time.Time
	mono    func() time.Duration // Config.Monotonic, or derived from now

	timed bool // Metrics is not MetricsNop: measure handler latency and the queue
	// kindLabels is {Kind}; resultLabels {Kind, result} for success and
	// error: the label values of MetricReconciles and MetricLastSuccess,
	// built once so that reporting a run allocates nothing.
	kindLabels   []string
	resultLabels [2][]string
	// stats gathers the queue's and the handlers' counts on the hot path
	// (see publish).
	stats ctrlStats
	// handlerObs caches, per state, the function that records a handler
	// run's duration in MetricHandlerDuration (see handlerObserver;
	// copied on write: read without a lock).
	handlerObs atomic.Pointer[map[State]func(float64)]
	// handlerObsMu serialises the misses of handlerObs, so that a state's
	// series is resolved once even when workers miss it at the same time.
	handlerObsMu sync.Mutex

	// terminal counts the objects of the view halted by a terminal error
	// or a cancel, so that Enqueue looks for one to wake only when there
	// is one.
	terminal atomic.Int64

	// runs holds the handlers running, for Cancel.
	runs handlerRuns
	// queueClock is the controller's monotonic reading less the queue's
	// clock, set by Run before its workers start (see run).
	queueClock time.Duration
	// queueObs records into MetricQueueDuration (see observeQueued).
	queueObs     func(float64)
	queueObsOnce sync.Once

	// limits carries out Config.Limits (nil without limits, so that the
	// plain path costs one nil check); tokenOwner names this controller
	// in the claims of rate tokens.
	limits     map[State]*limiter
	tokenOwner string
	// releasing holds a replica's releases of limit slots on their way.
	releasing sync.WaitGroup

	mu      sync.RWMutex
	objs    map[string]*ctrlEntry
	q       atomic.Pointer[workqueue.Queue[ctrlEntry]]
	started bool
}

// ctrlEntry is the controller's view of one object. The object is kept in
// the entry, and so is its queue item, so that a worker reaches everything
// about an object in one allocation, without a lookup; the queue owns qi
// (see workqueue.New). mu guards obj, hist, histAt and sla.
type ctrlEntry struct {
	qi    workqueue.Item[ctrlEntry]
	mu    sync.Mutex
	obj   Object
	flags atomic.Uint32
	fails atomic.Int32 // consecutive store failures (replicas only)
	// hist is the newest history of the object at version histAt (0:
	// not read yet), for the handler's Object.History.
	hist   []converge.HistoryEntry
	histAt uint64
	// sla ties the object's Since to the monotonic clock (see inState).
	sla slaAnchor
}

func newCtrlEntry(obj *Object) *ctrlEntry {
	e := &ctrlEntry{obj: *obj}
	e.qi = workqueue.NewItem(obj.Key, e)
	return e
}

// load returns a copy of the object.
func (e *ctrlEntry) load() Object {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.obj
}

// store replaces the object.
func (e *ctrlEntry) store(o *Object) {
	e.mu.Lock()
	e.obj = *o
	e.mu.Unlock()
}

// swap replaces the object and returns the one it replaced.
func (e *ctrlEntry) swap(o *Object) Object {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.obj
	e.obj = *o
	return old
}

// version returns the stored version of the object.
func (e *ctrlEntry) version() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.obj.Version
}

const (
	entryReload   uint32 = 1 << iota // read the object from the store before handling
	entryAboveSLA                    // counted in MetricAboveSLA
	entryGone                        // deleted: look the key up again
)

// New validates cfg and returns a Controller that is not running
// yet.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Store == nil {
		cfg.Store = converge.NewMemStore()
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	switch {
	case cfg.ResyncJitter == 0:
		cfg.ResyncJitter = DefaultJitter
	case cfg.ResyncJitter < 0:
		cfg.ResyncJitter = 0
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	cfg.RenewDeadline = cfg.renewDeadline()
	cfg.LeaseTTL = cfg.leaseTTL()
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	switch {
	case cfg.HandlerHistory == 0:
		cfg.HandlerHistory = DefaultHandlerHistory
	case cfg.HandlerHistory < 0:
		cfg.HandlerHistory = 0
	}
	switch {
	case cfg.FailureHistory == 0:
		cfg.FailureHistory = DefaultFailureHistory
	case cfg.FailureHistory < 0:
		cfg.FailureHistory = 0
	}
	cfg.SLA = maps.Clone(cfg.SLA)
	cfg.QuarantineAfterIn = maps.Clone(cfg.QuarantineAfterIn)
	cfg.Limits = maps.Clone(cfg.Limits)
	c := &Controller{
		cfg:     cfg,
		prefix:  cfg.Kind + "/",
		metrics: cfg.Metrics,
		log:     cfg.Logger,
		now:     cfg.Now,
		objs:    map[string]*ctrlEntry{},
	}
	if c.metrics == nil {
		c.metrics = converge.MetricsNop{}
	}
	_, nop := c.metrics.(converge.MetricsNop)
	c.timed = !nop
	c.kindLabels = []string{cfg.Kind}
	c.resultLabels = [2][]string{{cfg.Kind, "success"}, {cfg.Kind, "error"}}
	if c.now == nil {
		c.now = time.Now
	}
	c.mono = monotonic(cfg.Now, cfg.Monotonic)
	c.tokenOwner = cfg.Owner
	if c.tokenOwner == "" {
		c.tokenOwner = fmt.Sprintf("%s.%016x", cfg.Kind, rand.Uint64())
	}
	c.limits = newLimiters(c)
	return c, nil
}

// Kind returns the controller's kind.
func (c *Controller) Kind() string { return c.cfg.Kind }

func (c *Controller) objErr(key string, err error) error {
	return &ObjectError{Kind: c.cfg.Kind, Key: key, Err: err}
}

// Add stores a new object in state with data (nil for none) and, when the
// controller runs, queues it. Its history starts with an entry into state.
// A key already stored fails with ErrObjectExists. To store objects
// without a Controller (no handler at hand), use AddObject.
func (c *Controller) Add(ctx context.Context, key string, state State, data json.RawMessage) error {
	obj, err := addObject(ctx, c.cfg.Store, c.cfg.Kind, key, state, data, c.now())
	if err != nil {
		return err
	}
	c.adopt(obj, true)
	return nil
}

// adopt makes obj known to the controller (unless a newer version is) and
// queues it when the controller runs.
func (c *Controller) adopt(obj *Object, queue bool) {
	c.mu.Lock()
	e := c.objs[obj.Key]
	isNew := e == nil
	if isNew {
		e = newCtrlEntry(obj)
		c.objs[obj.Key] = e
	} else if e.version() < obj.Version {
		e.flags.Or(entryReload)
	}
	c.mu.Unlock()
	q := c.q.Load()
	if isNew {
		c.metrics.Add(MetricObjects, 1, c.cfg.Kind, string(obj.State))
		c.metrics.Add(MetricStateEntered, 1, c.cfg.Kind, string(obj.State))
		c.countHalt(obj, 1)
	}
	if q != nil && queue {
		q.Add(obj.Key)
	}
}

// put writes obj at version with history and returns the new version.
func (c *Controller) put(ctx context.Context, obj *Object, version, token uint64, history ...converge.HistoryEntry) (uint64, error) {
	b, err := encodeObject(obj)
	if err != nil {
		return 0, err
	}
	return c.cfg.Store.Put(ctx, converge.StoreRecord{Key: c.prefix + obj.Key, Version: version, Value: b, Token: token}, history...)
}

func (c *Controller) decode(rec converge.StoreRecord) (*Object, error) {
	return decodeObject(rec, c.prefix)
}

// decodeObject decodes the stored object rec of the kind whose keys start
// with prefix.
func decodeObject(rec converge.StoreRecord, prefix string) (*Object, error) {
	obj := &Object{}
	if err := unmarshalObject(rec.Value, obj); err != nil {
		return nil, fmt.Errorf("controller: decode %s: %w", rec.Key, err)
	}
	obj.Key = strings.TrimPrefix(rec.Key, prefix)
	obj.Version = rec.Version
	return obj, nil
}

// Enqueue asks for key to be handled as soon as possible. Repeated calls
// merge; a call while key is being handled makes it run once more. Before
// Run it does nothing (Run handles every object once when it starts); an
// unknown key is dropped when its turn comes. With Config.Owner set it
// makes the stored object due at once, which wakes the replica that will
// run it; it then fails with ErrObjectNotFound for a key that is not
// stored, or with the store's error.
//
// An object halted by a terminal error (HaltTerminal) or a cancel
// (HaltCancelled) is woken: the halt is cleared in the store first, and
// the handler runs again. A
// quarantined object is not: see Release. With Config.Owner set, Enqueue
// reads the stored object for that (another replica may have halted it),
// so it costs a read besides the write that makes the object due.
func (c *Controller) Enqueue(ctx context.Context, key string) error {
	if sq, ok := c.shared(); ok {
		// Another replica may have halted the object since this one
		// last looked: read it.
		if err := c.update(ctx, key, wakeTerminal); err != nil {
			return err
		}
		return c.schedule(ctx, sq, key)
	}
	if c.terminal.Load() > 0 {
		if e := c.entry(key); e != nil && (e.load().Halted == HaltTerminal || e.load().Halted == HaltCancelled) {
			if err := c.update(ctx, key, wakeTerminal); err != nil {
				return err
			}
		}
	}
	if q := c.q.Load(); q != nil {
		q.Add(key)
	}
	return nil
}

// schedule makes key due at once in the shared store sq.
func (c *Controller) schedule(ctx context.Context, sq converge.Queue, key string) error {
	if err := sq.Schedule(ctx, c.prefix+key, c.now()); err != nil {
		if errors.Is(err, converge.ErrStoreNotFound) {
			err = ErrObjectNotFound
		}
		return c.objErr(key, err)
	}
	return nil
}

// wakeTerminal clears a halt by a terminal error or a cancel, for Enqueue
// and Request.
func wakeTerminal(o *Object) bool {
	if o.Halted != HaltTerminal && o.Halted != HaltCancelled {
		return false
	}
	o.Halted, o.Retries = "", 0
	return true
}

// shared returns the store as a queue when replicas share it (Owner set).
func (c *Controller) shared() (converge.Queue, bool) {
	if c.cfg.Owner == "" {
		return nil, false
	}
	sq, ok := c.cfg.Store.(converge.Queue)
	return sq, ok
}

// update reads the stored object of key, lets change modify it, and
// stores it when change returns true, reading again when someone else
// wrote in between. The controller's view reads it again before the
// object is handled next. A missing key fails with ErrObjectNotFound.
func (c *Controller) update(ctx context.Context, key string, change func(*Object) bool) error {
	for {
		rec, err := c.cfg.Store.Get(ctx, c.prefix+key)
		if errors.Is(err, converge.ErrStoreNotFound) {
			return c.objErr(key, ErrObjectNotFound)
		}
		if err != nil {
			return c.objErr(key, err)
		}
		obj, err := c.decode(rec)
		if err != nil {
			return c.objErr(key, err)
		}
		if !change(obj) {
			return nil
		}
		_, err = c.put(ctx, obj, rec.Version, 0)
		if errors.Is(err, converge.ErrStoreStale) {
			continue // someone wrote in between: read again
		}
		if err != nil {
			return c.objErr(key, err)
		}
		if e := c.entry(key); e != nil {
			e.flags.Or(entryReload)
		}
		return nil
	}
}

// Request queues an intent for the handler of key (for example "delete"):
// it is stored with the object, the object is enqueued, and the handler
// sees it in Object.Intents. Only the handler acts on it. A new intent
// wakes an object halted by a terminal error (HaltTerminal) or a cancel
// (HaltCancelled), but not a quarantined one: it waits for Release with
// the intent stored.
func (c *Controller) Request(ctx context.Context, key, intent string) error {
	err := c.update(ctx, key, func(o *Object) bool {
		o.Intents = append(o.Intents, intent)
		wakeTerminal(o)
		return true
	})
	if err != nil {
		return err
	}
	return c.Enqueue(ctx, key)
}

// Release is ReleaseBy with no one named: the program itself released
// key.
func (c *Controller) Release(ctx context.Context, key string) error {
	return c.ReleaseBy(ctx, key, "")
}

// ReleaseBy wakes an object that was halted, by a quarantine or by a
// terminal error, as the package's Release does (the halt is cleared in
// the store, its count of failures in a row, Object.Retries, starts again
// from zero, and its history gets an entry with Reason ReasonReleased and
// By by), and queues it at once in this controller. Releasing an object
// that is not halted does nothing. A missing key fails with
// ErrObjectNotFound.
func (c *Controller) ReleaseBy(ctx context.Context, key, by string) error {
	released, err := release(ctx, c.cfg.Store, c.cfg.Kind, key, by, c.now())
	if err != nil || !released {
		return err
	}
	if e := c.entry(key); e != nil {
		e.flags.Or(entryReload)
	}
	if q := c.q.Load(); q != nil {
		q.Add(key)
	}
	return nil
}

// Quarantined returns the stored objects of the kind that are
// quarantined (Object.Halted is HaltQuarantined), sorted by key. It reads
// the store, so it sees the quarantines of every replica and of earlier
// runs.
func (c *Controller) Quarantined(ctx context.Context) ([]Object, error) {
	recs, err := c.cfg.Store.List(ctx, c.prefix)
	if err != nil {
		return nil, fmt.Errorf("controller: list %s: %w", c.cfg.Kind, err)
	}
	var out []Object
	for _, rec := range recs {
		obj, err := c.decode(rec)
		if err != nil {
			continue // not ours to read: the scan counts it
		}
		if obj.Halted == HaltQuarantined {
			out = append(out, *obj)
		}
	}
	return out, nil
}

// Get returns the object as the controller last saw it, and false when it
// does not know key.
func (c *Controller) Get(key string) (Object, bool) {
	c.mu.RLock()
	e := c.objs[key]
	c.mu.RUnlock()
	if e == nil {
		return Object{}, false
	}
	return e.load(), true
}

// Len returns the number of objects the controller knows.
func (c *Controller) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.objs)
}

// Objects returns the objects as this controller last saw them, sorted by
// key: the ones it added, loaded or handled, as it left them. It reads no
// store and may lag behind it: objects that others sharing the store (other
// replicas, AddObject) added, changed or removed show here once this
// controller lists the store again, at Run and at every periodic pass
// (Config.Resync), or handles them. StoredObjects reads the store.
func (c *Controller) Objects() []Object {
	c.mu.RLock()
	out := make([]Object, 0, len(c.objs))
	for _, e := range c.objs {
		out = append(out, e.load())
	}
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// History returns the stored transitions of key, oldest first.
func (c *Controller) History(ctx context.Context, key string) ([]converge.HistoryEntry, error) {
	h, err := c.cfg.Store.History(ctx, c.prefix+key)
	if err != nil {
		return nil, c.objErr(key, err)
	}
	return h, nil
}

// AboveSLA returns the objects that have been in their state longer than
// the state's SLA, sorted by key.
func (c *Controller) AboveSLA() []Object {
	now := c.now()
	var out []Object
	c.mu.RLock()
	for _, e := range c.objs {
		o := e.load()
		if sla, ok := c.cfg.SLA[o.State]; ok && c.inState(e, o.Since, now) > sla {
			out = append(out, o)
		}
	}
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Run loads every object of the kind from the store, handles each once,
// and keeps handling them until ctx is cancelled. Every Resync it lists
// the store again, so objects that other controllers sharing the store
// added, changed or removed are seen. Then it stops taking
// work, lets running handlers finish within ShutdownTimeout (cancelling
// their context after it), and returns once every goroutine it started
// has ended: nil, or an error matching ErrShutdownTimeout. A
// failing store is retried with backoff while loading. Run may be called
// only once.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return ErrRunning
	}
	c.started = true
	if sq, ok := c.shared(); ok {
		c.mu.Unlock()
		return c.runShared(ctx, sq)
	}
	q := workqueue.New(c.cfg.Backoff, func(key string) *workqueue.Item[ctrlEntry] {
		if e := c.entry(key); e != nil {
			return &e.qi
		}
		return nil
	})
	if c.timed {
		// The queue calls the observer with its lock held, on every
		// add: it only counts it; the workers publish the count (see
		// publish), outside the queue's lock. Without metrics there is
		// nothing to observe.
		q.SetObserver(func(int) { c.stats.adds.Add(1) })
		c.stats.local = true
		defer c.publish(true)
	}
	c.q.Store(q)
	known := make([]string, 0, len(c.objs))
	for k := range c.objs {
		known = append(known, k)
	}
	c.mu.Unlock()
	defer q.ShutDown()

	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	if c.load(ctx, q) != nil {
		return nil // cancelled while loading: nothing runs yet, a clean stop
	}
	for _, k := range known {
		q.Add(k)
	}
	rescanned := make(chan struct{})
	go func() { defer close(rescanned); c.rescan(ctx, q) }()
	defer func() { <-rescanned }()
	reported := make(chan struct{})
	go func() { defer close(reported); c.reportRunning(ctx) }()
	defer func() { <-reported }()

	// With the process's clocks, a handler run's start reading (on
	// mono) less this offset is on the queue's clock, so its queue
	// duration costs no clock reading of its own (see run); with other
	// clocks the queue reads its own at each hand-out.
	sameClock := c.timed && sysclock.Is(c.cfg.Now) && c.cfg.Monotonic == nil
	if sameClock {
		c.queueClock = c.mono() - q.Clock()
	}
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		w := c.runs.worker(hctx)
		w.queued = sameClock
		wg.Go(func() {
			it, ok := q.GetItem()
			for ok {
				if c.timed && !sameClock {
					c.observeQueued(w, q.Waited(it))
				}
				forget, next := c.process(w.context(), q, it)
				if !c.timed {
					it, ok = q.FinishGet(it, forget, next)
					continue
				}
				// The handler's end reading, on the queue's clock,
				// is the time next counts from: no reading of the
				// queue's own.
				var now time.Duration
				if sameClock && w.end != 0 {
					now, w.end = w.end-1-c.queueClock, 0
				}
				if it, ok = q.FinishTryGet(it, forget, next, now); !ok {
					// Nothing waits: the worker hands over what it
					// holds before it waits (see workerObs).
					c.flush(&w.obs)
					it, ok = q.GetItem()
				}
			}
			if c.timed {
				c.flush(&w.obs)
			}
		})
	}
	<-ctx.Done()
	q.ShutDown()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	return c.waitHandlers(finished, cancelHandlers)
}

// waitHandlers waits until finished is closed, or ShutdownTimeout passes:
// then it cancels the handlers' context and waits for finished.
func (c *Controller) waitHandlers(finished <-chan struct{}, cancelHandlers func()) error {
	t := time.NewTimer(c.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-finished:
		return nil
	case <-t.C:
		cancelHandlers()
		<-finished
		return fmt.Errorf("controller: %s: %w after %s", c.cfg.Kind, errtext.Bare(ErrShutdownTimeout, "controller: "), c.cfg.ShutdownTimeout)
	}
}

// load reads every stored object of the kind, retrying with backoff.
func (c *Controller) load(ctx context.Context, q *workqueue.Queue[ctrlEntry]) error {
	for failures := 0; ; failures++ {
		err := c.scan(ctx, q)
		if err == nil {
			return nil
		}
		if sleep(ctx, c.cfg.Backoff.Delay(failures+1, rand.Float64())); ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// rescan scans the store every Resync until ctx ends, so that objects
// added, changed or removed by other controllers sharing the store are
// seen.
func (c *Controller) rescan(ctx context.Context, q *workqueue.Queue[ctrlEntry]) {
	c.rescanWith(ctx, q, func() {})
}

// rescanWith is rescan, calling also after every scan (a replica uses it
// to restart a store watch that could not be started).
func (c *Controller) rescanWith(ctx context.Context, q *workqueue.Queue[ctrlEntry], also func()) {
	t := time.NewTimer(c.cfg.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = c.scan(ctx, q) // a failed scan is retried at the next one
		also()
		t.Reset(c.cfg.Resync)
	}
}

// scan lists the stored objects of the kind: it adopts new ones, and
// queues for a fresh read those stored at another version and those no
// longer stored.
func (c *Controller) scan(ctx context.Context, q *workqueue.Queue[ctrlEntry]) error {
	recs, err := c.cfg.Store.List(ctx, c.prefix)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if len(c.objs) == 0 {
		// The first load: the view takes every record, in a map grown once.
		c.objs = make(map[string]*ctrlEntry, len(recs))
	}
	c.mu.Unlock()
	seen := make(map[string]struct{}, len(recs))
	var changed []string
	for _, rec := range recs {
		key := strings.TrimPrefix(rec.Key, c.prefix)
		seen[key] = struct{}{}
		if e := c.entry(key); e != nil {
			switch v := e.version(); {
			case v == rec.Version:
			case q != nil:
				e.flags.Or(entryReload)
				changed = append(changed, key)
			case v < rec.Version:
				// A replica: the view follows the store; handling is the
				// store queue's business.
				if fresh, err := c.decode(rec); err == nil {
					c.view(fresh)
				}
			}
			continue
		}
		obj, err := c.decode(rec)
		if err != nil {
			// A record we cannot read is not ours to fix: count it and
			// leave it alone.
			c.metrics.Add(MetricErrors, 1, c.cfg.Kind, "")
			continue
		}
		c.adopt(obj, true)
	}
	c.mu.RLock()
	for k, e := range c.objs {
		if _, ok := seen[k]; !ok {
			e.flags.Or(entryReload)
			changed = append(changed, k)
		}
	}
	c.mu.RUnlock()
	if q == nil {
		c.dropGone(ctx, changed)
		return nil
	}
	for _, k := range changed {
		q.Add(k)
	}
	return nil
}

// dropGone forgets, for a replica, the objects of keys that a scan did
// not list and that are no longer stored (an object added after the scan
// began is stored, and stays).
func (c *Controller) dropGone(ctx context.Context, keys []string) {
	for _, k := range keys {
		if _, err := c.cfg.Store.Get(ctx, c.prefix+k); !errors.Is(err, converge.ErrStoreNotFound) {
			continue
		}
		if e := c.entry(k); e != nil {
			c.forget(k, e)
		}
	}
}

func (c *Controller) entry(key string) *ctrlEntry {
	c.mu.RLock()
	e := c.objs[key]
	c.mu.RUnlock()
	return e
}
