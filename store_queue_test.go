package converge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

func mustPut(t *testing.T, s converge.Store, key string, version uint64, value string, h ...converge.HistoryEntry) uint64 {
	t.Helper()
	v, err := s.Put(context.Background(), converge.StoreRecord{Key: key, Version: version, Value: json.RawMessage(value)}, h...)
	require.NoError(t, err)
	return v
}

func claimKeys(t *testing.T, s converge.Queue, prefix, owner string, ttl time.Duration, limit int) ([]string, []converge.Claimed) {
	t.Helper()
	got, err := s.ClaimDue(context.Background(), prefix, owner, ttl, limit)
	require.NoError(t, err)
	keys := make([]string, len(got))
	for i, c := range got {
		keys[i] = c.Record.Key
		assert.Equal(t, c.Record.Key, c.Lease.Key)
		assert.Equal(t, owner, c.Lease.Owner)
	}
	return keys, got
}

func entries(tos ...string) []converge.HistoryEntry {
	h := make([]converge.HistoryEntry, len(tos))
	for i, to := range tos {
		h[i] = converge.HistoryEntry{To: to}
	}
	return h
}

func tos(h []converge.HistoryEntry) []string {
	out := make([]string, len(h))
	for i, e := range h {
		out[i] = e.To
	}
	return out
}

func TestMemStoreRetentionEntries(t *testing.T) {
	ctx := context.Background()
	many := make([]string, converge.DefaultHistoryEntries+10)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	tests := []struct {
		name   string
		keep   int
		writes [][]string
		want   []string
	}{
		{"newest kept across writes", 3, [][]string{{"a"}, {"b", "c"}, {"d"}, {"e"}}, []string{"c", "d", "e"}},
		{"newest kept within one write", 2, [][]string{{"a", "b", "c", "d"}}, []string{"c", "d"}},
		{"fewer than the limit", 5, [][]string{{"a"}, {"b"}}, []string{"a", "b"}},
		{"one entry", 1, [][]string{{"a", "b"}, {"c"}}, []string{"c"}},
		{"zero means the default", 0, [][]string{many}, many[10:]},
		{"negative keeps all", -1, [][]string{many, {"x"}}, append(slices.Clone(many), "x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &converge.MemStore{Retention: converge.Retention{Entries: tt.keep}}
			var v uint64
			for _, w := range tt.writes {
				v = mustPut(t, s, "k", v, `1`, entries(w...)...)
			}
			h, err := s.History(ctx, "k")
			require.NoError(t, err)
			assert.Equal(t, tt.want, tos(h))
		})
	}
}

func TestMemStoreRetentionSurvivesManyAppends(t *testing.T) {
	// Trimming reuses the history's array; the kept entries stay right
	// across many reallocations.
	s := &converge.MemStore{Retention: converge.Retention{Entries: 4}}
	var v uint64
	for i := range 1000 {
		v = mustPut(t, s, "k", v, `1`, entries(fmt.Sprint(i))...)
	}
	h, err := s.History(context.Background(), "k")
	require.NoError(t, err)
	assert.Equal(t, []string{"996", "997", "998", "999"}, tos(h))
}

func TestMemStoreRetentionAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := &converge.MemStore{Retention: converge.Retention{Age: time.Hour}}
		e := func(ago time.Duration, to string) converge.HistoryEntry {
			return converge.HistoryEntry{At: time.Now().Add(-ago), To: to}
		}
		v := mustPut(t, s, "k", 0, `1`, e(2*time.Hour, "old"), e(time.Minute, "fresh"))
		h, err := s.History(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, []string{"fresh"}, tos(h))

		// Time passes: "fresh" grows old and goes on the next append, but
		// the newest entry stays even when it is old itself.
		time.Sleep(2 * time.Hour)
		mustPut(t, s, "k", v, `2`, e(3*time.Hour, "late"))
		h, err = s.History(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, []string{"late"}, tos(h))

		// Both bounds at once.
		s = &converge.MemStore{Retention: converge.Retention{Entries: 2, Age: time.Hour}}
		mustPut(t, s, "k", 0, `1`, e(0, "a"), e(0, "b"), e(0, "c"))
		h, err = s.History(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, []string{"b", "c"}, tos(h))
	})
}

