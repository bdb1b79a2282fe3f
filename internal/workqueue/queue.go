// Package workqueue is the work queue of the fleet controller: string keys,
// merged adds, one handler per key at a time, delayed adds that keep the
// earliest time, and per-key exponential backoff.
package workqueue

import (
	"container/heap"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/convergekit/converge"
)

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
// usable; call New. A Queue must be shut down to release its timer
// goroutine.
type Queue[E any] struct {
	backoff converge.Backoff

	mu       sync.Mutex
	cond     sync.Cond
	waiting  int // goroutines in cond.Wait: Signal only when someone waits
	items    map[string]*Item[E]
	ready    []*Item[E] // ready[head:] wait, oldest first
	head     int
	delayed  itemHeap[E]
	shutdown bool
	active   int // keys handed out and not Done
	rng      *rand.Rand

	wake     chan struct{}
	stop     chan struct{}
	loopDone chan struct{}
	base     time.Time // origin of clock
	// newItem, when set, supplies the item of a key that has none, so the
	// caller can keep it in the same allocation as its own entry. It is
	// called with mu held and returns nil for keys it does not know.
	newItem func(key string) *Item[E]
	// observe, when set, hears of every key that becomes ready; see
	// SetObserver.
	observe func(depth int)
}

// SetObserver makes the queue call fn, with its lock held, whenever a
// key becomes ready, with the number of keys ready then (an add that
// merged with a waiting key does not call it). A hand-out does not call
// it: Len tells how many keys wait. fn must be quick and must not call
// the queue. Call SetObserver before the queue is used.
func (q *Queue[E]) SetObserver(fn func(depth int)) {
	q.mu.Lock()
	q.observe = fn
	q.mu.Unlock()
}

// clock returns the monotonic nanoseconds since the queue was made: one
// clock read, cheaper than time.Now.
func (q *Queue[E]) clock() int64 { return int64(time.Since(q.base)) }

const (
	qQueued     uint8 = 1 << iota // in ready
	qProcessing                   // handed out by Get, not Done yet
	qDirty                        // added while processing: queue again on Done
)

// Item is the queue's record of one key. Entry is the caller's own data
// about the key (see New); only the goroutine that holds the key (between
// Get and Done) may change it. Make one with NewItem.
type Item[E any] struct {
	// Key is the key the item stands for.
	Key string
	// Entry is the caller's data, nil when the queue made the item itself.
	Entry *E

	at       int64 // due time of the pending delayed add (see clock)
	ready    int64 // when it became ready (see clock) plus one, with an observer; 0: unknown
	index    int32 // position in delayed, -1 when none
	failures int32
	state    uint8
}

// Waited returns how long it waited between becoming ready and being
// handed out by GetItem or FinishGet; 0 for a queue without an observer
// (SetObserver), which does not read the clock for it. Call it between
// the hand-out and the next Done.
func (q *Queue[E]) Waited(it *Item[E]) time.Duration {
	if q.observe == nil || it.ready == 0 {
		return 0
	}
	return time.Duration(max(q.clock()-(it.ready-1), 0))
}

// Clock returns the queue's clock: the monotonic time since the queue was
// made, the clock of ReadyAt.
func (q *Queue[E]) Clock() time.Duration { return time.Duration(q.clock()) }

// ReadyAt returns when it last became ready, on the queue's clock
// (Clock), and false for a queue without an observer (SetObserver),
// which does not read the clock for it.
func (it *Item[E]) ReadyAt() (time.Duration, bool) {
	return time.Duration(it.ready - 1), it.ready != 0
}

// NewItem returns the item of key carrying entry, for a newItem function of
// New to hand out.
func NewItem[E any](key string, entry *E) Item[E] {
	return Item[E]{Key: key, Entry: entry, index: -1}
}

