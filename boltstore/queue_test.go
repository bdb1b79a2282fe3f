package boltstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
)

func claimedKeys(cs []converge.Claimed) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Record.Key)
	}
	return out
}

func TestFencedPut(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	st := openStore(t, tempPath(t), boltstore.Options{Now: clk.Now})
	v, err := st.Put(ctx, converge.StoreRecord{Key: "k", Value: raw(`1`)})
	require.NoError(t, err)
	a, err := st.Claim(ctx, "k", "a", time.Minute)
	require.NoError(t, err)
	v, err = st.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: raw(`2`), Token: a.Token}, converge.HistoryEntry{To: "a"})
	require.NoError(t, err, "the holder of the current lease writes")

	clk.Advance(2 * time.Minute)
	_, err = st.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: raw(`3`), Token: a.Token}, converge.HistoryEntry{To: "late"})
	require.ErrorIs(t, err, converge.ErrLeaseLost, "an expired lease fences the write")
	b, err := st.Claim(ctx, "k", "b", time.Minute)
	require.NoError(t, err)
	_, err = st.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: raw(`3`), Token: a.Token}, converge.HistoryEntry{To: "late"})
	require.ErrorIs(t, err, converge.ErrLeaseLost, "a lease taken over fences the write")
	_, err = st.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: raw(`4`), Token: b.Token})
	require.NoError(t, err)
	require.NoError(t, st.Release(ctx, b))
	_, err = st.Put(ctx, converge.StoreRecord{Key: "k", Version: v + 1, Value: raw(`5`), Token: b.Token})
	require.ErrorIs(t, err, converge.ErrLeaseLost, "a released lease fences the write")

	rec, err := st.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), rec.Version)
	assert.JSONEq(t, `4`, string(rec.Value))
	hist, err := st.History(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, tos(hist), "refused writes appended no history")
}

func TestClaimDue(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	st := openStore(t, tempPath(t), boltstore.Options{Now: clk.Now})
	for _, k := range []string{"obj/c", "obj/a", "obj/b", "other/x"} {
		_, err := st.Put(ctx, converge.StoreRecord{Key: k, Value: raw(`{}`)})
		require.NoError(t, err)
		clk.Advance(time.Second) // created one after the other: due in that order
	}
	got, err := st.ClaimDue(ctx, "obj/", "w1", time.Minute, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"obj/c", "obj/a"}, claimedKeys(got), "earliest due first, at most limit")
	for _, c := range got {
		assert.Equal(t, "w1", c.Lease.Owner)
		assert.True(t, clk.Now().Add(time.Minute).Equal(c.Lease.Expires), "expires %s", c.Lease.Expires)
		assert.Equal(t, uint64(1), c.Record.Version)
		assert.JSONEq(t, `{}`, string(c.Record.Value))
	}
	assert.NotEqual(t, got[0].Lease.Token, got[1].Lease.Token)

	more, err := st.ClaimDue(ctx, "obj/", "w2", time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"obj/b"}, claimedKeys(more), "claimed records are skipped")
	none, err := st.ClaimDue(ctx, "obj/", "w2", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, none)
	assert.NotNil(t, none)

	// Finish with a next time: due again then, not before.
	require.NoError(t, st.Finish(ctx, got[0].Lease, clk.Now().Add(10*time.Second)))
	// Finish with the zero time: not due until scheduled.
	require.NoError(t, st.Finish(ctx, got[1].Lease, time.Time{}))
	require.ErrorIs(t, st.Finish(ctx, got[1].Lease, time.Time{}), converge.ErrLeaseLost)
	none, err = st.ClaimDue(ctx, "obj/", "w2", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, none)
	clk.Advance(10 * time.Second)
	again, err := st.ClaimDue(ctx, "obj/", "w2", time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"obj/c"}, claimedKeys(again))
	assert.Greater(t, again[0].Lease.Token, got[0].Lease.Token)

	// Schedule makes a record due; a past time means at once.
	require.NoError(t, st.Schedule(ctx, "obj/a", clk.Now().Add(-time.Hour)))
	sched, err := st.ClaimDue(ctx, "obj/", "w3", time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"obj/a"}, claimedKeys(sched))
	require.ErrorIs(t, st.Schedule(ctx, "obj/missing", clk.Now()), converge.ErrStoreNotFound)

	// The dead owner's records are taken over once their leases expire.
	clk.Advance(time.Minute)
	taken, err := st.ClaimDue(ctx, "obj/", "w4", time.Minute, 10)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"obj/a", "obj/b", "obj/c"}, claimedKeys(taken))
	require.ErrorIs(t, st.Finish(ctx, more[0].Lease, time.Time{}), converge.ErrLeaseLost, "the old owner lost its lease")

	// other/ was never touched by the obj/ claims.
	other, err := st.ClaimDue(ctx, "", "w5", time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"other/x"}, claimedKeys(other))
}