func TestMemStoreFencedPut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := converge.NewMemStore()
		v := mustPut(t, s, "k", 0, `0`)
		a, err := s.Claim(ctx, "k", "a", time.Minute)
		require.NoError(t, err)
		v, err = s.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: json.RawMessage(`1`), Token: a.Token}, entries("a")...)
		require.NoError(t, err)

		refused := func(name string, rec converge.StoreRecord) {
			t.Helper()
			before, _ := s.Get(ctx, "k")
			hBefore, _ := s.History(ctx, "k")
			_, err := s.Put(ctx, rec, entries("refused")...)
			require.ErrorIs(t, err, converge.ErrLeaseLost, name)
			after, _ := s.Get(ctx, "k")
			hAfter, _ := s.History(ctx, "k")
			assert.Equal(t, before, after, "%s: nothing written", name)
			assert.Equal(t, hBefore, hAfter, "%s: no history", name)
		}
		refused("never held", converge.StoreRecord{Key: "k", Version: v, Value: json.RawMessage(`9`), Token: a.Token + 100})

		// The lease expires: its token no longer writes, even though
		// nobody took the key.
		time.Sleep(time.Minute)
		refused("expired", converge.StoreRecord{Key: "k", Version: v, Value: json.RawMessage(`9`), Token: a.Token})

		b, err := s.Claim(ctx, "k", "b", time.Minute)
		require.NoError(t, err)
		refused("stale", converge.StoreRecord{Key: "k", Version: v, Value: json.RawMessage(`9`), Token: a.Token})
		_, err = s.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: json.RawMessage(`2`), Token: b.Token})
		require.NoError(t, err)

		require.NoError(t, s.Release(ctx, b))
		refused("released", converge.StoreRecord{Key: "k", Version: v + 1, Value: json.RawMessage(`9`), Token: b.Token})

		// A token fences its own key only.
		c, err := s.Claim(ctx, "other", "c", time.Minute)
		require.NoError(t, err)
		refused("another key's", converge.StoreRecord{Key: "k", Version: v + 1, Value: json.RawMessage(`9`), Token: c.Token})
	})
}

func TestMemStoreTokensNeverReused(t *testing.T) {
	ctx := context.Background()
	s := converge.NewMemStore()
	mustPut(t, s, "k", 0, `0`)
	var last uint64
	for i := range 5 {
		l, err := s.Claim(ctx, "k", "owner", time.Minute)
		require.NoError(t, err)
		assert.Greater(t, l.Token, last, "claim %d", i)
		last = l.Token
		require.NoError(t, s.Release(ctx, l))

		require.NoError(t, s.Schedule(ctx, "k", time.Time{}))
		_, got := claimKeys(t, s, "", "owner", time.Minute, 1)
		require.Len(t, got, 1)
		assert.Greater(t, got[0].Lease.Token, last, "claim due %d", i)
		last = got[0].Lease.Token
		require.NoError(t, s.Finish(ctx, got[0].Lease, time.Time{}))
	}
}

func TestMemStoreClaimDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := converge.NewMemStore()
		// Created one second apart: due in that order.
		for _, k := range []string{"obj/c", "obj/a", "other/x", "obj/b"} {
			mustPut(t, s, k, 0, `{"k":"`+k+`"}`)
			time.Sleep(time.Second)
		}
		keys, got := claimKeys(t, s, "obj/", "r1", time.Minute, 2)
		assert.Equal(t, []string{"obj/c", "obj/a"}, keys, "earliest due first, at most limit")
		assert.JSONEq(t, `{"k":"obj/c"}`, string(got[0].Record.Value))
		assert.Equal(t, uint64(1), got[0].Record.Version)
		assert.Equal(t, time.Now().Add(time.Minute), got[0].Lease.Expires)
		assert.NotEqual(t, got[0].Lease.Token, got[1].Lease.Token, "MemStore draws tokens from one counter")

		keys, _ = claimKeys(t, s, "obj/", "r2", time.Minute, 10)
		assert.Equal(t, []string{"obj/b"}, keys, "claimed records are skipped")
		keys, _ = claimKeys(t, s, "obj/", "r2", time.Minute, 10)
		assert.Empty(t, keys)

		// A record held by Claim is not claimable either.
		require.NoError(t, s.Schedule(ctx, "other/x", time.Time{}))
		held, err := s.Claim(ctx, "other/x", "r3", time.Minute)
		require.NoError(t, err)
		keys, _ = claimKeys(t, s, "", "r2", time.Minute, 10)
		assert.Empty(t, keys)
		require.NoError(t, s.Finish(ctx, held, time.Now()), "Finish ends a Claim lease too")
		keys, _ = claimKeys(t, s, "", "r2", time.Minute, 10)
		assert.Equal(t, []string{"other/x"}, keys)

		// r1 dies: its records are due again once its leases run out.
		time.Sleep(time.Minute)
		keys, got = claimKeys(t, s, "obj/", "r3", time.Minute, 10)
		assert.Equal(t, []string{"obj/a", "obj/b", "obj/c"}, keys, "expired leases: claimable again (ties by key)")
		for _, c := range got {
			require.NoError(t, s.Finish(ctx, c.Lease, time.Time{}))
		}
		time.Sleep(time.Hour)
		keys, _ = claimKeys(t, s, "obj/", "r3", time.Minute, 10)
		assert.Empty(t, keys, "finished with the zero time: never due")
	})
}

func TestMemStoreScheduleAndFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := converge.NewMemStore()
		require.ErrorIs(t, s.Schedule(ctx, "missing", time.Now()), converge.ErrStoreNotFound)
		v := mustPut(t, s, "k", 0, `0`)
		_, got := claimKeys(t, s, "", "a", time.Minute, 1)
		require.Len(t, got, 1)
		l := got[0].Lease

		// Scheduled during the claim: not claimable now, and the earlier
		// time survives Finish.
		require.NoError(t, s.Schedule(ctx, "k", time.Now().Add(10*time.Second)))
		require.NoError(t, s.Schedule(ctx, "k", time.Now().Add(20*time.Second)), "the earlier time stays")
		keys, _ := claimKeys(t, s, "", "b", time.Minute, 1)
		assert.Empty(t, keys)
		require.NoError(t, s.Finish(ctx, l, time.Now().Add(time.Hour)))
		require.ErrorIs(t, s.Finish(ctx, l, time.Time{}), converge.ErrLeaseLost, "twice")
		keys, _ = claimKeys(t, s, "", "b", time.Minute, 1)
		assert.Empty(t, keys, "not due yet")
		time.Sleep(10 * time.Second)
		keys, got = claimKeys(t, s, "", "b", time.Minute, 1)
		assert.Equal(t, []string{"k"}, keys, "due at the scheduled time")

		// Finish's own time when nothing was scheduled.
		require.NoError(t, s.Finish(ctx, got[0].Lease, time.Now().Add(time.Minute)))
		time.Sleep(59 * time.Second)
		keys, _ = claimKeys(t, s, "", "b", time.Minute, 1)
		assert.Empty(t, keys)
		time.Sleep(time.Second)
		keys, got = claimKeys(t, s, "", "b", time.Minute, 1)
		assert.Equal(t, []string{"k"}, keys)

		// An expired lease cannot finish, and changes nothing.
		time.Sleep(time.Minute)
		require.ErrorIs(t, s.Finish(ctx, got[0].Lease, time.Time{}), converge.ErrLeaseLost)
		keys, got = claimKeys(t, s, "", "c", time.Minute, 1)
		assert.Equal(t, []string{"k"}, keys, "still due: its owner's lease expired")

		// Delete takes the due time away; a new record is due at once.
		require.NoError(t, s.Finish(ctx, got[0].Lease, time.Now()))
		require.NoError(t, s.Delete(ctx, "k", v))
		keys, _ = claimKeys(t, s, "", "c", time.Minute, 1)
		assert.Empty(t, keys)
		require.ErrorIs(t, s.Schedule(ctx, "k", time.Now()), converge.ErrStoreNotFound)
		mustPut(t, s, "k", 0, `0`)
		keys, got = claimKeys(t, s, "", "c", time.Minute, 1)
		assert.Equal(t, []string{"k"}, keys)

		// Finish on a deleted record releases the lease.
		require.NoError(t, s.Delete(ctx, "k", 1))
		require.NoError(t, s.Finish(ctx, got[0].Lease, time.Now()))
		_, err := s.Claim(ctx, "k", "d", time.Minute)
		require.NoError(t, err)
	})
}

func TestMemStoreQueueRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	s := converge.NewMemStore()
	mustPut(t, s, "k", 0, `0`)
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"empty owner", func() error { _, err := s.ClaimDue(ctx, "", "", time.Second, 1); return err }, "owner"},
		{"zero ttl", func() error { _, err := s.ClaimDue(ctx, "", "o", 0, 1); return err }, "ttl"},
		{"zero limit", func() error { _, err := s.ClaimDue(ctx, "", "o", time.Second, 0); return err }, "limit"},
		{"nil fn", func() error { _, err := s.Watch(ctx, "", nil); return err }, "fn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var re *converge.StoreRequestError
			require.ErrorAs(t, err, &re)
			require.ErrorIs(t, err, converge.ErrStoreInvalid)
			assert.Equal(t, tt.field, re.Field)
		})
	}
	keys, _ := claimKeys(t, s, "", "o", time.Second, 1)
	assert.Equal(t, []string{"k"}, keys, "nothing claimed by the rejected calls")
}

// TestMemStoreClaimDueOrderMatchesModel drives the due index with random
// schedules, claims and finishes, and compares every ClaimDue with a
// sort of the model's due records.
func TestMemStoreClaimDueOrderMatchesModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(1, 2))
		s := converge.NewMemStore()
		type state struct {
			due     time.Time // zero: not due
			leased  bool
			lease   converge.Lease
			pending time.Time // earliest Schedule during the lease; zero: none
		}
		model := map[string]*state{}
		start := time.Now()
		for i := range 300 {
			k := fmt.Sprintf("%c/%03d", 'a'+rune(i%3), i)
			mustPut(t, s, k, 0, `0`)
			model[k] = &state{due: start}
		}
		for round := range 200 {
			// Random schedules and finishes.
			for k, st := range model {
				switch r := rng.IntN(20); {
				case r == 0:
					at := start.Add(time.Duration(rng.IntN(600)-300) * time.Second)
					require.NoError(t, s.Schedule(ctx, k, at))
					switch {
					case st.leased && (st.pending.IsZero() || at.Before(st.pending)):
						st.pending = at
					case !st.leased && (st.due.IsZero() || at.Before(st.due)):
						st.due = at
					}
				case r == 1 && st.leased:
					next := time.Time{}
					if rng.IntN(2) == 0 {
						next = time.Now().Add(time.Duration(rng.IntN(60)) * time.Second)
					}
					require.NoError(t, s.Finish(ctx, st.lease, next))
					st.leased, st.due = false, next
					if !st.pending.IsZero() && (next.IsZero() || st.pending.Before(next)) {
						st.due = st.pending
					}
					st.pending = time.Time{}
				}
			}
			prefix := []string{"", "a/", "b/", "c/"}[rng.IntN(4)]
			limit := 1 + rng.IntN(20)
			want := []string{}
			for k, st := range model {
				if !st.leased && !st.due.IsZero() && !st.due.After(time.Now()) && strings.HasPrefix(k, prefix) {
					want = append(want, k)
				}
			}
			slices.SortFunc(want, func(a, b string) int {
				if c := model[a].due.Compare(model[b].due); c != 0 {
					return c
				}
				return strings.Compare(a, b)
			})
			want = want[:min(limit, len(want))]
			keys, got := claimKeys(t, s, prefix, "o", time.Hour, limit)
			require.Equal(t, want, keys, "round %d", round)
			for _, c := range got {
				st := model[c.Record.Key]
				st.leased, st.lease = true, c.Lease
			}
			time.Sleep(time.Second)
		}
	})
}