// New returns a running Queue whose AddRateLimited uses b (the zero Backoff
// means converge.DefaultBackoff). newItem, when not nil, supplies the item
// of a key the queue has no item for (nil for keys the caller does not
// know), so that the caller keeps it in the same allocation as its own data
// and reaches that data from the item without a lookup. New panics if b is
// invalid.
func New[E any](b converge.Backoff, newItem func(key string) *Item[E]) *Queue[E] {
	if err := b.Validate(); err != nil {
		panic("converge: workqueue.New: " + err.Error())
	}
	q := &Queue[E]{
		backoff:  b,
		newItem:  newItem,
		items:    map[string]*Item[E]{},
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

func (q *Queue[E]) item(key string) *Item[E] {
	it := q.items[key]
	if it == nil {
		if q.newItem != nil {
			it = q.newItem(key)
		}
		if it == nil {
			it = &Item[E]{Key: key, index: -1}
		}
		q.items[key] = it
	}
	return it
}

// release forgets an item that holds no information any more.
func (q *Queue[E]) release(it *Item[E]) {
	if it.state == 0 && it.index < 0 && it.failures == 0 {
		delete(q.items, it.Key)
	}
}

// Add asks for key to be handled as soon as possible. It does nothing after
// ShutDown.
func (q *Queue[E]) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	q.addLocked(q.item(key))
}

func (q *Queue[E]) addLocked(it *Item[E]) {
	switch {
	case it.state&qProcessing != 0:
		it.state |= qDirty
	case it.state&qQueued != 0:
	default:
		it.state |= qQueued
		q.ready = append(q.ready, it)
		if q.observe != nil {
			it.ready = q.clock() + 1
			q.observe(q.readyLen())
		}
		if q.waiting > 0 {
			q.cond.Signal()
		}
	}
}

// AddAfter asks for key to be handled after d (at once when d <= 0). When
// the key already has a later pending time, the earlier one replaces it;
// an earlier pending time is kept.
func (q *Queue[E]) AddAfter(key string, d time.Duration) {
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

func (q *Queue[E]) addAfterLocked(it *Item[E], at int64) {
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
func (q *Queue[E]) AddRateLimited(key string) time.Duration {
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
func (q *Queue[E]) Failures(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if it := q.items[key]; it != nil {
		return int(it.failures)
	}
	return 0
}

// Forget resets the backoff of key. A pending delayed add is kept.
func (q *Queue[E]) Forget(key string) {
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
func (q *Queue[E]) Get() (key string, ok bool) {
	it, ok := q.GetItem()
	if !ok {
		return "", false
	}
	return it.Key, true
}

// Done marks key as handled. If it was added while being handled, it is
// queued again.
func (q *Queue[E]) Done(key string) {
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
func (q *Queue[E]) DoneAfter(key string, forget bool, d time.Duration) {
	q.mu.Lock()
	it := q.items[key]
	q.mu.Unlock()
	if it != nil {
		q.finish(it, forget, d)
	}
}

// GetItem is Get handing out the item itself (with its Entry), which stays
// the queue's while it is processed; finish it with FinishGet or DoneAfter.
func (q *Queue[E]) GetItem() (*Item[E], bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.getLocked()
}

func (q *Queue[E]) getLocked() (*Item[E], bool) {
	for q.readyLen() == 0 && !q.shutdown {
		q.waiting++
		q.cond.Wait()
		q.waiting--
	}
	if q.shutdown {
		return nil, false
	}
	it := q.pop()
	it.state = it.state&^qQueued | qProcessing
	q.active++
	return it, true
}

// finish does the work of DoneAfter on an item handed out by GetItem.
func (q *Queue[E]) finish(it *Item[E], forget bool, d time.Duration) {
	at := q.due(d)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.finishLocked(it, forget, d, at)
}

// FinishGet is DoneAfter on an item handed out by GetItem, then GetItem,
// under one lock: a worker's step from one key to the next.
func (q *Queue[E]) FinishGet(it *Item[E], forget bool, d time.Duration) (*Item[E], bool) {
	at := q.due(d)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.finishLocked(it, forget, d, at)
	return q.getLocked()
}

// FinishTryGet is FinishGet that does not wait: when no key is ready (or
// the queue is shut down) it finishes it and returns false, so that the
// caller can do what it must before it waits in GetItem. A positive now
// is a reading of the queue's clock (Clock) the caller took since it
// finished handling it: d counts from it, and the queue reads no clock of
// its own.
func (q *Queue[E]) FinishTryGet(it *Item[E], forget bool, d, now time.Duration) (*Item[E], bool) {
	var at int64
	switch {
	case d <= 0:
	case now > 0:
		at = int64(now + d)
	default:
		at = q.due(d)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.finishLocked(it, forget, d, at)
	if q.readyLen() == 0 || q.shutdown {
		return nil, false
	}
	return q.getLocked()
}

// due returns the clock value d from now, for a positive d.
func (q *Queue[E]) due(d time.Duration) int64 {
	if d > 0 {
		return q.clock() + int64(d)
	}
	return 0
}

func (q *Queue[E]) finishLocked(it *Item[E], forget bool, d time.Duration, at int64) {
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

// pop takes the oldest ready item out of ready, which must not be empty.
// ready keeps its array: emptied, it starts again at its front, and once
// the items taken out fill at least half of it the waiting ones move to
// the front, so a queue that never empties does not grow without bound.
func (q *Queue[E]) pop() *Item[E] {
	it := q.ready[q.head]
	q.ready[q.head] = nil
	q.head++
	switch {
	case q.head == len(q.ready):
		q.ready, q.head = q.ready[:0], 0
	case q.head >= 1024 && 2*q.head >= len(q.ready):
		n := copy(q.ready, q.ready[q.head:])
		clear(q.ready[n:])
		q.ready, q.head = q.ready[:n], 0
	}
	return it
}

// Len returns the number of keys ready to be handed out.
func (q *Queue[E]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.readyLen()
}

// readyLen is the number of ready keys; callers hold q.mu.
func (q *Queue[E]) readyLen() int { return len(q.ready) - q.head }

// Delayed returns the number of keys waiting for a delayed add.
func (q *Queue[E]) Delayed() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.delayed)
}

// Pending returns when key's delayed add is due, and false when it has
// none.
func (q *Queue[E]) Pending(key string) (time.Time, bool) {
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
func (q *Queue[E]) ShutDown() {
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
func (q *Queue[E]) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shutdown
}

// delayLoop moves delayed keys to the ready queue when they are due.
func (q *Queue[E]) delayLoop() {
	defer close(q.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		q.mu.Lock()
		now := q.clock()
		for len(q.delayed) > 0 && q.delayed[0].at <= now {
			it := heap.Pop(&q.delayed).(*Item[E])
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

// itemHeap orders delayed items by due time.
type itemHeap[E any] []*Item[E]

func (h itemHeap[E]) Len() int           { return len(h) }
func (h itemHeap[E]) Less(i, j int) bool { return h[i].at < h[j].at }
func (h itemHeap[E]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = int32(i)
	h[j].index = int32(j)
}
func (h *itemHeap[E]) Push(x any) {
	it := x.(*Item[E])
	it.index = int32(len(*h))
	*h = append(*h, it)
}
func (h *itemHeap[E]) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	old[n-1] = nil
	it.index = -1
	*h = old[:n-1]
	return it
}