func TestScheduleWhileClaimed(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	st := openStore(t, tempPath(t), boltstore.Options{Now: clk.Now})
	_, err := st.Put(ctx, converge.StoreRecord{Key: "k", Value: raw(`1`)})
	require.NoError(t, err)
	got, err := st.ClaimDue(ctx, "", "w", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)

	require.NoError(t, st.Schedule(ctx, "k", clk.Now().Add(5*time.Second)))
	none, err := st.ClaimDue(ctx, "", "x", time.Minute, 1)
	require.NoError(t, err)
	assert.Empty(t, none, "a claimed record is not due even when scheduled")
	require.NoError(t, st.Finish(ctx, got[0].Lease, clk.Now().Add(time.Hour)))
	clk.Advance(5 * time.Second)
	again, err := st.ClaimDue(ctx, "", "x", time.Minute, 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"k"}, claimedKeys(again), "Finish keeps the earlier time Schedule gave")

	// Schedule keeps an earlier due time.
	require.NoError(t, st.Finish(ctx, again[0].Lease, clk.Now().Add(time.Minute)))
	require.NoError(t, st.Schedule(ctx, "k", clk.Now().Add(time.Hour)))
	clk.Advance(time.Minute)
	later, err := st.ClaimDue(ctx, "", "x", time.Minute, 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"k"}, claimedKeys(later))

	// Release gives back the due time the record had when claimed.
	require.NoError(t, st.Release(ctx, later[0].Lease))
	back, err := st.ClaimDue(ctx, "", "x", time.Minute, 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"k"}, claimedKeys(back))

	// A deleted record leaves the queue; recreated, it is due at once.
	require.NoError(t, st.Finish(ctx, back[0].Lease, time.Time{}))
	rec, err := st.Get(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, st.Schedule(ctx, "k", clk.Now()))
	require.NoError(t, st.Delete(ctx, "k", rec.Version))
	none, err = st.ClaimDue(ctx, "", "x", time.Minute, 1)
	require.NoError(t, err)
	assert.Empty(t, none)
	_, err = st.Put(ctx, converge.StoreRecord{Key: "k", Value: raw(`1`)})
	require.NoError(t, err)
	fresh, err := st.ClaimDue(ctx, "", "x", time.Minute, 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"k"}, claimedKeys(fresh))
}

func TestClaimDueConcurrent(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, tempPath(t), boltstore.Options{})
	const n = 200
	for i := range n {
		_, err := st.Put(ctx, converge.StoreRecord{Key: fmt.Sprintf("q/%03d", i), Value: raw(`1`)})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			owner := fmt.Sprint("w", w)
			for {
				got, err := st.ClaimDue(ctx, "q/", owner, time.Hour, 7)
				if !assert.NoError(t, err) || len(got) == 0 {
					return
				}
				mu.Lock()
				for _, c := range got {
					assert.NotContains(t, seen, c.Record.Key, "claimed twice")
					seen[c.Record.Key] = owner
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Len(t, seen, n)
}

func TestWatch(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	st := openStore(t, tempPath(t), boltstore.Options{Now: clk.Now})
	var mu sync.Mutex
	var keys []string
	stop, err := st.Watch(ctx, "obj/", func(k string) {
		mu.Lock()
		keys = append(keys, k)
		mu.Unlock()
	})
	require.NoError(t, err)
	v, err := st.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: raw(`1`)})
	require.NoError(t, err)
	_, err = st.Put(ctx, converge.StoreRecord{Key: "other/b", Value: raw(`1`)})
	require.NoError(t, err)
	require.NoError(t, st.Schedule(ctx, "obj/a", clk.Now()))
	require.NoError(t, st.Delete(ctx, "obj/a", v))
	_, err = st.Put(ctx, converge.StoreRecord{Key: "obj/c", Value: raw(`1`)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(keys) > 0 && keys[len(keys)-1] == "obj/c"
	}, 5*time.Second, time.Millisecond)
	stop()
	mu.Lock()
	assert.NotContains(t, keys, "other/b")
	assert.Contains(t, keys, "obj/a")
	n := len(keys)
	mu.Unlock()
	_, err = st.Put(ctx, converge.StoreRecord{Key: "obj/d", Value: raw(`1`)})
	require.NoError(t, err)
	mu.Lock()
	assert.Len(t, keys, n, "fn is not called after stop returns")
	mu.Unlock()
	stop() // twice is harmless
}

// A watcher that does not keep up never slows writers: it is told to look
// at everything again.
func TestWatchOverflow(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, tempPath(t), boltstore.Options{})
	release := make(chan struct{})
	var mu sync.Mutex
	var keys []string
	stop, err := st.Watch(ctx, "", func(k string) {
		<-release
		mu.Lock()
		keys = append(keys, k)
		mu.Unlock()
	})
	require.NoError(t, err)
	defer stop()
	// One write to block the watcher in fn, then many in batches.
	_, err = st.Put(ctx, converge.StoreRecord{Key: "first", Value: raw(`1`)})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 700 {
				_, err := st.Put(ctx, converge.StoreRecord{Key: fmt.Sprintf("k/%d/%d", w, i), Value: raw(`1`)})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait() // the writers finished while fn was blocked
	close(release)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(keys) >= 2 && keys[len(keys)-1] == ""
	}, 5*time.Second, time.Millisecond)
}

func TestWatchEndsWithContextAndClose(t *testing.T) {
	st, err := boltstore.Open(tempPath(t), boltstore.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stop1, err := st.Watch(ctx, "", func(string) {})
	require.NoError(t, err)
	cancel()
	stop1() // returns once the goroutine is gone
	stop2, err := st.Watch(context.Background(), "", func(string) {})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	stop2()
	_, err = st.Watch(context.Background(), "", func(string) {})
	require.ErrorIs(t, err, boltstore.ErrClosed)
}
