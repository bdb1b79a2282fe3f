package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

func TestConformStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention converge.Retention
	}{
		{"default retention", converge.Retention{}},
		{"count", converge.Retention{Entries: 5}},
		// Age is short so that the rule's wait (1.5×Age+1s) stays short;
		// the test's clock and the database's are the same machine's.
		{"age", converge.Retention{Entries: -1, Age: 3 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.DSN(t)
			opts := pgstore.Options{Retention: tc.retention}
			s := open(t, dsn, opts)
			peer := open(t, dsn, opts)
			err := convergetest.ConformStore(ctxT(t), s, convergetest.StoreConformOptions{
				Wait:      time.Sleep,
				Retention: tc.retention,
				Peer:      peer,
			})
			require.NoError(t, err)
		})
	}
}

func TestConformStoreOtherSchema(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	// Two stores in two schemas of one database do not see each other.
	a := open(t, dsn, pgstore.Options{})
	b := open(t, dsn, pgstore.Options{Schema: "other schema"})
	require.NoError(t, convergetest.ConformStore(ctxT(t), b, convergetest.StoreConformOptions{}))
	recs, err := a.List(ctxT(t), "")
	require.NoError(t, err)
	assert.Empty(t, recs)
	assert.Equal(t, "other schema", b.Schema())
}

func TestPutVersionsAreCheckedByTheDatabase(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a := open(t, dsn, pgstore.Options{})
	b := open(t, dsn, pgstore.Options{})
	ctx := ctxT(t)
	v, err := a.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	// 20 writers on two stores race from the same version: exactly one wins.
	var wins, stale int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			s := a
			if i%2 == 1 {
				s = b
			}
			_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: json.RawMessage(fmt.Sprint(i))},
				converge.HistoryEntry{At: time.Now(), To: fmt.Sprint(i)})
			mu.Lock()
			defer mu.Unlock()
			var ve *converge.StoreVersionError
			switch {
			case err == nil:
				wins++
			case errors.As(err, &ve):
				stale++
				assert.Equal(t, v, ve.Want)
			default:
				t.Errorf("unexpected error: %v", err)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 1, wins)
	assert.Equal(t, 19, stale)
	hist, err := a.History(ctx, "k")
	require.NoError(t, err)
	assert.Len(t, hist, 1, "only the winner's history is written")
}

func TestBadInputIsRefusedWithNothingWritten(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn, pgstore.Options{})
	ctx := ctxT(t)
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"invalid JSON", func() error {
			_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`{"a":`)}, converge.HistoryEntry{To: "x"})
			return err
		}, "Value"},
		{"empty value", func() error {
			_, err := s.Put(ctx, converge.StoreRecord{Key: "k"})
			return err
		}, "Value"},
		{"empty key", func() error {
			_, err := s.Put(ctx, converge.StoreRecord{Value: json.RawMessage(`1`)})
			return err
		}, "Key"},
		{"NUL in key", func() error {
			_, err := s.Put(ctx, converge.StoreRecord{Key: "k\x00", Value: json.RawMessage(`1`)})
			return err
		}, "Key"},
		{"invalid UTF-8 key", func() error {
			_, err := s.Put(ctx, converge.StoreRecord{Key: "k\xff", Value: json.RawMessage(`1`)})
			return err
		}, "Key"},
		{"NUL in history", func() error {
			_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)}, converge.HistoryEntry{Reason: "a\x00"})
			return err
		}, "history[0].Reason"},
		{"invalid JSON target", func() error { _, err := s.PutTarget(ctx, "k", json.RawMessage(`nope`)); return err }, "target"},
		{"empty owner", func() error {
			_, err := s.Claim(ctx, "k", "", time.Second)
			return err
		}, "owner"},
		{"zero ttl", func() error {
			_, err := s.Claim(ctx, "k", "o", 0)
			return err
		}, "ttl"},
		{"zero limit", func() error {
			_, err := s.ClaimDue(ctx, "", "o", time.Second, 0)
			return err
		}, "limit"},
		{"nil watch fn", func() error {
			_, err := s.Watch(ctx, "", nil)
			return err
		}, "fn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var re *converge.StoreRequestError
			require.ErrorAs(t, err, &re)
			assert.ErrorIs(t, err, converge.ErrStoreInvalid)
			assert.Equal(t, tc.field, re.Field)
		})
	}
	recs, err := s.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, recs)
	_, _, err = s.Target(ctx, "k")
	assert.ErrorIs(t, err, converge.ErrStoreNotFound)
	hist, err := s.History(ctx, "k")
	require.NoError(t, err)
	assert.Empty(t, hist)
}

