package convergetest

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Run is one handler run of one object by one owner (a controller
// replica), from Start to End on the monotonic clock of the process that
// recorded it. End is the zero time while the run goes on.
type Run struct {
	Object string
	Owner  string
	// State is the object's lifecycle state when the run began (BeginIn),
	// empty when not recorded (Begin).
	State string
	Start time.Time
	End   time.Time
}

// Overlap is two runs of one object at overlapping times: two replicas
// (or one, twice) handled the object at once.
type Overlap struct {
	A, B Run
}

// String names the object and both runs.
func (o Overlap) String() string {
	return fmt.Sprintf("object %q: run by %q from %s to %s overlaps run by %q from %s to %s",
		o.A.Object, o.A.Owner, o.A.Start.Format(time.RFC3339Nano), o.A.End.Format(time.RFC3339Nano),
		o.B.Owner, o.B.Start.Format(time.RFC3339Nano), o.B.End.Format(time.RFC3339Nano))
}

// Runs records handler runs as intervals and finds the runs of one object
// that overlap, the checker of "one handler per object at a time". Call
// Begin first thing in a handler and the function it returns last (with
// defer). The zero value is empty and ready; Runs is safe for concurrent
// use. Times come from time.Now, so runs recorded in one process (or one
// testing/synctest bubble) compare on its monotonic clock; runs of
// separate processes cannot be compared.
type Runs struct {
	mu   sync.Mutex
	runs []Run
}

// Begin records the start of a run of object by owner and returns the
// function that records its end; calling that function again does
// nothing.
func (r *Runs) Begin(object, owner string) (end func()) {
	return r.BeginIn(object, owner, "")
}

// BeginIn is Begin for a run of object in the lifecycle state state, for
// MostAtOnce.
func (r *Runs) BeginIn(object, owner, state string) (end func()) {
	r.mu.Lock()
	i := len(r.runs)
	r.runs = append(r.runs, Run{Object: object, Owner: owner, State: state, Start: time.Now()})
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			now := time.Now()
			r.mu.Lock()
			r.runs[i].End = now
			r.mu.Unlock()
		})
	}
}

// Len returns the number of runs recorded, finished or not.
func (r *Runs) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

// Runs returns a copy of the runs recorded, in the order they began.
func (r *Runs) Runs() []Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// Overlaps returns every pair of runs of one object whose intervals
// overlap, a run still going counting as going until now. A run that
// ends at the instant another begins does not overlap it. An empty
// result means no object was ever handled twice at once.
func (r *Runs) Overlaps() []Overlap {
	now := time.Now()
	byObject := map[string][]Run{}
	for _, run := range r.Runs() {
		byObject[run.Object] = append(byObject[run.Object], run)
	}
	end := func(run Run) time.Time {
		if run.End.IsZero() {
			return now
		}
		return run.End
	}
	var out []Overlap
	for _, runs := range byObject {
		// Sorted by start, a run overlaps each later one that starts
		// before it ends.
		slices.SortStableFunc(runs, func(a, b Run) int { return a.Start.Compare(b.Start) })
		for i := range runs {
			for j := i + 1; j < len(runs) && runs[j].Start.Before(end(runs[i])); j++ {
				out = append(out, Overlap{A: runs[i], B: runs[j]})
			}
		}
	}
	slices.SortFunc(out, func(a, b Overlap) int { return a.B.Start.Compare(b.B.Start) })
	return out
}

// MostAtOnce returns the most runs of objects in state (as BeginIn
// recorded it) that went on at one time, whatever their object and
// owner, a run still going counting as going until now: the checker of a
// limit on the handlers of a state (controller.Limit.Concurrent). A run
// that ends at the instant another begins does not go on with it.
func (r *Runs) MostAtOnce(state string) int {
	now := time.Now()
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, run := range r.Runs() {
		if run.State != state {
			continue
		}
		end := run.End
		if end.IsZero() {
			end = now
		}
		edges = append(edges, edge{run.Start, 1}, edge{end, -1})
	}
	// Ends before starts at one instant.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// Entry is one entry of an object into a state, made by the store at
// some time from Asked (when the call that made it was sent to the store)
// to Answered (when the store's answer came back), on the clock of the
// process that recorded it.
type Entry struct {
	Object          string
	Asked, Answered time.Time
}

// Entries records the entries of objects into a state, and finds the
// most made in any window of time: the checker of a limit on the rate at
// which objects enter a state (controller.Limit.Every and Burst). Call
// Add with the times around the store call that made the entry, on the
// store's clock: for a store in the process (MemStore, boltstore) that is
// time.Now around the call, beneath any fault a test injects. The zero
// value is empty and ready; Entries is safe for concurrent use.
type Entries struct {
	mu      sync.Mutex
	entries []Entry
}

// Add records an entry of object made between asked and answered.
func (e *Entries) Add(object string, asked, answered time.Time) {
	e.mu.Lock()
	e.entries = append(e.entries, Entry{Object: object, Asked: asked, Answered: answered})
	e.mu.Unlock()
}

// Len returns the number of entries recorded.
func (e *Entries) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.entries)
}

// Entries returns a copy of the entries recorded, in the order they were
// added.
func (e *Entries) Entries() []Entry {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.entries)
}

// MostIn returns the most entries made within one window of length
// window, [t, t+window) for some t. An entry counts in a window only when
// the whole span from its Asked to its Answered lies in it, so the result
// is exact for entries whose store answered at once (Asked equal to
// Answered, as in a testing/synctest bubble), and never more than the
// truth otherwise: a result above a limit is a certain breach of it.
func (e *Entries) MostIn(window time.Duration) int {
	entries := e.Entries()
	slices.SortFunc(entries, func(a, b Entry) int { return a.Asked.Compare(b.Asked) })
	most := 0
	for i, first := range entries {
		end := first.Asked.Add(window)
		n := 0
		for _, x := range entries[i:] {
			if !x.Asked.Before(end) {
				break
			}
			if x.Answered.Before(end) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}
