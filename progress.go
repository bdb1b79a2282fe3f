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
	// the units reported so far (Total may be WorkUnitsUnknown).
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
	// Seq numbers the events of one walk from 1, in the order they were
	// emitted; a gap means events were dropped (see Dropped).
	Seq uint64
	// Walk is the walk the event belongs to (Report.Walk).
	Walk WalkID
	// Revision is the revision of the TargetReconciler target whose pass
	// ran the walk (TargetEvent.Revision); 0 for a walk run on its own.
	Revision uint64
	Time     time.Time
	ID       ID
	Kind     EventKind
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
	// Dropped is how many events of the walk were dropped just before this
	// one because the observer was too slow (see Observer); usually 0.
	Dropped int
}

// Observer receives the progress events of a walk.
//
// Ordering a consumer can rely on: events of one walk are delivered one at
// a time, from a single goroutine, in the order of Seq. For each item:
// EventQueued, EventChecking, zero or more EventApplying, then exactly one
// of EventDone or EventFailed; or, for an item that never starts, exactly
// one EventSkipped and nothing else. An item's EventDone is delivered before
// the EventQueued of any item that waited for it.
//
// Observing never slows the walk. Events wait in a buffer of
// WalkerConfig.EventBuffer events while the observer is busy; when it is full,
// the oldest waiting event is dropped, and the next event delivered says
// how many were dropped before it (Event.Dropped, and a gap in Seq). Once
// its items are done, a walk waits up to WalkerConfig.EventDrain for the
// observer to take the events still waiting, so an observer that keeps up
// gets every event before the walk returns. After that the walk returns
// anyway: the events not delivered are counted in Report.EventsDropped,
// and the observer gets no more events of that walk (at most the one it
// was being handed at that moment). An Observe call that never returns
// holds only the goroutine that delivers that walk's events.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// emitter stamps a walk's events and hands them to a mailbox that delivers
// them to the observer.
type emitter struct {
	walk WalkID
	rev  uint64
	now  func() time.Time
	box  *mailbox[Event]
}

func newEmitter(obs Observer, cfg *WalkerConfig, now func() time.Time, walk WalkID, rev uint64) *emitter {
	return &emitter{walk: walk, rev: rev, now: now,
		box: newMailbox(cfg.EventBuffer, func(ev Event, seq uint64, dropped int) {
			ev.Seq, ev.Dropped = seq, dropped
			obs.Observe(ev)
		})}
}

func (e *emitter) emit(ev Event) {
	ev.Walk, ev.Revision = e.walk, e.rev
	if ev.Time.IsZero() {
		ev.Time = e.now()
	}
	e.box.push(ev)
}

// mailbox hands values to one consumer from a goroutine of its own, in
// order, without ever blocking the sender: it holds at most limit values,
// and when it is full it drops the oldest, counting it against the next
// value delivered. The goroutine starts with the first value.
type mailbox[E any] struct {
	deliver func(v E, seq uint64, dropped int)
	limit   int

	mu      sync.Mutex
	queue   []boxed[E]
	seq     uint64 // values pushed
	lost    int    // values never delivered
	started bool
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

type boxed[E any] struct {
	v       E
	seq     uint64
	dropped int
}

func newMailbox[E any](limit int, deliver func(E, uint64, int)) *mailbox[E] {
	return &mailbox[E]{deliver: deliver, limit: max(limit, 1),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (m *mailbox[E]) push(v E) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.seq++
	var carry int
	if len(m.queue) == m.limit {
		// Drop the oldest: the value after it says so.
		carry = m.queue[0].dropped + 1
		m.lost++
		m.queue[0] = boxed[E]{}
		m.queue = m.queue[1:]
	}
	m.queue = append(m.queue, boxed[E]{v: v, seq: m.seq})
	m.queue[0].dropped += carry
	if !m.started {
		m.started = true
		go m.loop()
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *mailbox[E]) loop() {
	defer close(m.done)
	for {
		m.mu.Lock()
		for len(m.queue) == 0 && !m.closed {
			m.mu.Unlock()
			<-m.wake
			m.mu.Lock()
		}
		if len(m.queue) == 0 {
			m.mu.Unlock()
			return
		}
		b := m.queue[0]
		m.queue[0] = boxed[E]{}
		m.queue = m.queue[1:]
		m.mu.Unlock()
		m.deliver(b.v, b.seq, b.dropped)
	}
}

// shut accepts no more values; the goroutine delivers what is queued and
// ends.
func (m *mailbox[E]) shut() {
	m.mu.Lock()
	m.closed = true
	started := m.started
	m.mu.Unlock()
	if !started {
		return
	}
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// finished is closed when the goroutine has delivered everything, or nil
// when it never started.
func (m *mailbox[E]) finished() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return nil
	}
	return m.done
}

// abandon drops what is still queued and returns how many values were
// never delivered in all.
func (m *mailbox[E]) abandon() int {
	m.mu.Lock()
	m.closed = true
	m.lost += len(m.queue)
	clear(m.queue)
	m.queue = nil
	lost := m.lost
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
	return lost
}

// closeMailboxes shuts every mailbox, waits up to drain for their
// consumers to take what is queued, and abandons the rest. It returns the
// values each never delivered.
func closeMailboxes[E any](drain time.Duration, boxes ...*mailbox[E]) []int {
	for _, m := range boxes {
		m.shut()
	}
	var timeout <-chan time.Time
	for _, m := range boxes {
		done := m.finished()
		if done == nil {
			continue
		}
		if timeout == nil {
			t := time.NewTimer(drain)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-done:
			continue
		case <-timeout:
		}
		break // out of time: abandon the rest
	}
	lost := make([]int, len(boxes))
	for i, m := range boxes {
		lost[i] = m.abandon()
	}
	return lost
}