// watchRecorder collects the keys a watch delivers.
type watchRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (r *watchRecorder) fn(k string) {
	r.mu.Lock()
	r.keys = append(r.keys, k)
	r.mu.Unlock()
}

func (r *watchRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys
	r.keys = nil
	return k
}

func TestMemStoreWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := converge.NewMemStore()
		var r watchRecorder
		stop, err := s.Watch(ctx, "obj/", r.fn)
		require.NoError(t, err)

		v := mustPut(t, s, "obj/a", 0, `0`)
		mustPut(t, s, "other/a", 0, `0`)
		synctest.Wait()
		assert.Equal(t, []string{"obj/a"}, r.take(), "a write right after Watch returns, under the prefix only")

		v = mustPut(t, s, "obj/a", v, `1`)
		synctest.Wait()
		require.NoError(t, s.Schedule(ctx, "obj/a", time.Now()))
		synctest.Wait()
		require.NoError(t, s.Delete(ctx, "obj/a", v))
		synctest.Wait()
		assert.Equal(t, []string{"obj/a", "obj/a", "obj/a"}, r.take(), "update, schedule, delete")

		// Finish notifies when it leaves the record due.
		mustPut(t, s, "obj/b", 0, `0`)
		synctest.Wait()
		r.take()
		_, got := claimKeys(t, s, "obj/", "o", time.Minute, 1)
		require.NoError(t, s.Finish(ctx, got[0].Lease, time.Now()))
		synctest.Wait()
		assert.Equal(t, []string{"obj/b"}, r.take())
		_, got = claimKeys(t, s, "obj/", "o", time.Minute, 1)
		require.NoError(t, s.Finish(ctx, got[0].Lease, time.Time{}))
		synctest.Wait()
		assert.Empty(t, r.take(), "not due: nothing to see")

		stop()
		stop()
		mustPut(t, s, "obj/c", 0, `0`)
		synctest.Wait()
		assert.Empty(t, r.take(), "no call after stop")
	})
}

func TestMemStoreWatchCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := converge.NewMemStore()
		release := make(chan struct{})
		var r watchRecorder
		first := true
		stop, err := s.Watch(ctx, "", func(k string) {
			if first {
				first = false
				<-release
			}
			r.fn(k)
		})
		require.NoError(t, err)
		defer stop()
		v := mustPut(t, s, "a", 0, `0`)
		synctest.Wait() // fn blocks in its first call, for "a"
		mustPut(t, s, "b", 0, `0`)
		for range 10 {
			v = mustPut(t, s, "a", v, `1`)
		}
		close(release)
		synctest.Wait()
		assert.Equal(t, []string{"a", "b", "a"}, r.take(), "what changed while fn was busy, once per key, in order of first change")
	})
}

func TestMemStoreWatchBlockedFnDoesNotStallWriters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := converge.NewMemStore()
		release := make(chan struct{})
		var calls []string
		var blocked atomic.Bool
		stop, err := s.Watch(ctx, "", func(k string) {
			calls = append(calls, k)
			if blocked.CompareAndSwap(false, true) {
				<-release // blocks until the writers are done
			}
		})
		require.NoError(t, err)
		// Far more distinct keys than a watch holds, all written while fn
		// is stuck in its first call.
		const writes = 20_000
		mustPut(t, s, "k/00000", 0, `0`)
		synctest.Wait()
		for i := 1; i < writes; i++ {
			mustPut(t, s, fmt.Sprintf("k/%05d", i), 0, `0`)
		}
		synctest.Wait()
		assert.True(t, blocked.Load())
		recs, err := s.List(ctx, "k/")
		require.NoError(t, err)
		assert.Len(t, recs, writes, "every write finished while fn was blocked")

		close(release)
		synctest.Wait()
		require.NotEmpty(t, calls)
		assert.Equal(t, []string{"k/00000", ""}, calls, "the first key, then fn(\"\") once for what was dropped")

		mustPut(t, s, "k/after", 0, `0`)
		synctest.Wait()
		assert.Equal(t, "k/after", calls[len(calls)-1], "the watch goes on after an overflow")
		stop()
	})
}

func TestMemStoreWatchStopWaitsForFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := converge.NewMemStore()
		inFn, release := make(chan struct{}), make(chan struct{})
		var calls atomic.Int32
		stop, err := s.Watch(ctx, "", func(string) {
			calls.Add(1)
			inFn <- struct{}{}
			<-release
		})
		require.NoError(t, err)
		mustPut(t, s, "a", 0, `0`)
		<-inFn
		mustPut(t, s, "b", 0, `0`) // pending: must not be delivered after stop
		var stopped atomic.Bool
		go func() {
			stop()
			stopped.Store(true)
		}()
		synctest.Wait()
		assert.False(t, stopped.Load(), "stop waits while fn runs")
		close(release)
		synctest.Wait()
		assert.True(t, stopped.Load())
		assert.Equal(t, int32(1), calls.Load(), "no call after stop")
	})
}

func TestMemStoreWatchEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := converge.NewMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		var r watchRecorder
		_, err := s.Watch(ctx, "", r.fn)
		require.NoError(t, err)
		mustPut(t, s, "a", 0, `0`)
		synctest.Wait()
		cancel()
		mustPut(t, s, "b", 0, `0`)
		synctest.Wait()
		assert.Equal(t, []string{"a"}, r.take())
		// The bubble ends only when the watch's goroutine has: it did,
		// without stop being called.

		_, err = s.Watch(ctx, "", r.fn)
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestMemStoreQueueCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := converge.NewMemStore()
	mustPut(t, s, "k", 0, `0`)
	require.ErrorIs(t, s.Schedule(ctx, "k", time.Now()), context.Canceled)
	_, err := s.ClaimDue(ctx, "", "o", time.Second, 1)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, s.Finish(ctx, converge.Lease{Key: "k"}, time.Now()), context.Canceled)
	require.ErrorIs(t, s.Release(ctx, converge.Lease{Key: "k"}), context.Canceled)
	require.ErrorIs(t, s.Delete(ctx, "k", 1), context.Canceled)
	_, err = s.History(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = s.Target(ctx, "t")
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.PutTarget(ctx, "t", json.RawMessage(`1`))
	require.ErrorIs(t, err, context.Canceled)
}

func BenchmarkMemStoreGet(b *testing.B) {
	ctx := context.Background()
	s := converge.NewMemStore()
	mustPut(&testing.T{}, s, "obj/a", 0, `{"state":"ready"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Get(ctx, "obj/a"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMemStorePut(b *testing.B) {
	ctx := context.Background()
	s := converge.NewMemStore()
	v, err := s.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`{"state":"ready"}`)})
	if err != nil {
		b.Fatal(err)
	}
	h := converge.HistoryEntry{At: time.Now(), From: "ready", To: "ready"}
	b.ReportAllocs()
	for b.Loop() {
		if v, err = s.Put(ctx, converge.StoreRecord{Key: "obj/a", Version: v, Value: json.RawMessage(`{"state":"ready"}`)}, h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemStoreClaimDue claims and finishes batches of 64 among
// 100,000 due records.
func BenchmarkMemStoreClaimDue(b *testing.B) {
	ctx := context.Background()
	s := converge.NewMemStore()
	for i := range 100_000 {
		if _, err := s.Put(ctx, converge.StoreRecord{Key: fmt.Sprintf("obj/%06d", i), Value: json.RawMessage(`0`)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		got, err := s.ClaimDue(ctx, "obj/", "o", time.Minute, 64)
		if err != nil || len(got) != 64 {
			b.Fatal(len(got), err)
		}
		for _, c := range got {
			if err := s.Finish(ctx, c.Lease, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*64)/b.Elapsed().Seconds(), "records/s")
}
