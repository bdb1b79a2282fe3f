package converge

import (
	"sync"
	"time"
)

// EventKind is the kind of a progress event.
type EventKind uint8

const (
	// EventQueued: the item's wait is over and it waits for a free worker.
	EventQueued EventKind = iota + 1
	// EventChecking: the item started (discover, goal, check).
	EventChecking
	// EventApplying: Apply (or ApplyDry) is running; Done and Total carry
	// the units reported so far (Total may be UnitsUnknown).
	EventApplying
	// EventDone: the item finished; Outcome says how.
	EventDone
	// EventFailed: the item failed; Err and Phase say where.
	EventFailed
	// EventSkipped: the item will not run (OutcomeWaiting or OutcomeNotRun).
	EventSkipped
)

var eventNames = [...]string{"", "queued", "checking", "applying", "done", "failed", "skipped"}

// String returns the lower-case name of the event kind.
func (k EventKind) String() string { return enumString("event", eventNames[:], uint8(k)) }

// Event is one progress event of a walk.
type Event struct {
	// Seq numbers the events of one walk from 1, in delivery order.
	Seq  uint64
	Time time.Time
	ID   ID
	Kind EventKind
	// Done and Total are the work units of EventApplying.
	Done, Total int
	// Outcome is set on EventDone, EventFailed and EventSkipped.
	Outcome Outcome
	// Err and Phase are set on EventFailed (Err also on a skipped item
	// that was not run).
	Err   error
	Phase Phase
	// WaitingFor is set on EventSkipped for a waiting item.
	WaitingFor []ID
}

// Observer receives the progress events of a walk.
//
// Ordering a consumer can rely on: events of one walk are delivered one at
// a time, from a single goroutine, in the order of Seq. For each item:
// EventQueued, EventChecking, zero or more EventApplying, then exactly one
// of EventDone or EventFailed; or, for an item that never starts, exactly
// one EventSkipped and nothing else. An item's EventDone is delivered before
// the EventQueued of any item that waited for it. Every event is delivered
// before the walk returns.
//
// Emitting never blocks the walk: events are buffered without bound while
// the observer is slow, so a slow observer costs memory, not time.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// emitter buffers events and delivers them from one goroutine.
type emitter struct {
	obs    Observer
	now    func() time.Time
	mu     sync.Mutex
	cond   sync.Cond
	buf    []Event
	seq    uint64
	closed bool
	done   chan struct{}
}

func newEmitter(obs Observer, now func() time.Time) *emitter {
	e := &emitter{obs: obs, now: now, done: make(chan struct{})}
	e.cond.L = &e.mu
	go e.loop()
	return e
}

func (e *emitter) emit(ev Event) {
	e.mu.Lock()
	e.seq++
	ev.Seq = e.seq
	if ev.Time.IsZero() {
		ev.Time = e.now()
	}
	e.buf = append(e.buf, ev)
	e.mu.Unlock()
	e.cond.Signal()
}

func (e *emitter) loop() {
	defer close(e.done)
	var batch []Event
	for {
		e.mu.Lock()
		for len(e.buf) == 0 && !e.closed {
			e.cond.Wait()
		}
		if len(e.buf) == 0 && e.closed {
			e.mu.Unlock()
			return
		}
		batch, e.buf = e.buf, batch[:0]
		e.mu.Unlock()
		for _, ev := range batch {
			e.obs.Observe(ev)
		}
		clear(batch)
	}
}

// close delivers what is buffered and waits for the delivering goroutine.
func (e *emitter) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.cond.Signal()
	<-e.done
}
