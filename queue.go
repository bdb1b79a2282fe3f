package converge

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Backoff computes exponential retry delays with a cap and jitter. The zero
// value means DefaultBackoff.
type Backoff struct {
	// Base is the delay after the first failure; each further failure
	// doubles it. 0 means DefaultBackoff.Base.
	Base time.Duration
	// Max caps the delay. 0 means DefaultBackoff.Max.
	Max time.Duration
	// Jitter is the fraction (0..1) of the delay that is randomised: the
	// delay is drawn from [d*(1-Jitter), d], so it never exceeds Max and
	// retries of many keys spread out. 0 means no jitter.
	Jitter float64
}

// DefaultBackoff is the Backoff used when none is configured: 100 ms
// doubling up to 5 minutes, with 20% jitter.
var DefaultBackoff = Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Minute, Jitter: 0.2}

// Validate reports a field out of range as a *ConfigError.
func (b Backoff) Validate() error {
	switch {
	case b.Base < 0:
		return &ConfigError{Field: "Backoff.Base", Reason: fmt.Sprintf("must not be negative, got %s", b.Base)}
	case b.Max < 0:
		return &ConfigError{Field: "Backoff.Max", Reason: fmt.Sprintf("must not be negative, got %s", b.Max)}
	case b.Max > 0 && b.Base > b.Max:
		return &ConfigError{Field: "Backoff.Base", Reason: fmt.Sprintf("%s is above Max %s", b.Base, b.Max)}
	case b.Jitter < 0 || b.Jitter > 1:
		return &ConfigError{Field: "Backoff.Jitter", Reason: fmt.Sprintf("must be within [0, 1], got %g", b.Jitter)}
	}
	return nil
}

func (b Backoff) withDefaults() Backoff {
	if b.Base == 0 && b.Max == 0 && b.Jitter == 0 {
		return DefaultBackoff
	}
	if b.Base == 0 {
		b.Base = DefaultBackoff.Base
	}
	if b.Max == 0 {
		b.Max = max(DefaultBackoff.Max, b.Base)
	}
	return b
}

// Delay returns the delay before retry number failures (1 for the first
// failure), using r in [0, 1) for the jitter. failures < 1 gives 0.
func (b Backoff) Delay(failures int, r float64) time.Duration {
	if failures < 1 {
		return 0
	}
	b = b.withDefaults()
	d := b.Base
	for i := 1; i < failures && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter > 0 {
		d -= time.Duration(float64(d) * b.Jitter * r)
	}
	return d
}

// Queue is a work queue of string keys with the semantics reconcile loops
// need:
//   - adding a key that is already waiting merges with it;
//   - a key handed out by Get is not handed out again until Done, and an
//     Add while it is being handled makes it run once more after Done;
//   - AddAfter keeps, per key, only the earliest pending time;
//   - AddRateLimited delays a key by its own exponential backoff, which
//     Forget resets (call it after a success).
//
// Keys are handed out in the order they became ready. The zero value is not
// usable; call NewQueue. A Queue must be shut down to release its timer
// goroutine.
type Queue struct {
	backoff Backoff

	mu       sync.Mutex
	cond     sync.Cond
	waiting  int // goroutines in cond.Wait: Signal only when someone waits
	items    map[string]*queueItem
	ready    []*queueItem
	delayed  queueHeap
	shutdown bool
	active   int // keys handed out and not Done
	rng      *rand.Rand

	wake     chan struct{}
	stop     chan struct{}
	loopDone chan struct{}
	base     time.Time // origin of clock
	// newItem, when set, supplies the item of a key that has none, so a
	// Controller can keep it in the same allocation as its object. It is
	// called with mu held and returns nil for keys it does not know.
	newItem func(key string) *queueItem
}

// clock returns the monotonic nanoseconds since the queue was made: one
// clock read, cheaper than time.Now.
func (q *Queue) clock() int64 { return int64(time.Since(q.base)) }

const (
	qQueued     uint8 = 1 << iota // in ready
	qProcessing                   // handed out by Get, not Done yet
	qDirty                        // added while processing: queue again on Done
)

