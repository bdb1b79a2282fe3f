package converge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

func TestStoreMemPutVersions(t *testing.T) {
	ctx := context.Background()
	s := converge.NewMemStore()

	_, err := s.Get(ctx, "a")
	require.ErrorIs(t, err, converge.ErrStoreNotFound)

	v1, err := s.Put(ctx, converge.StoreRecord{Key: "a", Value: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	assert.Equal(t, uint64(1), v1)

	tests := []struct {
		name    string
		version uint64
		have    uint64
	}{
		{"create over existing", 0, 1},
		{"future version", 7, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Put(ctx, converge.StoreRecord{Key: "a", Version: tt.version, Value: json.RawMessage(`{"n":9}`)})
			require.ErrorIs(t, err, converge.ErrStoreStale)
			var ve *converge.StoreVersionError
			require.ErrorAs(t, err, &ve)
			assert.Equal(t, "a", ve.Key)
			assert.Equal(t, tt.version, ve.Want)
			assert.Equal(t, tt.have, ve.Have)
		})
	}

	_, err = s.Put(ctx, converge.StoreRecord{Key: "b", Version: 3, Value: json.RawMessage(`1`)})
	require.ErrorIs(t, err, converge.ErrStoreStale, "a version on a missing key is stale")

	v2, err := s.Put(ctx, converge.StoreRecord{Key: "a", Version: v1, Value: json.RawMessage(`{"n":2}`)})
	require.NoError(t, err)
	assert.Equal(t, uint64(2), v2)
	rec, err := s.Get(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, converge.StoreRecord{Key: "a", Version: 2, Value: json.RawMessage(`{"n":2}`)}, rec)
}

func TestStoreMemRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	s := &converge.MemStore{}
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"empty key", func() error {
			_, err := s.Put(ctx, converge.StoreRecord{Value: json.RawMessage(`1`)})
			return err
		}, "Key"},
		{"invalid json", func() error {
			_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`{`)})
			return err
		}, "Value"},
		{"invalid target", func() error { _, err := s.PutTarget(ctx, "t", json.RawMessage(`nope`)); return err }, "target"},
		{"empty claim key", func() error { _, err := s.Claim(ctx, "", "o", time.Second); return err }, "key"},
		{"empty owner", func() error { _, err := s.Claim(ctx, "k", "", time.Second); return err }, "owner"},
		{"zero ttl", func() error { _, err := s.Claim(ctx, "k", "o", 0); return err }, "ttl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.ErrorIs(t, err, converge.ErrStoreInvalid)
			var re *converge.StoreRequestError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tt.field, re.Field)
		})
	}
	_, err := s.Get(ctx, "k")
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "nothing half-written")
}

func TestStoreMemCopiesValues(t *testing.T) {
	ctx := context.Background()
	s := converge.NewMemStore()
	v := json.RawMessage(`"abc"`)
	_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: v})
	require.NoError(t, err)
	v[1] = 'x'
	rec, err := s.Get(ctx, "k")
	require.NoError(t, err)
	assert.JSONEq(t, `"abc"`, string(rec.Value))

	tv := json.RawMessage(`{"image":"a"}`)
	_, err = s.PutTarget(ctx, "device", tv)
	require.NoError(t, err)
	tv[2] = 'X'
	got, _, err := s.Target(ctx, "device")
	require.NoError(t, err)
	assert.JSONEq(t, `{"image":"a"}`, string(got))
}

func TestStoreMemHistoryAndDelete(t *testing.T) {
	ctx := context.Background()
	s := converge.NewMemStore()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h1 := converge.HistoryEntry{At: t0, To: "new"}
	h2 := converge.HistoryEntry{At: t0.Add(time.Minute), From: "new", To: "ready", Reason: "booted"}
	v, err := s.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`"new"`)}, h1)
	require.NoError(t, err)
	v, err = s.Put(ctx, converge.StoreRecord{Key: "obj/a", Version: v, Value: json.RawMessage(`"ready"`)}, h2)
	require.NoError(t, err)

	// A rejected write appends nothing.
	_, err = s.Put(ctx, converge.StoreRecord{Key: "obj/a", Version: 1, Value: json.RawMessage(`"x"`)},
		converge.HistoryEntry{At: t0, From: "ready", To: "x"})
	require.ErrorIs(t, err, converge.ErrStoreStale)
	require.ErrorIs(t, s.Delete(ctx, "obj/a", 1), converge.ErrStoreStale)
	require.ErrorIs(t, s.Delete(ctx, "obj/zz", 1), converge.ErrStoreNotFound)

	h, err := s.History(ctx, "obj/a")
	require.NoError(t, err)
	assert.Equal(t, []converge.HistoryEntry{h1, h2}, h)

	h3 := converge.HistoryEntry{At: t0.Add(2 * time.Minute), From: "ready", Reason: "deleted"}
	require.NoError(t, s.Delete(ctx, "obj/a", v, h3))
	_, err = s.Get(ctx, "obj/a")
	require.ErrorIs(t, err, converge.ErrStoreNotFound)
	h, err = s.History(ctx, "obj/a")
	require.NoError(t, err)
	assert.Equal(t, []converge.HistoryEntry{h1, h2, h3}, h, "history outlives the record")

	h, err = s.History(ctx, "never")
	require.NoError(t, err)
	assert.Empty(t, h)

	b, err := json.Marshal(h2)
	require.NoError(t, err)
	assert.JSONEq(t, `{"at":"2026-01-02T03:05:05Z","from":"new","to":"ready","reason":"booted"}`, string(b))
}