func TestFencedPut(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a := open(t, dsn, pgstore.Options{})
	b := open(t, dsn, pgstore.Options{})
	ctx := ctxT(t)

	la, err := a.Claim(ctx, "obj/x", "a", time.Minute)
	require.NoError(t, err)
	// Creating and updating under the lease works.
	v, err := a.Put(ctx, converge.StoreRecord{Key: "obj/x", Value: json.RawMessage(`1`), Token: la.Token})
	require.NoError(t, err)
	v, err = a.Put(ctx, converge.StoreRecord{Key: "obj/x", Version: v, Value: json.RawMessage(`2`), Token: la.Token})
	require.NoError(t, err)

	// A token that is not the key's current one is refused.
	_, err = a.Put(ctx, converge.StoreRecord{Key: "obj/x", Version: v, Value: json.RawMessage(`9`), Token: la.Token + 1})
	require.ErrorIs(t, err, converge.ErrLeaseLost)

	// a pauses past its lease (renewed for 1ms: same token, expiring at
	// once); b takes the key; a's write is fenced off.
	renewed, err := a.Claim(ctx, "obj/x", "a", time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, la.Token, renewed.Token)
	var lb converge.Lease
	require.Eventually(t, func() bool {
		lb, err = b.Claim(ctx, "obj/x", "b", time.Minute)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	assert.Greater(t, lb.Token, la.Token)
	_, err = a.Put(ctx, converge.StoreRecord{Key: "obj/x", Version: v, Value: json.RawMessage(`9`), Token: la.Token}, converge.HistoryEntry{To: "late"})
	require.ErrorIs(t, err, converge.ErrLeaseLost)
	rec, err := b.Get(ctx, "obj/x")
	require.NoError(t, err)
	assert.JSONEq(t, `2`, string(rec.Value))
	hist, err := b.History(ctx, "obj/x")
	require.NoError(t, err)
	assert.Empty(t, hist, "a fenced-off write appends no history")

	// The new owner writes; after Release its token no longer fences.
	v, err = b.Put(ctx, converge.StoreRecord{Key: "obj/x", Version: v, Value: json.RawMessage(`3`), Token: lb.Token})
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, lb))
	_, err = b.Put(ctx, converge.StoreRecord{Key: "obj/x", Version: v, Value: json.RawMessage(`4`), Token: lb.Token})
	require.ErrorIs(t, err, converge.ErrLeaseLost)
	// A stale version with a good lease is a version error.
	lc, err := b.Claim(ctx, "obj/x", "c", time.Minute)
	require.NoError(t, err)
	_, err = b.Put(ctx, converge.StoreRecord{Key: "obj/x", Version: v - 1, Value: json.RawMessage(`4`), Token: lc.Token})
	require.ErrorIs(t, err, converge.ErrStoreStale)
}

