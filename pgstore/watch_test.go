package pgstore_test

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// recorder collects the keys a watch delivers.
type recorder struct {
	mu   sync.Mutex
	keys []string
}

func (r *recorder) fn(key string) {
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.mu.Unlock()
}

func (r *recorder) has(key string) func() bool {
	return func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.Contains(r.keys, key)
	}
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}

func TestWatchHearsWritesOfAnotherStore(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	watching := open(t, dsn, pgstore.Options{})
	writer := open(t, dsn, pgstore.Options{})
	ctx := ctxT(t)
	var r recorder
	stop, err := watching.Watch(ctx, "w/", r.fn)
	require.NoError(t, err)
	defer stop()
	const wakeUp = 5 * time.Second // generous: a wake-up normally takes milliseconds

	// Watch returned, so the LISTEN is in place: nothing after is missed.
	_, err = writer.Put(ctx, converge.StoreRecord{Key: "elsewhere", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	v, err := writer.Put(ctx, converge.StoreRecord{Key: "w/put", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.Eventually(t, r.has("w/put"), wakeUp, 5*time.Millisecond, "a Put on another store wakes the watcher")

	_, err = writer.Put(ctx, converge.StoreRecord{Key: "w/sched", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	got, err := writer.ClaimDue(ctx, "w/sched", "o", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, writer.Schedule(ctx, "w/sched", time.Now()))
	require.NoError(t, writer.Finish(ctx, got[0].Lease, time.Time{}))
	require.NoError(t, writer.Delete(ctx, "w/put", v))
	_, err = writer.Put(ctx, converge.StoreRecord{Key: "w/last", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.Eventually(t, r.has("w/last"), wakeUp, 5*time.Millisecond)
	keys := r.all()
	assert.NotContains(t, keys, "elsewhere", "keys outside the prefix are not delivered")
	assert.Contains(t, keys, "w/sched")
	assert.GreaterOrEqual(t, strings.Count(strings.Join(keys, "\n"), "w/put"), 2, "Put and Delete are both heard (keys are coalesced only while fn runs)")
	assert.NotContains(t, keys, "")

	// A key too long for a notification is announced as "": look at
	// everything (which covers any key queued with it).
	_, err = writer.Put(ctx, converge.StoreRecord{Key: "w/" + strings.Repeat("x", 8000), Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.Eventually(t, r.has(""), wakeUp, 5*time.Millisecond)
}

func TestWatchReconnects(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn, pgstore.Options{Channel: "reconnect_test"})
	ctx := ctxT(t)
	var r recorder
	stop, err := s.Watch(ctx, "", r.fn)
	require.NoError(t, err)
	defer stop()
	// Kill the watcher's connection from the server side.
	var n int
	query(t, dsn, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = 'LISTEN "reconnect_test"' AND datname = current_database()`, nil, &n)
	require.Equal(t, 1, n)
	require.Eventually(t, r.has(""), 10*time.Second, 10*time.Millisecond, "after reconnecting, fn(\"\") says look at everything")
	// The new connection listens again.
	_, err = s.Put(ctx, converge.StoreRecord{Key: "after", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.Eventually(t, r.has("after"), 10*time.Second, 10*time.Millisecond)
}

func TestWatchStopAndClose(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn, pgstore.Options{})
	ctx := ctxT(t)
	var stopped recorder
	stop, err := s.Watch(ctx, "", stopped.fn)
	require.NoError(t, err)
	stop()
	stop() // idempotent

	var witness recorder
	stopWitness, err := s.Watch(ctx, "", witness.fn)
	require.NoError(t, err)
	_, err = s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.Eventually(t, witness.has("k"), 5*time.Second, 5*time.Millisecond)
	assert.Empty(t, stopped.all(), "no call after stop returned")

	// Close stops the remaining watches (goleak checks their goroutines).
	other := open(t, dsn, pgstore.Options{})
	_, err = other.Watch(ctx, "", func(string) {})
	require.NoError(t, err)
	require.NoError(t, other.Close())
	_, err = other.Watch(ctx, "", func(string) {})
	require.ErrorIs(t, err, pgstore.ErrClosed)
	stopWitness()
}