func TestStoreMemList(t *testing.T) {
	ctx := context.Background()
	s := converge.NewMemStore()
	for _, k := range []string{"b/2", "a/1", "b/1", "c"} {
		_, err := s.Put(ctx, converge.StoreRecord{Key: k, Value: json.RawMessage(`0`)})
		require.NoError(t, err)
	}
	recs, err := s.List(ctx, "b/")
	require.NoError(t, err)
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key)
		assert.Equal(t, uint64(1), r.Version)
	}
	assert.Equal(t, []string{"b/1", "b/2"}, keys)
	all, err := s.List(ctx, "")
	require.NoError(t, err)
	assert.Len(t, all, 4)
}

func TestStoreMemTarget(t *testing.T) {
	ctx := context.Background()
	s := converge.NewMemStore()
	_, _, err := s.Target(ctx, "device")
	require.ErrorIs(t, err, converge.ErrStoreNotFound)
	r1, err := s.PutTarget(ctx, "device", json.RawMessage(`{"v":1}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), r1, "the first target of a name is revision 1")
	reserved, err := s.PutTarget(ctx, "device", nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), reserved)
	got, rev, err := s.Target(ctx, "device")
	require.NoError(t, err)
	assert.JSONEq(t, `{"v":1}`, string(got), "a revision without a target keeps the target")
	assert.Equal(t, r1, rev)
	r3, err := s.PutTarget(ctx, "device", json.RawMessage(`{"v":2}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), r3)
	got, rev, err = s.Target(ctx, "device")
	require.NoError(t, err)
	assert.JSONEq(t, `{"v":2}`, string(got))
	assert.Equal(t, r3, rev)
}

func TestStoreMemClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := converge.NewMemStore()
		a, err := s.Claim(ctx, "obj/x", "replica-a", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, time.Now().Add(time.Minute), a.Expires)

		_, err = s.Claim(ctx, "obj/x", "replica-b", time.Minute)
		require.ErrorIs(t, err, converge.ErrClaimHeld)
		var ce *converge.ClaimError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "replica-a", ce.Holder)
		assert.Equal(t, "replica-b", ce.Owner)

		// The holder renews and keeps its token.
		time.Sleep(30 * time.Second)
		a2, err := s.Claim(ctx, "obj/x", "replica-a", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, a.Token, a2.Token)
		assert.Equal(t, time.Now().Add(time.Minute), a2.Expires)

		// A dead holder's lease expires and another owner takes it.
		time.Sleep(61 * time.Second)
		b, err := s.Claim(ctx, "obj/x", "replica-b", time.Minute)
		require.NoError(t, err)
		assert.Greater(t, b.Token, a.Token)
		require.ErrorIs(t, s.Release(ctx, a2), converge.ErrLeaseLost, "the old holder cannot release the new lease")
		require.NoError(t, s.Release(ctx, b))
		require.ErrorIs(t, s.Release(ctx, b), converge.ErrLeaseLost)

		_, err = s.Claim(ctx, "obj/x", "replica-a", time.Minute)
		require.NoError(t, err, "a released key is free")
	})
}

func TestStoreMemCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := converge.NewMemStore()
	_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.List(ctx, "")
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Claim(ctx, "k", "o", time.Second)
	require.ErrorIs(t, err, context.Canceled)
}

func TestStoreMemConcurrentWriters(t *testing.T) {
	// Writers race on one key with read-modify-write; the version check
	// must make every increment count exactly once.
	ctx := context.Background()
	s := &converge.MemStore{Retention: converge.Retention{Entries: -1}}
	_, err := s.Put(ctx, converge.StoreRecord{Key: "n", Value: json.RawMessage(`0`)})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; i < 100; {
				rec, err := s.Get(ctx, "n")
				if err != nil {
					panic(err)
				}
				var n int
				if err := json.Unmarshal(rec.Value, &n); err != nil {
					panic(err)
				}
				rec.Value = json.RawMessage(fmt.Sprint(n + 1))
				_, err = s.Put(ctx, rec, converge.HistoryEntry{To: fmt.Sprint(w)})
				if errors.Is(err, converge.ErrStoreStale) {
					continue
				}
				if err != nil {
					panic(err)
				}
				i++
			}
		})
	}
	wg.Wait()
	rec, err := s.Get(ctx, "n")
	require.NoError(t, err)
	assert.Equal(t, "800", string(rec.Value))
	assert.Equal(t, uint64(801), rec.Version)
	h, err := s.History(ctx, "n")
	require.NoError(t, err)
	assert.Len(t, h, 800, "a negative Retention.Entries keeps every entry")
}
