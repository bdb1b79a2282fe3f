package pgstore_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

func keysOf(cs []converge.Claimed) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Record.Key)
	}
	return out
}

func TestQueueDueTimes(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t), pgstore.Options{})
	ctx := ctxT(t)
	put := func(key string) {
		_, err := s.Put(ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	// Created records are due at once, earliest first.
	put("q/b")
	put("q/a")
	put("other/c")
	got, err := s.ClaimDue(ctx, "q/", "w1", time.Minute, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"q/b"}, keysOf(got))
	b := got[0]
	assert.Equal(t, "w1", b.Lease.Owner)
	assert.Equal(t, uint64(1), b.Record.Version)
	assert.JSONEq(t, `{}`, string(b.Record.Value))

	// A claimed record is not claimable by anyone.
	got, err = s.ClaimDue(ctx, "q/", "w2", time.Minute, 10)
	require.NoError(t, err)
	a := got[0]
	require.Equal(t, []string{"q/a"}, keysOf(got))
	got, err = s.ClaimDue(ctx, "q/", "w1", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, got)
	_, err = s.Claim(ctx, "q/b", "w2", time.Minute)
	require.ErrorIs(t, err, converge.ErrClaimHeld)

	// Finish with a future time: not due until then. Finish with the zero
	// time: not due until scheduled.
	require.NoError(t, s.Finish(ctx, b.Lease, time.Now().Add(time.Hour)))
	require.NoError(t, s.Finish(ctx, a.Lease, time.Time{}))
	require.ErrorIs(t, s.Finish(ctx, a.Lease, time.Time{}), converge.ErrLeaseLost)
	got, err = s.ClaimDue(ctx, "q/", "w1", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, got)

	// Schedule: earlier wins; later keeps the earlier time.
	require.NoError(t, s.Schedule(ctx, "q/a", time.Now().Add(2*time.Hour)))
	require.NoError(t, s.Schedule(ctx, "q/b", time.Now().Add(-time.Second)))
	require.NoError(t, s.Schedule(ctx, "q/b", time.Now().Add(3*time.Hour)))
	got, err = s.ClaimDue(ctx, "q/", "w1", time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"q/b"}, keysOf(got))
	b = got[0]

	// A Schedule while claimed survives Finish with a later or no time.
	require.NoError(t, s.Schedule(ctx, "q/b", time.Now().Add(-time.Second)))
	require.NoError(t, s.Finish(ctx, b.Lease, time.Now().Add(time.Hour)))
	got, err = s.ClaimDue(ctx, "q/", "w1", time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"q/b"}, keysOf(got))
	assert.Greater(t, got[0].Lease.Token, b.Lease.Token)
	require.NoError(t, s.Finish(ctx, got[0].Lease, time.Time{}))

	require.ErrorIs(t, s.Schedule(ctx, "q/missing", time.Now()), converge.ErrStoreNotFound)
	// Updating a record does not make it due.
	_, err = s.Put(ctx, converge.StoreRecord{Key: "q/a", Version: 1, Value: json.RawMessage(`2`)})
	require.NoError(t, err)
	got, err = s.ClaimDue(ctx, "q/", "w1", time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestQueueExpiredLeaseIsClaimedAgain(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	dead := open(t, dsn, pgstore.Options{})
	alive := open(t, dsn, pgstore.Options{})
	ctx := ctxT(t)
	_, err := dead.Put(ctx, converge.StoreRecord{Key: "q/x", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	got, err := dead.ClaimDue(ctx, "q/", "dead", 200*time.Millisecond, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	// The owner dies without Finish: once the lease runs out (by the
	// database's clock), another owner takes the record over.
	var again []converge.Claimed
	require.Eventually(t, func() bool {
		again, err = alive.ClaimDue(ctx, "q/", "alive", time.Minute, 10)
		require.NoError(t, err)
		return len(again) == 1
	}, 10*time.Second, 20*time.Millisecond)
	assert.Greater(t, again[0].Lease.Token, got[0].Lease.Token)
	require.ErrorIs(t, dead.Finish(ctx, got[0].Lease, time.Time{}), converge.ErrLeaseLost)
	_, err = dead.Put(ctx, converge.StoreRecord{Key: "q/x", Version: 1, Value: json.RawMessage(`9`), Token: got[0].Lease.Token})
	require.ErrorIs(t, err, converge.ErrLeaseLost)
	_, err = alive.Put(ctx, converge.StoreRecord{Key: "q/x", Version: 1, Value: json.RawMessage(`2`), Token: again[0].Lease.Token})
	require.NoError(t, err)

	// A released (not finished) lease makes the record due again at once.
	require.NoError(t, alive.Release(ctx, again[0].Lease))
	got, err = dead.ClaimDue(ctx, "q/", "third", time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"q/x"}, keysOf(got))
}

// TestClaimDueConcurrentNeverHandsARecordTwice runs three stores (three
// pools, as three replicas would) claiming and finishing batches of the
// same records: every record is handed out exactly once.
func TestClaimDueConcurrentNeverHandsARecordTwice(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	stores := []*pgstore.Store{open(t, dsn, pgstore.Options{}), open(t, dsn, pgstore.Options{}), open(t, dsn, pgstore.Options{})}
	const n = 600
	for i := range n {
		_, err := stores[0].Put(ctx, converge.StoreRecord{Key: fmt.Sprintf("job/%04d", i), Value: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for w := range 6 {
		s := stores[w%3]
		owner := fmt.Sprint("worker-", w)
		wg.Go(func() {
			for {
				got, err := s.ClaimDue(ctx, "job/", owner, time.Minute, 7)
				if !assert.NoError(t, err) {
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, c := range got {
					if prev, ok := seen[c.Record.Key]; ok {
						t.Errorf("%s handed to %s and %s", c.Record.Key, prev, owner)
					}
					seen[c.Record.Key] = owner
				}
				mu.Unlock()
				for _, c := range got {
					assert.NoError(t, s.Finish(ctx, c.Lease, time.Time{}))
				}
			}
		})
	}
	wg.Wait()
	assert.Len(t, seen, n)
	owners := map[string]int{}
	for _, o := range seen {
		owners[o]++
	}
	t.Logf("records per worker: %v", owners)
}

// TestQueueTakeoverComesBeforeTheBacklog checks the order ClaimDue takes
// records in: a record whose lease ran out without Finish, and one whose
// lease was released, come before the due records, even those due
// earlier than that lease's expiry: the order a store keeping the
// lease's expiry as the record's due time would get wrong.
func TestQueueTakeoverComesBeforeTheBacklog(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn, pgstore.Options{})
	ctx := ctxT(t)
	_, err := s.Put(ctx, converge.StoreRecord{Key: "t/a", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	dead, err := s.ClaimDue(ctx, "t/", "dead", 300*time.Millisecond, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"t/a"}, keysOf(dead))
	for _, k := range []string{"t/b", "t/c"} {
		_, err := s.Put(ctx, converge.StoreRecord{Key: k, Value: json.RawMessage(`1`)})
		require.NoError(t, err)
	}
	require.NoError(t, s.Schedule(ctx, "t/c", time.Now().Add(-time.Hour)))
	// A Schedule while the dead owner holds t/a makes it due by its due
	// time too: it must still be taken once.
	require.NoError(t, s.Schedule(ctx, "t/a", time.Now().Add(-2*time.Hour)))
	// Wait, by the database's clock, for the dead owner's lease to run
	// out; claiming meanwhile would take the backlog.
	awaitExpired(t, dsn, "converge", "t/a")

	taken, err := s.ClaimDue(ctx, "t/", "alive", time.Minute, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"t/a", "t/c"}, keysOf(taken), "the expired lease's record first, then the backlog")
	assert.Greater(t, taken[0].Lease.Token, dead[0].Lease.Token)

	require.NoError(t, s.Release(ctx, taken[0].Lease))
	again, err := s.ClaimDue(ctx, "t/", "third", time.Minute, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"t/a"}, keysOf(again), "the released record first")

	rest, err := s.ClaimDue(ctx, "t/", "third", time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"t/b"}, keysOf(rest), "then the rest of the backlog")
}

// TestQueueTakeoverAcrossMigration6 checks a store migrated to schema
// version 6 while a record was in flight under version 5, which marked
// it claimed at -infinity: once its lease has run out it is taken over
// before the backlog, as a record claimed since is, and a record in
// flight is not taken while its lease holds.
func TestQueueTakeoverAcrossMigration6(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	old := open(t, dsn, pgstore.Options{Schema: "before6"})
	for _, k := range []string{"t/a", "t/b", "t/c", "t/d"} {
		_, err := old.Put(ctx, converge.StoreRecord{Key: k, Value: json.RawMessage(`1`)})
		require.NoError(t, err)
	}
	dead, err := old.ClaimDue(ctx, "t/", "dead", 300*time.Millisecond, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"t/a"}, keysOf(dead))
	live, err := old.ClaimDue(ctx, "t/", "live", time.Minute, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"t/b"}, keysOf(live))
	// Make the schema what version 5 left, with both records claimed as
	// version 5 claimed them.
	undoMigration6(t, dsn, "before6")
	query(t, dsn, `UPDATE before6.records SET claimed_due = '-infinity' WHERE key IN ('t/a', 't/b')`, nil)
	require.NoError(t, old.Schedule(ctx, "t/d", time.Now().Add(-time.Hour)))

	s := open(t, dsn, pgstore.Options{Schema: "before6"})
	var version int
	query(t, dsn, `SELECT max(version) FROM before6.migrations`, nil, &version)
	require.Equal(t, 9, version)
	awaitExpired(t, dsn, "before6", "t/a")

	taken, err := s.ClaimDue(ctx, "t/", "alive", time.Minute, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"t/a"}, keysOf(taken), "the expired lease's record first")
	rest, err := s.ClaimDue(ctx, "t/", "alive", time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"t/d", "t/c"}, keysOf(rest), "then the backlog, earliest due first, without the record in flight")
}
