package workqueue_test

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/workqueue"
)

func TestQueueMergesRepeatedAdds(t *testing.T) {
	q := workqueue.New[struct{}](converge.Backoff{}, nil)
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	q.Add("a")
	assert.Equal(t, 2, q.Len())
	k, ok := q.Get()
	require.True(t, ok)
	assert.Equal(t, "a", k, "first ready first out")
	k, _ = q.Get()
	assert.Equal(t, "b", k)
	q.Done("a")
	q.Done("b")
	assert.Equal(t, 0, q.Len())
}

func TestQueueAddDuringHandlingRunsOnceMore(t *testing.T) {
	q := workqueue.New[struct{}](converge.Backoff{}, nil)
	defer q.ShutDown()
	q.Add("a")
	k, _ := q.Get()
	require.Equal(t, "a", k)
	q.Add("a")
	q.Add("a")
	assert.Equal(t, 0, q.Len(), "never handed out twice at once")
	q.Done("a")
	assert.Equal(t, 1, q.Len(), "the adds during handling make one more run")
	k, _ = q.Get()
	assert.Equal(t, "a", k)
	q.Done("a")
	assert.Equal(t, 0, q.Len())
	q.Done("a") // a stray Done is harmless
	assert.Equal(t, 0, q.Len())
}

func TestQueueAddAfterKeepsEarliest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[struct{}](converge.Backoff{}, nil)
		defer q.ShutDown()
		start := time.Now()
		q.AddAfter("a", 10*time.Second)
		q.AddAfter("a", 3*time.Second)
		q.AddAfter("a", 20*time.Second)
		at, ok := q.Pending("a")
		require.True(t, ok)
		assert.Equal(t, start.Add(3*time.Second), at)
		assert.Equal(t, 1, q.Delayed())

		k, _ := q.Get()
		assert.Equal(t, "a", k)
		assert.Equal(t, 3*time.Second, time.Since(start))
		q.Done("a")
		synctest.Wait()
		assert.Equal(t, 0, q.Len(), "the later adds were merged into the earliest")
		assert.Equal(t, 0, q.Delayed())
		_, ok = q.Pending("a")
		assert.False(t, ok)

		q.AddAfter("b", 0)
		assert.Equal(t, 1, q.Len(), "a non-positive delay adds at once")
	})
}

func TestQueueDelayedAddWhileHandling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[struct{}](converge.Backoff{}, nil)
		defer q.ShutDown()
		q.Add("a")
		k, _ := q.Get()
		q.AddAfter(k, time.Second)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, 0, q.Len(), "due while handled: waits for Done")
		q.Done(k)
		assert.Equal(t, 1, q.Len())
	})
}

func TestQueueRateLimitedBackoffGrowsAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[struct{}](converge.Backoff{Base: time.Second, Max: 4 * time.Second}, nil)
		defer q.ShutDown()
		var delays []time.Duration
		for range 5 {
			start := time.Now()
			q.AddRateLimited("a")
			k, _ := q.Get()
			delays = append(delays, time.Since(start))
			q.Done(k)
		}
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}, delays)
		assert.Equal(t, 5, q.Failures("a"))
		q.Forget("a")
		assert.Equal(t, 0, q.Failures("a"))
		start := time.Now()
		q.AddRateLimited("a")
		k, _ := q.Get()
		assert.Equal(t, time.Second, time.Since(start), "backoff starts over after a success")
		q.Done(k)
	})
}

func TestQueueNewPanicsOnInvalidBackoff(t *testing.T) {
	assert.Panics(t, func() { workqueue.New[struct{}](converge.Backoff{Jitter: 2}, nil) })
}

func TestQueueShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[struct{}](converge.Backoff{}, nil)
		var wg sync.WaitGroup
		got := make(chan bool, 3)
		for range 3 {
			wg.Go(func() {
				_, ok := q.Get()
				got <- ok
			})
		}
		synctest.Wait()
		q.AddAfter("later", time.Hour)
		q.ShutDown()
		wg.Wait()
		close(got)
		for ok := range got {
			assert.False(t, ok)
		}
		assert.True(t, q.ShuttingDown())
		q.Add("x")
		q.AddRateLimited("x")
		assert.Equal(t, 0, q.Len(), "adds after shutdown are ignored")
		_, ok := q.Get()
		assert.False(t, ok)
		q.ShutDown() // idempotent
	})
}

func TestQueueConcurrentNoOverlap(t *testing.T) {
	q := workqueue.New[struct{}](converge.Backoff{Base: time.Millisecond, Max: time.Millisecond}, nil)
	var mu sync.Mutex
	busy := map[string]bool{}
	overlaps := 0
	handled := 0
	var workers sync.WaitGroup
	for range 4 {
		workers.Go(func() {
			for {
				k, ok := q.Get()
				if !ok {
					return
				}
				mu.Lock()
				if busy[k] {
					overlaps++
				}
				busy[k] = true
				handled++
				mu.Unlock()
				mu.Lock()
				busy[k] = false
				mu.Unlock()
				q.Done(k)
			}
		})
	}
	var adders sync.WaitGroup
	for a := range 4 {
		adders.Go(func() {
			for i := range 2000 {
				q.Add(string(rune('a' + (i+a)%7)))
			}
		})
	}
	adders.Wait()
	q.ShutDown()
	workers.Wait()
	assert.Zero(t, overlaps)
	assert.Positive(t, handled)
}

func TestQueueDoneAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[struct{}](converge.Backoff{Base: time.Second, Max: time.Minute}, nil)
		defer q.ShutDown()
		q.AddRateLimited("a")
		q.AddRateLimited("a")
		k, _ := q.Get()
		require.Equal(t, 2, q.Failures(k))
		start := time.Now()
		q.DoneAfter(k, true, 10*time.Second)
		assert.Equal(t, 0, q.Failures("a"), "forgotten")
		at, ok := q.Pending("a")
		require.True(t, ok)
		assert.Equal(t, start.Add(10*time.Second), at)

		k, _ = q.Get()
		assert.Equal(t, start.Add(10*time.Second), time.Now())
		q.Add(k) // added while handled: runs once more, whatever DoneAfter says
		q.DoneAfter(k, false, -1)
		assert.Equal(t, 1, q.Len())
		k, _ = q.Get()
		q.DoneAfter(k, false, 0)
		assert.Equal(t, 1, q.Len(), "a zero delay queues it at once")
		k, _ = q.Get()
		q.DoneAfter(k, false, -1)
		assert.Equal(t, 0, q.Len())
		assert.Equal(t, 0, q.Delayed())
		q.DoneAfter("unknown", true, time.Second) // harmless
		assert.Equal(t, 0, q.Delayed())
	})
}

func TestQueueObserverSeesDepthAndUnmergedAdds(t *testing.T) {
	q := workqueue.New[struct{}](converge.Backoff{}, nil)
	defer q.ShutDown()
	var depths []int
	q.SetObserver(func(depth int) { depths = append(depths, depth) })
	q.Add("a")
	q.Add("b")
	q.Add("a") // merged: not an add
	k, _ := q.Get()
	assert.Equal(t, 1, q.Len(), "a hand-out is not observed; Len tells")
	q.Add(k) // while processing: queued again on Done
	q.Done(k)
	assert.Equal(t, []int{1, 2, 2}, depths, "the unmerged adds, with the depth after each")
}

// TestQueueKeepsOrderAcrossReuse hands keys out while more are added, so
// that the ready list is emptied, reused from its front and compacted
// (the waiting keys moved to the front once those handed out fill half of
// it): the keys come out in the order they became ready, and Len counts
// those waiting.
func TestQueueKeepsOrderAcrossReuse(t *testing.T) {
	q := workqueue.New[struct{}](converge.Backoff{}, nil)
	defer q.ShutDown()
	var want, got []string
	add := func(n int) {
		for range n {
			k := fmt.Sprintf("k%05d", len(want))
			want = append(want, k)
			q.Add(k)
		}
	}
	take := func(n int) {
		for range n {
			k, ok := q.Get()
			require.True(t, ok)
			got = append(got, k)
			q.Done(k)
		}
	}
	add(3)
	take(3) // emptied: reused from the front
	add(3000)
	take(1600) // more than half taken out: compacted
	add(500)
	require.Equal(t, len(want)-len(got), q.Len())
	take(1000)
	add(2)
	require.Equal(t, len(want)-len(got), q.Len())
	take(len(want) - len(got))
	assert.Equal(t, want, got, "first ready first out")
	assert.Equal(t, 0, q.Len())
}

// TestQueueDelayedKeysComeOutByDueTime adds many keys after shuffled
// delays, moves some of them earlier, and lets the time pass: each key is
// ready at its earliest due time, so they come out in the order of those
// times.
func TestQueueDelayedKeysComeOutByDueTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[struct{}](converge.Backoff{}, nil)
		defer q.ShutDown()
		const n = 500
		rng := rand.New(rand.NewPCG(1, 2))
		due := map[string]time.Duration{}
		for _, i := range rng.Perm(n) {
			k := fmt.Sprintf("k%03d", i)
			due[k] = time.Duration(2*i+2) * time.Second
			q.AddAfter(k, due[k])
		}
		for _, i := range rng.Perm(n)[:n/3] {
			k := fmt.Sprintf("k%03d", i)
			d := time.Duration(2*(n-i)+1) * time.Second // earlier for the later half only
			due[k] = min(due[k], d)
			q.AddAfter(k, d)
		}
		want := slices.SortedFunc(maps.Keys(due), func(a, b string) int { return cmp.Compare(due[a], due[b]) })
		start := time.Now()
		var got []string
		for range n {
			k, ok := q.Get()
			require.True(t, ok)
			assert.Equal(t, due[k], time.Since(start), "%s ready when due", k)
			got = append(got, k)
			q.Done(k)
		}
		assert.Equal(t, want, got)
		assert.Equal(t, 0, q.Delayed())
	})
}

func TestQueueFinishTryGetNeverWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[struct{}](converge.Backoff{}, nil)
		defer q.ShutDown()
		q.Add("a")
		q.Add("b")
		a, ok := q.GetItem()
		require.True(t, ok)
		b, ok := q.FinishTryGet(a, true, time.Minute, 0)
		require.True(t, ok, "b was ready")
		assert.Equal(t, "b", b.Key)
		start := time.Now()
		at, ok := q.Pending("a")
		require.True(t, ok)
		assert.Equal(t, start.Add(time.Minute), at, "d counts from the queue's own reading")

		// Nothing ready: b is finished, with its delay counted from the
		// caller's reading, and nothing is handed out.
		time.Sleep(time.Second)
		got, ok := q.FinishTryGet(b, true, time.Minute, q.Clock()-500*time.Millisecond)
		assert.False(t, ok)
		assert.Nil(t, got)
		at, ok = q.Pending("b")
		require.True(t, ok)
		assert.Equal(t, start.Add(time.Second+time.Minute-500*time.Millisecond), at, "d counts from the caller's reading")
		assert.Equal(t, 0, q.Len())

		a, ok = q.GetItem() // waits for a's minute
		require.True(t, ok)
		assert.Equal(t, "a", a.Key)
		q.ShutDown()
		got, ok = q.FinishTryGet(a, true, 0, 0)
		assert.False(t, ok, "shut down")
		assert.Nil(t, got)
	})
}
