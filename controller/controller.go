package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/errtext"
	"github.com/convergekit/converge/internal/workqueue"
)

// State names the lifecycle state of an object ("provisioning",
// "ready", ...). The empty state is not a valid state of a stored object.
type State string

// Object is one object of a Controller: its key, lifecycle state and data.
// It serializes to JSON as it is stored: {"state", "since", "reason",
// "data", "intents"}; Key and Version are kept by the store beside it.
type Object struct {
	// Key names the object within its controller's kind.
	Key string `json:"-"`
	// State is the lifecycle state. Only the handler changes it.
	State State `json:"state"`
	// Since is when the object entered State.
	Since time.Time `json:"since"`
	// Reason is the reason of the last Wait, or of the last transition.
	Reason string `json:"reason,omitempty"`
	// Data is the object's own JSON document, for the handler to use.
	Data json.RawMessage `json:"data,omitempty"`
	// Intents are the requests others queued for the handler with
	// Controller.Request, oldest first. They are cleared once a handler
	// run that saw them succeeds.
	Intents []string `json:"intents,omitempty"`
	// Version is the store version the object was read at.
	Version uint64 `json:"-"`
}

// Verdict is what a handler decided about an object.
type Verdict uint8

const (
	// VerdictNoChange leaves the object as it is until the next periodic
	// pass. It is the zero verdict.
	VerdictNoChange Verdict = iota
	// VerdictTransition moves the object to Result.Next and runs the
	// handler again at once.
	VerdictTransition
	// VerdictWait leaves the state unchanged and records a reason.
	VerdictWait
	// VerdictDeleted removes the object; its history is kept.
	VerdictDeleted
)

var verdictNames = [...]string{"no-change", "transition", "wait", "deleted"}

// String returns the lower-case name of the verdict.
func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Result is a handler's answer for one object. Build it with
// Transition, Wait, NoChange or Deleted. The zero value means NoChange.
type Result struct {
	Verdict Verdict
	// Next is the state to move to (VerdictTransition only).
	Next State
	// Reason explains a wait or a transition; it is stored with the object
	// and, for a transition, in the history.
	Reason string
	// Data, when not nil, replaces the object's data.
	Data json.RawMessage
	// RequeueAfter, when positive, replaces the periodic pass for this
	// object's next run (not used by VerdictTransition and VerdictDeleted).
	RequeueAfter time.Duration
}

// Transition returns the result that moves an object to next; the handler
// runs again at once in the new state.
func Transition(next State) Result {
	return Result{Verdict: VerdictTransition, Next: next}
}

// Wait returns the result that keeps the state and records why the object
// waits; the handler runs again at the next periodic pass.
func Wait(reason string) Result { return Result{Verdict: VerdictWait, Reason: reason} }

// NoChange returns the result that changes nothing; the handler runs again
// at the next periodic pass.
func NoChange() Result { return Result{} }

// Deleted returns the result that removes the object from the store.
func Deleted() Result { return Result{Verdict: VerdictDeleted} }

// Because returns r with its reason set.
func (r Result) Because(reason string) Result { r.Reason = reason; return r }

// WithData returns r with the data that replaces the object's data.
func (r Result) WithData(data json.RawMessage) Result { r.Data = data; return r }

// After returns r with the delay before the next run, instead of the
// periodic pass.
func (r Result) After(d time.Duration) Result { r.RequeueAfter = d; return r }

