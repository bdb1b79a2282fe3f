package converge_test

import (
	"fmt"
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
