package pgstore

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

// finishSizes records how many leases each FinishMany carried.
type finishSizes struct {
	batchSizes
	sql   string
	mu    sync.Mutex
	sizes []int
}

func (f *finishSizes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d.SQL == f.sql && len(d.Args) > 0 {
		if keys, ok := d.Args[0].([]string); ok {
			f.sizes = append(f.sizes, len(keys))
		}
	}
	return ctx
}

func (f *finishSizes) get() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.sizes...)
}

// TestFinishCallsThatComeTogetherAreOneStatement holds the record of a
// Finish call locked, so that the FinishMany statement carrying it
// waits, and checks that the Finish calls made meanwhile are sent
// together in one statement once it returns, each with its own outcome:
// a lease that is not the current one fails with ErrLeaseLost, the
// others are released with their due times.
func TestFinishCallsThatComeTogetherAreOneStatement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := &finishSizes{}
	s, _ := tracedStore(t, tr)
	tr.mu.Lock()
	tr.sql = s.sql.finishMany
	tr.mu.Unlock()
	keys := []string{"a", "b", "c", "d", "e"}
	leases := storeAndClaim(t, s, keys...)
	require.Len(t, leases, len(keys))

	// Another transaction locks a and b: their Finish calls wait.
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back below, or nothing to keep
	_, err = tx.Exec(ctx, `SELECT 1 FROM converge.records WHERE key IN ('a', 'b') FOR UPDATE`)
	require.NoError(t, err)

	results := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	finish := func(k string, l converge.Lease) {
		wg.Go(func() {
			err := s.Finish(ctx, l, time.Now().Add(-time.Second))
			mu.Lock()
			results[k] = err
			mu.Unlock()
		})
	}
	pending := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			s.writes.mu.Lock()
			defer s.writes.mu.Unlock()
			return len(s.writes.pending) == n && s.writes.running
		}, 30*time.Second, time.Millisecond, "%d Finish calls wait", n)
	}
	finish("a", leases["a"])
	require.Eventually(t, func() bool { return len(tr.get()) == 1 }, 30*time.Second, time.Millisecond)
	pending(0)
	finish("b", leases["b"])
	pending(1)
	finish("c", leases["c"])
	pending(2)
	lost := leases["d"]
	lost.Token++
	finish("d", lost)
	pending(3)
	finish("e", leases["e"])
	pending(4)
	require.NoError(t, tx.Rollback(ctx))
	wg.Wait()

	assert.Equal(t, []int{1, 4}, tr.get(), "a alone, then b, c, d and e in one statement")
	for _, k := range []string{"a", "b", "c", "e"} {
		assert.NoError(t, results[k], k)
	}
	assert.ErrorIs(t, results["d"], converge.ErrLeaseLost)
	again, err := s.ClaimDue(ctx, "", "other", time.Minute, 10)
	require.NoError(t, err)
	var got []string
	for _, c := range again {
		got = append(got, c.Record.Key)
	}
	assert.ElementsMatch(t, []string{"a", "b", "c", "e"}, got, "finished and due; d is still leased")
}

// TestOnlyFinishCommitsAsynchronously checks that the FinishMany
// statement sets synchronous_commit off for its own transaction, and that
// the fenced Put, claims, the single Finish and WriteMany (Puts with
// Finish calls) do not: see finishMany for why a lost Finish is
// harmless, which holds for no other write.
func TestOnlyFinishCommitsAsynchronously(t *testing.T) {
	ctx, s, _ := openInternal(t)
	_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`0`)})
	require.NoError(t, err)
	l, err := s.Claim(ctx, "k", "me", time.Minute)
	require.NoError(t, err)
	token := int64(l.Token)

	// setting runs sql with args in a transaction and returns
	// synchronous_commit as that transaction would commit with it.
	setting := func(sql string, args ...any) string {
		t.Helper()
		tx, err := s.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
		rows, err := tx.Query(ctx, sql, args...)
		require.NoError(t, err)
		rows.Close()
		require.NoError(t, rows.Err())
		var v string
		require.NoError(t, tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v))
		return v
	}
	now := time.Now()
	assert.Equal(t, "off", setting(s.sql.finishMany, []string{"k"}, []string{"me"}, []int64{token}, []*time.Time{&now}, s.channel), "FinishMany")
	assert.Equal(t, "on", setting(s.sql.finish, "k", "me", token, &now, s.channel, "k"), "Finish alone")
	assert.Equal(t, "on", setting(s.sql.claim, "k", "me", int64(60e6)), "Claim")
	assert.Equal(t, "on", setting(s.sql.claimDue, "", int64(10), "me", int64(60e6)), "ClaimDue")
	h, err := s.history("k", nil)
	require.NoError(t, err)
	args := append([]any{"k", int64(1), []byte(`1`), token}, h.args()...)
	assert.Equal(t, "on", setting(s.sql.put[putVariant(false, true)], args...), "fenced Put")
	many := s.writes.manyArgs([]*call{
		{key: "k", put: &putArgs{version: 1, token: token, value: []byte(`1`), hist: h}},
		{key: "other", fin: &finishArgs{owner: "me", token: 1}},
	})
	assert.Equal(t, "on", setting(s.sql.writeMany, many...), "WriteMany")
}
