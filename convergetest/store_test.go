package convergetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

func TestStoreZeroValueWorks(t *testing.T) {
	ctx := context.Background()
	var s convergetest.Store
	v, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	rec, err := s.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, v, rec.Version)
	assert.Equal(t, 1, s.Calls(convergetest.OpGet))
	assert.Equal(t, 0, s.Injected())
}

func TestStoreFailNext(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	s := (&convergetest.Store{}).FailNext(convergetest.OpPut, 2, boom)
	for range 2 {
		_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
		require.ErrorIs(t, err, boom)
		var se *convergetest.StoreError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, convergetest.OpPut, se.Op)
		assert.False(t, se.Written)
	}
	_, err := s.Get(ctx, "k")
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "failed writes wrote nothing")
	_, err = s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	assert.Equal(t, 3, s.Calls(convergetest.OpPut))
	assert.Equal(t, 2, s.Injected())

	s.FailNext(convergetest.OpTarget, -1, nil)
	for range 3 {
		_, err := s.Target(ctx, "x")
		require.ErrorIs(t, err, convergetest.ErrInjected)
	}
}

func TestStoreFailRate(t *testing.T) {
	ctx := context.Background()
	s := convergetest.NewStore(0.3, 42)
	failed := 0
	for range 1000 {
		if _, err := s.List(ctx, ""); err != nil {
			require.ErrorIs(t, err, convergetest.ErrInjected)
			failed++
		}
	}
	assert.InDelta(t, 300, failed, 60)
	assert.Equal(t, failed, s.Injected())
	s.SetFailRate(0, 0)
	_, err := s.List(ctx, "")
	require.NoError(t, err)
}

func TestStoreLostReply(t *testing.T) {
	ctx := context.Background()
	s := &convergetest.Store{LostReplyRate: 1}
	_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)}, converge.HistoryEntry{To: "a"})
	var se *convergetest.StoreError
	require.ErrorAs(t, err, &se)
	assert.True(t, se.Written)
	rec, err := s.Mem.Get(ctx, "k")
	require.NoError(t, err, "the write happened")
	assert.Equal(t, uint64(1), rec.Version)
	require.Error(t, s.Delete(ctx, "k", 1))
	_, err = s.Mem.Get(ctx, "k")
	require.ErrorIs(t, err, converge.ErrStoreNotFound)
	h, err := s.History(ctx, "k")
	require.NoError(t, err)
	assert.Len(t, h, 1)
}

func TestStoreConformMemStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		require.NoError(t, convergetest.ConformStore(ctx, converge.NewMemStore(), convergetest.StoreConformOptions{Wait: time.Sleep}))
		require.NoError(t, convergetest.ConformStore(ctx, &convergetest.Store{}, convergetest.StoreConformOptions{Prefix: "t1/"}))
	})
}

// sloppyStore ignores versions on Put: last writer wins.
type sloppyStore struct{ *converge.MemStore }

func (s sloppyStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	cur, err := s.MemStore.Get(ctx, rec.Key)
	if err == nil {
		rec.Version = cur.Version
	} else {
		rec.Version = 0
	}
	return s.MemStore.Put(ctx, rec, h...)
}

func TestStoreConformCatchesBrokenStore(t *testing.T) {
	err := convergetest.ConformStore(context.Background(), sloppyStore{converge.NewMemStore()}, convergetest.StoreConformOptions{})
	require.ErrorIs(t, err, convergetest.ErrStoreNonConformant)
	var ce *convergetest.StoreConformanceError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "stale put", ce.Rule)
}