type queueItem struct {
	key      string
	entry    *ctrlEntry // the Controller's object, to skip a map lookup
	at       int64      // due time of the pending delayed add (see clock)
	index    int32      // position in delayed, -1 when none
	failures int32
	state    uint8
}

// NewQueue returns a running Queue whose AddRateLimited uses b (the zero
// Backoff means DefaultBackoff). It panics if b is invalid.
func NewQueue(b Backoff) *Queue {
	if err := b.Validate(); err != nil {
		panic("converge: NewQueue: " + err.Error())
	}
	q := &Queue{
		backoff:  b.withDefaults(),
		items:    map[string]*queueItem{},
		rng:      rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		base:     time.Now(),
	}
	q.cond.L = &q.mu
	go q.delayLoop()
	return q
}

func (q *Queue) item(key string) *queueItem {
	it := q.items[key]
	if it == nil {
		if q.newItem != nil {
			it = q.newItem(key)
		}
		if it == nil {
			it = &queueItem{key: key, index: -1}
		}
		q.items[key] = it
	}
	return it
}

// release forgets an item that holds no information any more.
func (q *Queue) release(it *queueItem) {
	if it.state == 0 && it.index < 0 && it.failures == 0 {
		delete(q.items, it.key)
	}
}

// Add asks for key to be handled as soon as possible. It does nothing after
// ShutDown.
func (q *Queue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	q.addLocked(q.item(key))
}

func (q *Queue) addLocked(it *queueItem) {
	switch {
	case it.state&qProcessing != 0:
		it.state |= qDirty
	case it.state&qQueued != 0:
	default:
		it.state |= qQueued
		q.ready = append(q.ready, it)
		if q.waiting > 0 {
			q.cond.Signal()
		}
	}
}

// AddAfter asks for key to be handled after d (at once when d <= 0). When
// the key already has a later pending time, the earlier one replaces it;
// an earlier pending time is kept.
func (q *Queue) AddAfter(key string, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	at := q.clock() + int64(d)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	q.addAfterLocked(q.item(key), at)
}

func (q *Queue) addAfterLocked(it *queueItem, at int64) {
	switch {
	case it.index < 0:
		it.at = at
		heap.Push(&q.delayed, it)
	case at < it.at:
		it.at = at
		heap.Fix(&q.delayed, int(it.index))
	default:
		return
	}
	if q.delayed[0] == it {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// AddRateLimited counts a failure of key and adds it after its backoff
// delay, and returns that delay.
func (q *Queue) AddRateLimited(key string) time.Duration {
	q.mu.Lock()
	if q.shutdown {
		q.mu.Unlock()
		return 0
	}
	it := q.item(key)
	it.failures++
	d := q.backoff.Delay(int(it.failures), q.rng.Float64())
	q.mu.Unlock()
	q.AddAfter(key, d)
	return d
}

// Failures returns how many failures of key were counted since the last
// Forget.
func (q *Queue) Failures(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if it := q.items[key]; it != nil {
		return int(it.failures)
	}
	return 0
}

// Forget resets the backoff of key. A pending delayed add is kept.
func (q *Queue) Forget(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if it := q.items[key]; it != nil {
		it.failures = 0
		q.release(it)
	}
}

// Get blocks until a key is ready and hands it out; the caller must call
// Done with it. It returns ok false once the queue is shut down, even if
// keys are still waiting.
func (q *Queue) Get() (key string, ok bool) {
	it, ok := q.get()
	if !ok {
		return "", false
	}
	return it.key, true
}

// Done marks key as handled. If it was added while being handled, it is
// queued again.
func (q *Queue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	it := q.items[key]
	if it == nil || it.state&qProcessing == 0 {
		return
	}
	q.active--
	dirty := it.state&qDirty != 0
	it.state &^= qProcessing | qDirty
	if dirty && !q.shutdown {
		q.addLocked(it)
	}
	q.release(it)
}

// DoneAfter is Done, then AddAfter(key, d) (skipped when d < 0), with
// Forget first when forget is true, all under one lock: what a worker
// does after handling a key.
func (q *Queue) DoneAfter(key string, forget bool, d time.Duration) {
	q.mu.Lock()
	it := q.items[key]
	q.mu.Unlock()
	if it != nil {
		q.finish(it, forget, d)
	}
}

// get is Get for the package's own workers: it hands out the item itself,
// which stays in items while it is processed.
func (q *Queue) get() (*queueItem, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.getLocked()
}

func (q *Queue) getLocked() (*queueItem, bool) {
	for len(q.ready) == 0 && !q.shutdown {
		q.waiting++
		q.cond.Wait()
		q.waiting--
	}
	if q.shutdown {
		return nil, false
	}
	it := q.ready[0]
	q.ready[0] = nil
	q.ready = q.ready[1:]
	it.state = it.state&^qQueued | qProcessing
	q.active++
	return it, true
}

// finish does the work of DoneAfter on an item handed out by get.
func (q *Queue) finish(it *queueItem, forget bool, d time.Duration) {
	at := q.due(d)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.finishLocked(it, forget, d, at)
}

// finishGet is finish then get under one lock: a worker's step from one
// key to the next.
func (q *Queue) finishGet(it *queueItem, forget bool, d time.Duration) (*queueItem, bool) {
	at := q.due(d)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.finishLocked(it, forget, d, at)
	return q.getLocked()
}

// due returns the clock value d from now, for a positive d.
func (q *Queue) due(d time.Duration) int64 {
	if d > 0 {
		return q.clock() + int64(d)
	}
	return 0
}

func (q *Queue) finishLocked(it *queueItem, forget bool, d time.Duration, at int64) {
	if forget {
		it.failures = 0
	}
	if it.state&qProcessing != 0 {
		q.active--
		dirty := it.state&qDirty != 0
		it.state &^= qProcessing | qDirty
		if dirty && !q.shutdown {
			q.addLocked(it)
		}
	}
	switch {
	case q.shutdown || d < 0:
	case d == 0:
		q.addLocked(it)
	default:
		q.addAfterLocked(it, at)
	}
	q.release(it)
}

// Len returns the number of keys ready to be handed out.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready)
}

// Delayed returns the number of keys waiting for a delayed add.
func (q *Queue) Delayed() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.delayed)
}