func TestLeaseTokensGrowForever(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn, pgstore.Options{})
	ctx := ctxT(t)
	_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	var last uint64
	for i := range 5 {
		l, err := s.Claim(ctx, "k", fmt.Sprint("owner", i%2), time.Minute)
		require.NoError(t, err)
		assert.Greater(t, l.Token, last)
		assert.WithinDuration(t, time.Now().Add(time.Minute), l.Expires, 30*time.Second, "lease times are the database's clock")
		last = l.Token
		if i == 2 {
			require.NoError(t, s.Delete(ctx, "k", 1))
		}
		require.NoError(t, s.Release(ctx, l))
		require.ErrorIs(t, s.Release(ctx, l), converge.ErrLeaseLost)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	at := func(d time.Duration, to string) converge.HistoryEntry {
		return converge.HistoryEntry{At: time.Now().Add(d).Truncate(time.Microsecond), To: to}
	}
	tos := func(h []converge.HistoryEntry) []string {
		var out []string
		for _, e := range h {
			out = append(out, e.To)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		retention converge.Retention
		writes    [][]converge.HistoryEntry
		want      []string
	}{
		{"count, one entry per write", converge.Retention{Entries: 3},
			[][]converge.HistoryEntry{{at(0, "1")}, {at(0, "2")}, {at(0, "3")}, {at(0, "4")}, {at(0, "5")}},
			[]string{"3", "4", "5"}},
		{"count, many entries in one write", converge.Retention{Entries: 3},
			[][]converge.HistoryEntry{{at(0, "1"), at(0, "2")}, {at(0, "3"), at(0, "4"), at(0, "5"), at(0, "6")}},
			[]string{"4", "5", "6"}},
		{"count, old and new mixed", converge.Retention{Entries: 3},
			[][]converge.HistoryEntry{{at(0, "1"), at(0, "2")}, {at(0, "3"), at(0, "4")}},
			[]string{"2", "3", "4"}},
		{"keep all", converge.Retention{Entries: -1},
			[][]converge.HistoryEntry{{at(0, "1")}, {at(0, "2"), at(0, "3")}},
			[]string{"1", "2", "3"}},
		{"age", converge.Retention{Age: time.Hour},
			[][]converge.HistoryEntry{{at(-3*time.Hour, "1"), at(-time.Minute, "2")}, {at(-2*time.Hour, "3"), at(0, "4")}},
			[]string{"2", "4"}},
		{"age keeps the newest", converge.Retention{Age: time.Hour},
			[][]converge.HistoryEntry{{at(-3*time.Hour, "1")}, {at(-3*time.Hour, "2"), at(-2*time.Hour, "3")}},
			[]string{"3"}},
		{"age and count", converge.Retention{Entries: 2, Age: time.Hour},
			[][]converge.HistoryEntry{{at(0, "1"), at(0, "2"), at(-2*time.Hour, "3"), at(0, "4")}},
			[]string{"4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, dsn, pgstore.Options{Retention: tc.retention, Schema: strings.ReplaceAll(tc.name, " ", "_")})
			var v uint64
			for i, w := range tc.writes {
				var err error
				v, err = s.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: json.RawMessage(fmt.Sprint(i))}, w...)
				require.NoError(t, err)
			}
			hist, err := s.History(ctx, "k")
			require.NoError(t, err)
			assert.Equal(t, tc.want, tos(hist))
			// Delete appends under the same rule.
			require.NoError(t, s.Delete(ctx, "k", v, at(0, "")))
			hist, err = s.History(ctx, "k")
			require.NoError(t, err)
			assert.Empty(t, hist[len(hist)-1].To)
			if tc.retention.Entries > 0 {
				assert.LessOrEqual(t, len(hist), tc.retention.Entries)
			}
		})
	}
}

func TestDefaultRetentionKeepsDefaultHistoryEntries(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t), pgstore.Options{})
	ctx := ctxT(t)
	n := converge.DefaultHistoryEntries + 5
	entries := make([]converge.HistoryEntry, n)
	for i := range entries {
		entries[i] = converge.HistoryEntry{At: time.Now(), To: fmt.Sprint(i)}
	}
	_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)}, entries...)
	require.NoError(t, err)
	hist, err := s.History(ctx, "k")
	require.NoError(t, err)
	require.Len(t, hist, converge.DefaultHistoryEntries)
	assert.Equal(t, "5", hist[0].To)
	assert.Equal(t, fmt.Sprint(n-1), hist[len(hist)-1].To)
}

func TestListIsSortedBytewise(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t), pgstore.Options{})
	ctx := ctxT(t)
	keys := []string{"p/b", "p/B", "p/a_", "p/a%", "p/é", "p/_", "q/x", "p"}
	for _, k := range keys {
		_, err := s.Put(ctx, converge.StoreRecord{Key: k, Value: json.RawMessage(`1`)})
		require.NoError(t, err)
	}
	recs, err := s.List(ctx, "p/")
	require.NoError(t, err)
	var got []string
	for _, r := range recs {
		got = append(got, r.Key)
	}
	// Go's order (bytes), and LIKE wildcards in the prefix are plain characters.
	assert.Equal(t, []string{"p/B", "p/_", "p/a%", "p/a_", "p/b", "p/é"}, got)
	recs, err = s.List(ctx, "p/a_")
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, "p/a_", recs[0].Key)
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t), pgstore.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.ClaimDue(ctx, "", "o", time.Second, 1)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Watch(ctx, "", func(string) {})
	require.ErrorIs(t, err, context.Canceled)
}