// Handler drives objects of one kind through their lifecycle. Handle is
// called with a copy of the object; it does the work the state calls for
// and returns the verdict, or an error to be retried with backoff. It is
// never called for one object twice at once, but is called for different
// objects in parallel. It must honour ctx.
type Handler interface {
	Handle(ctx context.Context, obj Object) (Result, error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, obj Object) (Result, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, obj Object) (Result, error) {
	return f(ctx, obj)
}

// Controller defaults.
const (
	// DefaultWorkers is the number of handlers run at once when
	// Config.Workers is zero.
	DefaultWorkers = 4
	// DefaultResync is the periodic pass interval when
	// Config.Resync is zero.
	DefaultResync = 30 * time.Second
	// DefaultJitter is the periodic pass jitter when
	// Config.ResyncJitter is zero.
	DefaultJitter = 0.1
	// DefaultShutdownTimeout is how long Run lets running
	// handlers finish when Config.ShutdownTimeout is zero.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultLeaseTTL is the lease duration when
	// Config.Owner is set and LeaseTTL is zero.
	DefaultLeaseTTL = time.Minute
	// DefaultPoll is how often a replica looks for due objects
	// when Config.Poll is zero.
	DefaultPoll = time.Second
)

// Controller errors.
var (
	// ErrRunning means Run was called on a controller that is
	// running or has run.
	ErrRunning = errors.New("controller: controller already ran")
	// ErrShutdownTimeout means running handlers did not finish
	// within ShutdownTimeout and their context was cancelled.
	ErrShutdownTimeout = errors.New("controller: controller handlers did not finish in time")
	// ErrObjectExists means Add was called with a key already stored.
	ErrObjectExists = errors.New("controller: object exists")
	// ErrObjectNotFound means no object has the key.
	ErrObjectNotFound = errors.New("controller: object not found")
	// ErrObjectInvalid means an object cannot be added as given (empty key
	// or state, data that is not JSON).
	ErrObjectInvalid = errors.New("controller: invalid object")
)

// ObjectError is the error of a Controller call about one object. It
// wraps the cause (ErrObjectExists, ErrObjectNotFound, ErrObjectInvalid or
// a store error).
type ObjectError struct {
	Kind string
	Key  string
	Err  error
}

// Error describes the problem, naming its culprit.
func (e *ObjectError) Error() string {
	return fmt.Sprintf("controller: %s %q: %s", e.Kind, e.Key, errtext.Cause(e.Err, "controller: "))
}

// Unwrap returns the cause.
func (e *ObjectError) Unwrap() error { return e.Err }

// Config configures a Controller. Kind and Handler are required;
// every other zero field takes its default.
type Config struct {
	// Kind names the object type. Objects are stored under "Kind/key".
	Kind string
	// Handler decides what happens to each object.
	Handler Handler
	// Store keeps the objects and their history; nil means a new
	// converge.MemStore, which forgets them when the process ends. A
	// controller that must come back with every object's state after a
	// restart passes a durable store: boltstore (one file, one process),
	// or pgstore (PostgreSQL) for several replicas, each with its own
	// Owner. History is bounded per object by the store's
	// converge.Retention.
	Store converge.Store
	// Workers is the most handlers run at once; 0 means
	// DefaultWorkers.
	Workers int
	// Resync is the interval of the periodic pass; 0 means
	// DefaultResync.
	Resync time.Duration
	// ResyncJitter is the fraction (0..1) of Resync added at random to each
	// object's periodic pass, so objects spread out; 0 means
	// DefaultJitter. Negative disables jitter.
	ResyncJitter float64
	// Backoff is the per-object backoff after errors; the zero value means
	// converge.DefaultBackoff.
	Backoff converge.Backoff
	// SLA is the longest an object should stay in a state; states without
	// an entry have none. Objects over it are reported by AboveSLA and
	// Metrics.AboveSLA.
	SLA map[State]time.Duration
	// Metrics receives measurements; nil means MetricsNop.
	Metrics Metrics
	// ShutdownTimeout is how long Run lets running handlers finish after
	// its context is cancelled, before cancelling theirs; 0 means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Owner, when set, names this controller among replicas that share
	// one Store, which must then implement converge.Queue (MemStore and
	// the durable stores do). The store is the queue: each replica claims
	// due objects in batches (converge.Queue.ClaimDue), handles them under
	// a lease renewed while the handler runs and fencing every write, and
	// finishes the lease with the time the object is due next. A
	// replica's Enqueue or Request wakes the replica that will run the
	// object (through converge.Queue.Watch), and the objects of a replica
	// that died are taken over when their leases expire. Owners must be
	// unique among the replicas (a host name plus a process ID, say).
	Owner string
	// LeaseTTL is how long a claim lasts without renewal, so how soon a
	// dead replica's objects are taken over; 0 means DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Poll is how often a replica (Owner set) asks the store for due
	// objects when nothing woke it; 0 means DefaultPoll.
	Poll time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Validate reports the first field out of range as a *converge.ConfigError.
func (c Config) Validate() error {
	switch {
	case c.Kind == "":
		return &converge.ConfigError{Field: "Kind", Reason: "must not be empty"}
	case strings.Contains(c.Kind, "/"):
		return &converge.ConfigError{Field: "Kind", Reason: fmt.Sprintf("must not contain '/', got %q", c.Kind)}
	case c.Handler == nil:
		return &converge.ConfigError{Field: "Handler", Reason: "must not be nil"}
	case c.Workers < 0:
		return &converge.ConfigError{Field: "Workers", Reason: fmt.Sprintf("must not be negative, got %d", c.Workers)}
	case c.Resync < 0:
		return &converge.ConfigError{Field: "Resync", Reason: fmt.Sprintf("must not be negative, got %s", c.Resync)}
	case c.ResyncJitter > 1:
		return &converge.ConfigError{Field: "ResyncJitter", Reason: fmt.Sprintf("must be at most 1, got %g", c.ResyncJitter)}
	case c.ShutdownTimeout < 0:
		return &converge.ConfigError{Field: "ShutdownTimeout", Reason: fmt.Sprintf("must not be negative, got %s", c.ShutdownTimeout)}
	case c.LeaseTTL < 0:
		return &converge.ConfigError{Field: "LeaseTTL", Reason: fmt.Sprintf("must not be negative, got %s", c.LeaseTTL)}
	case c.Poll < 0:
		return &converge.ConfigError{Field: "Poll", Reason: fmt.Sprintf("must not be negative, got %s", c.Poll)}
	}
	if _, ok := c.Store.(converge.Queue); c.Owner != "" && c.Store != nil && !ok {
		return &converge.ConfigError{Field: "Store", Reason: fmt.Sprintf("%T does not implement converge.Queue, which replicas (Owner set) need", c.Store)}
	}
	for s, d := range c.SLA {
		if d <= 0 {
			return &converge.ConfigError{Field: "SLA", Reason: fmt.Sprintf("state %q: must be positive, got %s", s, d)}
		}
	}
	return c.Backoff.Validate()
}

// Controller drives many objects of one kind through their lifecycle
// states with a Handler (see DESIGN §3): a transition re-runs the handler
// at once, everything else waits for the periodic pass, errors back off
// per object, and Enqueue asks for a run as soon as possible. One handler
// runs per object at a time, Workers objects in parallel. Every transition
// is stored with its time in the converge.Store's history.
//
// Create it with New (the zero value is not usable), add objects
// with Add (before or while it runs) and call Run once. Its methods are
// safe for concurrent use.
type Controller struct {
	cfg     Config
	prefix  string
	metrics Metrics
	now     func() time.Time

	timed bool // measure handler latency (Metrics is not MetricsNop)

	mu      sync.RWMutex
	objs    map[string]*ctrlEntry
	q       atomic.Pointer[workqueue.Queue[ctrlEntry]]
	started bool
}

// ctrlEntry is the controller's view of one object. The object is kept in
// the entry, and so is its queue item, so that a worker reaches everything
// about an object in one allocation, without a lookup; the queue owns qi
// (see workqueue.New). mu guards obj.
type ctrlEntry struct {
	qi    workqueue.Item[ctrlEntry]
	mu    sync.Mutex
	obj   Object
	flags atomic.Uint32
	fails atomic.Int32 // consecutive handler failures (replicas only)
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

// version returns the stored version of the object.
func (e *ctrlEntry) version() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.obj.Version
}

const (
	entryReload   uint32 = 1 << iota // read the object from the store before handling
	entryAboveSLA                    // counted in Metrics.AboveSLA
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
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	cfg.SLA = maps.Clone(cfg.SLA)
	c := &Controller{
		cfg:     cfg,
		prefix:  cfg.Kind + "/",
		metrics: cfg.Metrics,
		now:     cfg.Now,
		objs:    map[string]*ctrlEntry{},
	}
	if c.metrics == nil {
		c.metrics = MetricsNop{}
	}
	_, nop := c.metrics.(MetricsNop)
	c.timed = !nop
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Kind returns the controller's kind.
func (c *Controller) Kind() string { return c.cfg.Kind }

func (c *Controller) objErr(key string, err error) error {
	return &ObjectError{Kind: c.cfg.Kind, Key: key, Err: err}
}

// Add stores a new object in state with data (nil for none) and, when the
// controller runs, queues it. Its history starts with an entry into state.
// A key already stored fails with ErrObjectExists.
func (c *Controller) Add(ctx context.Context, key string, state State, data json.RawMessage) error {
	switch {
	case key == "":
		return c.objErr(key, fmt.Errorf("%w: empty key", ErrObjectInvalid))
	case state == "":
		return c.objErr(key, fmt.Errorf("%w: empty state", ErrObjectInvalid))
	case data != nil && !json.Valid(data):
		return c.objErr(key, fmt.Errorf("%w: data is not valid JSON", ErrObjectInvalid))
	}
	now := c.now()
	obj := &Object{Key: key, State: state, Since: now, Data: slices.Clone(data)}
	v, err := c.put(ctx, obj, 0, 0, converge.HistoryEntry{At: now, To: string(state), Reason: "added"})
	if errors.Is(err, converge.ErrStoreStale) {
		return c.objErr(key, ErrObjectExists)
	}
	if err != nil {
		return c.objErr(key, err)
	}
	obj.Version = v
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
		c.metrics.ObjectsInState(c.cfg.Kind, obj.State, 1)
		c.metrics.StateEntered(c.cfg.Kind, obj.State)
	}
	if q != nil && queue {
		q.Add(obj.Key)
	}
}

// put writes obj at version with history and returns the new version.
func (c *Controller) put(ctx context.Context, obj *Object, version, token uint64, history ...converge.HistoryEntry) (uint64, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return 0, err
	}
	return c.cfg.Store.Put(ctx, converge.StoreRecord{Key: c.prefix + obj.Key, Version: version, Value: b, Token: token}, history...)
}

func (c *Controller) decode(rec converge.StoreRecord) (*Object, error) {
	obj := &Object{}
	if err := json.Unmarshal(rec.Value, obj); err != nil {
		return nil, fmt.Errorf("controller: decode %s: %w", rec.Key, err)
	}
	obj.Key = strings.TrimPrefix(rec.Key, c.prefix)
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
func (c *Controller) Enqueue(ctx context.Context, key string) error {
	if sq, ok := c.shared(); ok {
		if err := sq.Schedule(ctx, c.prefix+key, c.now()); err != nil {
			if errors.Is(err, converge.ErrStoreNotFound) {
				err = ErrObjectNotFound
			}
			return c.objErr(key, err)
		}
		return nil
	}
	if q := c.q.Load(); q != nil {
		q.Add(key)
	}
	return nil
}

// shared returns the store as a queue when replicas share it (Owner set).
func (c *Controller) shared() (converge.Queue, bool) {
	if c.cfg.Owner == "" {
		return nil, false
	}
	sq, ok := c.cfg.Store.(converge.Queue)
	return sq, ok
}

// Request queues an intent for the handler of key (for example "delete"):
// it is stored with the object, the object is enqueued, and the handler
// sees it in Object.Intents. Only the handler acts on it.
func (c *Controller) Request(ctx context.Context, key, intent string) error {
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
		obj.Intents = append(obj.Intents, intent)
		_, err = c.put(ctx, obj, rec.Version, 0)
		if errors.Is(err, converge.ErrStoreStale) {
			continue // someone wrote in between: read again
		}
		if err != nil {
			return c.objErr(key, err)
		}
		c.mu.RLock()
		e := c.objs[key]
		c.mu.RUnlock()
		if e != nil {
			e.flags.Or(entryReload)
		}
		return c.Enqueue(ctx, key)
	}
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

// Objects returns the objects the controller knows, sorted by key.
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
		if sla, ok := c.cfg.SLA[o.State]; ok && now.Sub(o.Since) > sla {
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

	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			it, ok := q.GetItem()
			for ok {
				forget, next := c.process(hctx, q, it)
				it, ok = q.FinishGet(it, forget, next)
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
		return fmt.Errorf("controller: controller %s: %w after %s", c.cfg.Kind, errtext.Bare(ErrShutdownTimeout, "controller: "), c.cfg.ShutdownTimeout)
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
			c.metrics.HandlerError(c.cfg.Kind, "")
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
			obj := e.load()
			c.forget(k, e, &obj)
		}
	}
}

func (c *Controller) entry(key string) *ctrlEntry {
	c.mu.RLock()
	e := c.objs[key]
	c.mu.RUnlock()
	return e
}

// process runs the handler once for the key of it and acts on its
// verdict. It returns what the worker tells the queue: whether to reset
// the key's backoff, and when to run it next (negative: not at all, the
// error paths having queued it with backoff already).
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
			c.forget(key, e, obj)
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
		c.replace(e, obj, fresh)
		obj = fresh
	}
	if _, ok := c.cfg.SLA[obj.State]; ok {
		c.checkSLA(e, obj, c.now())
	}
	res, err := c.run(ctx, obj)
	if err != nil {
		c.fail(q, key, obj)
		return false, -1
	}
	how, d, err := c.settle(ctx, e, obj, res, 0)
	switch {
	case errors.Is(err, errVerdict):
		c.fail(q, key, obj)
		return false, -1
	case err != nil:
		return false, c.storeFailed(q, key, e, obj, err)
	case how == settledAgain:
		return true, 0
	case how == settledGone:
		return true, -1
	}
	return true, d
}