// Pending returns when key's delayed add is due, and false when it has
// none.
func (q *Queue) Pending(key string) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if it := q.items[key]; it != nil && it.index >= 0 {
		return q.base.Add(time.Duration(it.at)), true
	}
	return time.Time{}, false
}

// ShutDown stops the queue: adds are ignored, Get returns ok false, and the
// timer goroutine ends before ShutDown returns. Keys being handled may
// still call Done. ShutDown is idempotent.
func (q *Queue) ShutDown() {
	q.mu.Lock()
	if q.shutdown {
		q.mu.Unlock()
		<-q.loopDone
		return
	}
	q.shutdown = true
	close(q.stop)
	q.cond.Broadcast()
	q.mu.Unlock()
	<-q.loopDone
}

// ShuttingDown reports whether ShutDown was called.
func (q *Queue) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shutdown
}

// delayLoop moves delayed keys to the ready queue when they are due.
func (q *Queue) delayLoop() {
	defer close(q.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		q.mu.Lock()
		now := q.clock()
		for len(q.delayed) > 0 && q.delayed[0].at <= now {
			it := heap.Pop(&q.delayed).(*queueItem)
			if !q.shutdown {
				q.addLocked(it)
			}
		}
		wait := time.Duration(-1)
		if len(q.delayed) > 0 {
			wait = time.Duration(q.delayed[0].at - now)
		}
		q.mu.Unlock()
		if wait < 0 {
			select {
			case <-q.wake:
			case <-q.stop:
				return
			}
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-q.wake:
			timer.Stop()
		case <-q.stop:
			timer.Stop()
			return
		}
	}
}

// queueHeap orders delayed items by due time.
type queueHeap []*queueItem

func (h queueHeap) Len() int           { return len(h) }
func (h queueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h queueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = int32(i)
	h[j].index = int32(j)
}
func (h *queueHeap) Push(x any) {
	it := x.(*queueItem)
	it.index = int32(len(*h))
	*h = append(*h, it)
}
func (h *queueHeap) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	old[n-1] = nil
	it.index = -1
	*h = old[:n-1]
	return it
}
