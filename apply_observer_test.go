package converge_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// chain returns a graph of n fake items in a row.
func chain(n int) *converge.Graph {
	g := converge.NewGraph()
	for i := range n {
		var deps []converge.ID
		if i > 0 {
			deps = append(deps, converge.ID(fmt.Sprint("i", i-1)))
		}
		g.Add((&convergetest.Item{Key: converge.ID(fmt.Sprint("i", i)), Goal: "x"}).Node(), converge.Present, deps...)
	}
	return g
}

func TestApplyBlockedObserverDoesNotStallWalk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		var got []converge.Event
		w, err := converge.NewWalker(converge.WalkerConfig{EventBuffer: 4, Observer: converge.ObserverFunc(func(e converge.Event) {
			mu.Lock()
			got = append(got, e)
			mu.Unlock()
			<-release // blocks until the test ends
		})})
		require.NoError(t, err)
		start := time.Now()
		rep, err := w.Apply(t.Context(), chain(20))
		require.NoError(t, err)
		assert.Equal(t, converge.DefaultEventDrain, time.Since(start), "the walk waited for the observer no longer than EventDrain")
		assert.Equal(t, 20, rep.Count(converge.OutcomeChanged))
		assert.Equal(t, 20*4-1, rep.EventsDropped, "every event but the first, which the observer holds, was dropped")

		close(release) // the observer's callback returns: its goroutine ends
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		assert.Len(t, got, 1, "an abandoned observer gets nothing more")
	})
}

func TestApplySlowObserverIsToldWhatWasDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var got []converge.Event
		w, err := converge.NewWalker(converge.WalkerConfig{EventBuffer: 8, Parallelism: 1, Observer: converge.ObserverFunc(func(e converge.Event) {
			got = append(got, e)
			if len(got) == 1 {
				<-release // busy with the first event it gets
			}
		})})
		require.NoError(t, err)
		done := make(chan *converge.Report)
		go func() {
			rep, err := w.Apply(t.Context(), chain(10))
			assert.NoError(t, err)
			done <- rep
		}()
		synctest.Wait() // every item is done; the walk waits for the observer
		close(release)
		rep := <-done

		require.LessOrEqual(t, len(got), 1+8, "the event it was busy with and the 8 newest")
		dropped, seq := 0, uint64(0)
		for _, e := range got {
			assert.Equal(t, seq+1+uint64(e.Dropped), e.Seq, "Dropped is the gap in Seq before the event")
			dropped += e.Dropped
			seq = e.Seq
		}
		assert.Positive(t, dropped)
		assert.Equal(t, uint64(10*4), seq, "the newest event is kept")
		last := got[len(got)-1]
		assert.Equal(t, converge.EventDone, last.Kind)
		assert.Equal(t, converge.ID("i9"), last.ID)
		assert.Equal(t, dropped, rep.EventsDropped)
	})
}

// TestApplyEventsOrderFanIn: the workers of a parallel walk release the
// items after theirs without the walk's lock, so two workers finishing
// two dependencies of one item race to queue it; whichever queues it, the
// EventDone of both precedes its EventQueued. Converged items run in
// batches, so many items finish at once.
func TestApplyEventsOrderFanIn(t *testing.T) {
	const roots, sinks, fanIn = 200, 100, 8
	r := rand.New(rand.NewPCG(11, 11))
	g := converge.NewGraph()
	deps := make(map[converge.ID][]converge.ID, sinks)
	for k := range roots {
		g.Add((&convergetest.Item{Key: converge.ID(fmt.Sprint("root-", k)), Value: "x", Goal: "x"}).Node(), converge.Present)
	}
	for k := range sinks {
		id := converge.ID(fmt.Sprint("sink-", k))
		for _, d := range r.Perm(roots)[:fanIn] {
			deps[id] = append(deps[id], converge.ID(fmt.Sprint("root-", d)))
		}
		g.Add((&convergetest.Item{Key: id, Value: "x", Goal: "x"}).Node(), converge.Present, deps[id]...)
	}
	for round := range 20 {
		var mu sync.Mutex
		pos := map[converge.ID]map[converge.EventKind]int{}
		n := 0
		w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 8, Observer: converge.ObserverFunc(func(e converge.Event) {
			mu.Lock()
			defer mu.Unlock()
			if pos[e.ID] == nil {
				pos[e.ID] = map[converge.EventKind]int{}
			}
			pos[e.ID][e.Kind] = n
			n++
		})})
		require.NoError(t, err)
		rep, err := w.Apply(t.Context(), g)
		require.NoError(t, err)
		require.Equal(t, roots+sinks, rep.Count(converge.OutcomeUnchanged))
		mu.Lock()
		for id, ds := range deps {
			queued, ok := pos[id][converge.EventQueued]
			require.True(t, ok, "round %d: %s never queued", round, id)
			for _, d := range ds {
				done, ok := pos[d][converge.EventDone]
				require.True(t, ok, "round %d: %s never done", round, d)
				require.Less(t, done, queued, "round %d: %s queued before %s was done", round, id, d)
			}
		}
		mu.Unlock()
	}
}

// TestApplyWaitingFanIn: when a failed item and a converged one are the
// last two dependencies of an item, the worker of the failed item records
// the block under the walk's lock while the other lowers the wait count
// without it; whichever ends the wait, the item is reported waiting for
// exactly the failed ones, and so are the items after it.
func TestApplyWaitingFanIn(t *testing.T) {
	const roots, mids, tops, fanIn = 200, 100, 40, 6
	r := rand.New(rand.NewPCG(12, 12))
	g := converge.NewGraph()
	deps := map[converge.ID][]converge.ID{}
	failed := map[converge.ID]bool{}
	for k := range roots {
		id := converge.ID(fmt.Sprint("root-", k))
		it := &convergetest.Item{Key: id, Value: "x", Goal: "x"}
		if k%25 == 0 {
			it.FailAt(converge.PhaseDiscover, -1, nil)
			failed[id] = true
		}
		g.Add(it.Node(), converge.Present)
	}
	layer := func(name string, n, below int, prefix string) {
		for k := range n {
			id := converge.ID(fmt.Sprint(name, "-", k))
			for _, d := range r.Perm(below)[:fanIn] {
				deps[id] = append(deps[id], converge.ID(fmt.Sprint(prefix, "-", d)))
			}
			g.Add((&convergetest.Item{Key: id, Value: "x", Goal: "x"}).Node(), converge.Present, deps[id]...)
		}
	}
	layer("mid", mids, roots, "root")
	layer("top", tops, mids, "mid")
	for round := range 20 {
		w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 8})
		require.NoError(t, err)
		rep, err := w.Apply(t.Context(), g)
		require.Error(t, err)
		for _, it := range rep.Items {
			var want []converge.ID
			for _, d := range deps[it.ID] {
				if dr, _ := rep.Item(d); dr.Outcome == converge.OutcomeFailed || dr.Outcome == converge.OutcomeWaiting {
					want = append(want, d)
				}
			}
			switch {
			case failed[it.ID]:
				require.Equal(t, converge.OutcomeFailed, it.Outcome, "round %d: %s", round, it.ID)
			case len(want) > 0:
				require.Equal(t, converge.OutcomeWaiting, it.Outcome, "round %d: %s", round, it.ID)
				require.ElementsMatch(t, want, it.WaitingFor, "round %d: %s", round, it.ID)
			default:
				require.Equal(t, converge.OutcomeUnchanged, it.Outcome, "round %d: %s: %v", round, it.ID, it.Err)
			}
		}
	}
}