// run runs the handler on obj, measuring its latency.
func (c *Controller) run(ctx context.Context, obj *Object) (Result, error) {
	var start time.Time
	if c.timed {
		start = c.now()
	}
	res, err := c.handle(ctx, *obj)
	if c.timed {
		c.metrics.HandlerLatency(c.cfg.Kind, obj.State, c.now().Sub(start))
	}
	return res, err
}

// settled says what follows a handler's verdict once it is stored.
type settled uint8

const (
	settledLater settled = iota // run again after the returned delay
	settledAgain                // transitioned: run again at once
	settledGone                 // deleted
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
		now := c.now()
		next := &Object{Key: key, State: res.Next, Since: now, Reason: res.Reason, Data: obj.Data}
		if res.Data != nil {
			next.Data = slices.Clone(res.Data)
		}
		v, err := c.put(ctx, next, obj.Version, token, converge.HistoryEntry{At: now, From: string(obj.State), To: string(res.Next), Reason: res.Reason})
		if err != nil {
			return 0, 0, err
		}
		next.Version = v
		c.replace(e, obj, next)
		return settledAgain, 0, nil
	case VerdictDeleted:
		err := c.cfg.Store.Delete(ctx, c.prefix+key, obj.Version, converge.HistoryEntry{At: c.now(), From: string(obj.State), Reason: "deleted"})
		if err != nil && !errors.Is(err, converge.ErrStoreNotFound) {
			return 0, 0, err
		}
		c.forget(key, e, obj)
		return settledGone, 0, nil
	}
	// VerdictNoChange, VerdictWait: store what changed besides the state.
	if res.Verdict == VerdictWait || res.Data != nil || len(obj.Intents) > 0 {
		upd := *obj
		upd.Intents = nil
		if res.Verdict == VerdictWait {
			upd.Reason = res.Reason
		}
		if res.Data != nil {
			upd.Data = slices.Clone(res.Data)
		}
		if upd.Reason != obj.Reason || res.Data != nil || len(obj.Intents) > 0 {
			v, err := c.put(ctx, &upd, obj.Version, token)
			if err != nil {
				return 0, 0, err
			}
			upd.Version = v
			e.store(&upd)
		}
	}
	d := res.RequeueAfter
	if d <= 0 {
		d = c.resync()
	}
	if sla, ok := c.cfg.SLA[obj.State]; ok && e.flags.Load()&entryAboveSLA == 0 {
		// Look again when the SLA runs out, so a breach is seen on time.
		d = max(min(d, obj.Since.Add(sla).Sub(c.now())+time.Nanosecond), 0)
	}
	return settledLater, d, nil
}

// handle runs the handler, turning a panic into an error.
func (c *Controller) handle(ctx context.Context, obj Object) (res Result, err error) {
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
	c.metrics.HandlerError(c.cfg.Kind, obj.State)
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

// replace installs next in e and accounts for a change of state.
func (c *Controller) replace(e *ctrlEntry, prev, next *Object) {
	e.store(next)
	if prev.State == next.State && prev.Since.Equal(next.Since) {
		return
	}
	kind := c.cfg.Kind
	if e.flags.Load()&entryAboveSLA != 0 {
		e.flags.And(^entryAboveSLA)
		c.metrics.AboveSLA(kind, prev.State, -1)
	}
	if prev.State != next.State {
		c.metrics.ObjectsInState(kind, prev.State, -1)
		c.metrics.ObjectsInState(kind, next.State, 1)
	}
	c.metrics.StateExited(kind, prev.State, next.Since.Sub(prev.Since))
	c.metrics.StateEntered(kind, next.State)
}

// forget drops a deleted object.
func (c *Controller) forget(key string, e *ctrlEntry, obj *Object) {
	e.flags.Or(entryGone)
	c.mu.Lock()
	if c.objs[key] == e {
		delete(c.objs, key)
	}
	c.mu.Unlock()
	kind := c.cfg.Kind
	if e.flags.Load()&entryAboveSLA != 0 {
		c.metrics.AboveSLA(kind, obj.State, -1)
	}
	c.metrics.ObjectsInState(kind, obj.State, -1)
	c.metrics.StateExited(kind, obj.State, c.now().Sub(obj.Since))
}

// checkSLA updates the above-SLA mark of e for obj at now.
func (c *Controller) checkSLA(e *ctrlEntry, obj *Object, now time.Time) {
	sla, ok := c.cfg.SLA[obj.State]
	if !ok || e.flags.Load()&entryAboveSLA != 0 {
		return
	}
	if now.Sub(obj.Since) > sla {
		e.flags.Or(entryAboveSLA)
		c.metrics.AboveSLA(c.cfg.Kind, obj.State, 1)
	}
}
