package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// pgFloorBatches are the batch sizes of BenchmarkPGFloor.
var pgFloorBatches = []int{16, 64}

const (
	// pgFloorKind is the kind of the floor's objects, as the controller
	// benchmark's: their keys are "obj/" + pgKey(i).
	pgFloorKind = "obj"
	// pgFloorTTL is the lease of a claim: controller.DefaultLeaseTTL, the
	// controller benchmark's.
	pgFloorTTL = controller.DefaultLeaseTTL
	// pgFloorNext is the next due time a finish sets, from now: the
	// controller benchmark's handler's After.
	pgFloorNext = 24 * time.Hour
)

// BenchmarkPGFloor is the floor of BenchmarkPGControllerReplicas: the
// database work that converge does per object, with the same guarantees,
// on the same tables, sent in ideal batches by a loop with no controller,
// no handler and no store around it. It is a floor in that a correct
// implementation of these guarantees on this schema writes at least these
// rows per object (the record at the claim, the write and the finish;
// the lease at the claim and the finish; one history row), and needs at
// least these commits per batch: the claim's must be durable before a
// handler acts on its token, the write's before it returns, and only the
// finish may commit without waiting for its WAL (pgstore's FinishMany
// argues why). A claim of B objects, one statement writing all B and one
// finishing all B is the fewest statements that can carry them, so
// converge, whose calls are batched only when they happen to meet, cannot
// make PostgreSQL do less per object; its objects/s could pass the
// floor's only by overlapping more batches at once
// (BenchmarkPGFloorPipelined), since each client here waits for each of
// its statements. The sub-benchmarks take batches of 16 objects (the most
// a replica of BenchmarkPGControllerReplicas claims at once: twice its 8
// workers) and 64.
//
// The database and the objects are those of BenchmarkPGControllerReplicas:
// the schema is made by pgstore's migration (a pgstore.Store opened on
// it), b.N objects in state "new" are stored by controller.AddObject (a record
// due at once, a lease row with no owner, one history entry), then
// ANALYZE. The timed span runs pgReplicas clients (each with its own pool
// and owner, like the replicas), each in a loop of three statements, each
// its own transaction, on up to batch objects, one batch at a time, until
// every object has been finished once:
//
//   - claim (pgFloorClaimSQL, committed synchronously): takes the
//     earliest due records of the kind, whose lease is free or expired,
//     FOR UPDATE SKIP LOCKED, walking the indexes records_claimed and
//     records_due like ClaimDue; takes their leases (owner, expiry
//     pgFloorTTL from now) and raises their tokens; and marks them in
//     flight (claimed_due the lease's expiry: due again, first, if the
//     lease ends without a finish; due_at NULL: a Schedule made meanwhile
//     is kept by the finish);
//   - put (pgFloorPutSQL, committed synchronously): for each object, the
//     fenced versioned write of a transition "new" → "done": the record
//     is written (version + 1, the new value) only if its version is the
//     one claimed and the lease still holds the claim's token, with its
//     owner, unexpired (held FOR SHARE until the commit), locking the
//     records before the leases as pgstore does, and one history entry is
//     appended for each record written;
//   - finish (pgFloorFinishSQL, committed with synchronous_commit off,
//     as pgstore's FinishMany): releases each lease only if its owner and
//     token are the claim's, and sets the record's next due time
//     (pgFloorNext from now, or an earlier one scheduled meanwhile).
//
// The span ends when every object is finished (the controller
// benchmark's ends when the handler has seen the last object in "done",
// before its last finishes). The floor leaves out, per object, what
// converge does beyond these guarantees: ClaimDue's read of the newest
// history entries (the handler's input), the history retention that each
// put applies, the notifications, and the controller's decoding, view
// and handler calls.
//
// It reports what the other PostgreSQL benchmarks report (pgUsage):
// objects/s, roundtrips/object, writetx/object and the client, server
// and total CPU µs per object.
func BenchmarkPGFloor(b *testing.B) {
	for _, batch := range pgFloorBatches {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchPGFloor(b, batch, 1) })
	}
}

// pgFloorLoops is how many loops each client of BenchmarkPGFloorPipelined
// runs at once.
const pgFloorLoops = 4

// BenchmarkPGFloorPipelined is BenchmarkPGFloor with pgFloorLoops loops
// at once in each of its clients (on the client's pool, with its owner):
// the same statements, so the same work per object, but a client's
// batches overlap, as the batches of a replica's workers do, instead of
// waiting for each other's commits. BenchmarkPGFloor runs one batch per
// client at a time, so its objects/s is bound by the latency of its
// statements (two of them wait for a WAL flush) more than by the work;
// this one tells how far the same work goes when that latency is
// hidden.
func BenchmarkPGFloorPipelined(b *testing.B) {
	for _, batch := range pgFloorBatches {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchPGFloor(b, batch, pgFloorLoops) })
	}
}

// benchPGFloor runs BenchmarkPGFloor with loops loops per client.
func benchPGFloor(b *testing.B, batch, loops int) {
	dsn := pgtest.DSN(b)
	ctx := context.Background()
	n := b.N
	rt := &roundTrips{}
	pools := make([]*pgxpool.Pool, pgReplicas)
	for i := range pools {
		pools[i] = tracedPool(b, ctx, dsn, rt)
		defer pools[i].Close()
	}
	s, err := pgstore.New(ctx, pools[0], pgstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := addPGFloorObjects(ctx, s, n); err != nil {
		b.Fatal(err)
	}
	analyze(b, ctx, dsn)
	floor := newPGFloor(s.Schema(), batch, loops)

	timeObjects(b, ctx, dsn, rt, n, func() (int, error) { return floor.run(ctx, pools, n) })
}

// timeObjects times run, which must finish n objects, and reports the
// usage per object (round trips in rt, CPU of this process and of the
// cluster at dsn) and objects/s.
func timeObjects(b *testing.B, ctx context.Context, dsn string, rt *roundTrips, n int, run func() (int, error)) {
	usage := startUsage(b, ctx, dsn, rt)
	b.ResetTimer()
	finished, err := run()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if finished != n {
		b.Fatalf("%d of %d objects were finished", finished, n)
	}
	usage.report(b, ctx, n)
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "objects/s")
}

// addPGFloorObjects stores n objects of kind pgFloorKind in state "new"
// in s, the records BenchmarkPGControllerReplicas stores: by
// controller.AddObject.
func addPGFloorObjects(ctx context.Context, s *pgstore.Store, n int) error {
	return parallel(n, func(i int) error {
		return controller.AddObject(ctx, s, pgFloorKind, pgKey(i), "new", nil)
	})
}

// pgFloorClaimSQL claims up to $2 due records whose keys start with $1
// for owner $3, for $4 microseconds, returning each claimed record's key,
// version and lease token. It is pgstore's ClaimDue without the read of
// the history and the returned lease's owner and expiry, which the caller
// knows: the same walks (of records_claimed, for the records whose claim
// ran out, then of records_due in the order (rank, key), the rank being
// due_at less the priority's worth, as pgstore's schema 7 indexes it), the same lock
// (FOR UPDATE SKIP LOCKED), the same lease (the token raised) and the
// same due columns set.
const pgFloorClaimSQL = `WITH taken AS (
	SELECT r.key, r.version, 0 AS tier, r.claimed_due AS due
	FROM {s}.records r
	WHERE r.claimed_due <= now()
		AND coalesce(starts_with(r.key, $1), false)
		AND NOT coalesce((SELECT x.owner <> '' AND x.expires > now() FROM {s}.leases x WHERE x.key = r.key), false)
	ORDER BY r.claimed_due, r.key
	LIMIT (SELECT $2::bigint)
	FOR UPDATE OF r SKIP LOCKED
), cd AS (
	SELECT r.key, r.version, 1 AS tier, r.due_at AS due
	FROM {s}.records r
	WHERE (r.due_at AT TIME ZONE 'UTC') - r.priority * interval '1 second' <= (now() AT TIME ZONE 'UTC')
		AND r.due_at <= now() AND coalesce(r.claimed_due > now(), true)
		AND coalesce(starts_with(r.key, $1), false)
		AND NOT coalesce((SELECT x.owner <> '' AND x.expires > now() FROM {s}.leases x WHERE x.key = r.key), false)
	ORDER BY (r.due_at AT TIME ZONE 'UTC') - r.priority * interval '1 second', r.key
	LIMIT (SELECT $2::bigint - count(*) FROM taken)
	FOR UPDATE OF r SKIP LOCKED
), c AS (
	SELECT * FROM taken UNION ALL SELECT * FROM cd
), l AS (
	INSERT INTO {s}.leases AS l (key, owner, expires, token)
	SELECT c.key, $3, now() + $4::bigint * interval '1 microsecond', 1 FROM c
	ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires = EXCLUDED.expires, token = l.token + 1
	WHERE l.owner = '' OR l.expires <= now()
	RETURNING l.key, l.token
), u AS (
	UPDATE {s}.records r SET claimed_due = now() + $4::bigint * interval '1 microsecond', due_at = NULL
	WHERE r.key = ANY (ARRAY(SELECT l.key FROM l))
)
SELECT c.key, c.version, l.token FROM c JOIN l ON l.key = c.key ORDER BY c.tier, c.due, c.key`

// pgFloorPutSQL writes the records given as arrays (key $1, version read
// $2, lease token $3, new value $4), each only if it is still at that
// version and its lease still holds that token with an owner and has not
// expired (by clock_timestamp(), as pgstore's fence), appends one history
// entry (at $5, from $6 to $7, reason $8) for each record written, and
// returns the keys written. It locks the records (in the order of their
// keys, as a batch of pgstore's writes) before the leases (FOR SHARE
// until the commit), the order in which the claim takes them: the fence
// reads the lease by the key of a row of locked, which is locked before
// the row is returned, where a fence on the records' key alone may be
// run before the records are locked (it deadlocked with claims).
const pgFloorPutSQL = `WITH a AS MATERIALIZED (
	SELECT $1::text[] AS keys, $2::bigint[] AS versions, $3::bigint[] AS tokens, $4::bytea[] AS vals
), f AS (
	SELECT u.* FROM a, unnest(a.keys, a.versions, a.tokens, a.vals) AS u(key, version, token, val)
), locked AS (
	SELECT r.key, f.version, f.token, f.val FROM {s}.records r JOIN f ON f.key = r.key ORDER BY r.key FOR UPDATE OF r
), w AS (
	UPDATE {s}.records r SET version = r.version + 1, value = k.val
	FROM locked k
	WHERE r.key = k.key AND r.version = k.version
		AND EXISTS (SELECT 1 FROM {s}.leases l WHERE l.key = k.key AND l.token = k.token AND l.owner <> '' AND l.expires > clock_timestamp() FOR SHARE)
	RETURNING r.key
), added AS (
	INSERT INTO {s}.history (key, at, from_state, to_state, reason, subject, made_by)
	SELECT w.key, $5, $6, $7, $8, NULL, '' FROM w ORDER BY w.key
)
SELECT w.key FROM w`

// pgFloorFinishSQL releases the leases given as arrays (key $1, token
// $2) of owner $3, each only if the owner and token are still the
// lease's, and sets each released record's next due time to $4 (or keeps
// an earlier one scheduled meanwhile), committing with synchronous_commit
// off as pgstore's FinishMany; it returns how many it released. It locks
// the records before the leases, in the order of their keys.
const pgFloorFinishSQL = `WITH async AS (
	SELECT set_config('synchronous_commit', 'off', true)
), a AS MATERIALIZED (
	SELECT $1::text[] AS keys, $2::bigint[] AS tokens
), f AS (
	SELECT u.* FROM a, unnest(a.keys, a.tokens) AS u(key, token)
), locked AS (
	SELECT r.key FROM {s}.records r WHERE r.key IN (SELECT f.key FROM f) ORDER BY r.key FOR UPDATE
), l AS (
	UPDATE {s}.leases l SET owner = ''
	FROM f, (SELECT count(*) FROM locked) AS record_first, (SELECT count(*) FROM async) AS commit_async
	WHERE l.key = f.key AND l.owner = $3 AND l.owner <> '' AND l.token = f.token
	RETURNING l.key
), u AS (
	UPDATE {s}.records r SET due_at = least(r.due_at, $4::timestamptz), claimed_due = NULL
	FROM l WHERE r.key = l.key
)
SELECT count(*) FROM l`

// pgFloor runs the floor's loop on the tables of a schema.
type pgFloor struct {
	claim, put, finish string
	batch              int
	loops              int // loops at once per client
}

// newPGFloor returns the floor on the tables of schema, claiming up to
// batch objects at a time, in loops loops per client.
func newPGFloor(schema string, batch, loops int) *pgFloor {
	sub := func(sql string) string {
		return strings.ReplaceAll(sql, "{s}", pgx.Identifier{schema}.Sanitize())
	}
	return &pgFloor{claim: sub(pgFloorClaimSQL), put: sub(pgFloorPutSQL), finish: sub(pgFloorFinishSQL), batch: batch, loops: loops}
}

// errPGFloor means a put or finish of the floor did not write every
// object its claim took: the guarantees refused a write that nothing
// should have refused.
var errPGFloor = errors.New("pgfloor: a claimed object was not written")

// run runs one client per pool (owner "replica-i"), each running f.loops
// loops at once, until n objects have been finished, and returns how
// many were.
func (f *pgFloor) run(ctx context.Context, pools []*pgxpool.Pool, n int) (int, error) {
	return runClients(ctx, len(pools), f.loops, n, func(ctx context.Context, i int) (int, error) {
		return f.once(ctx, pools[i], fmt.Sprintf("replica-%d", i))
	})
}

// runClients runs clients clients, each running loops loops at once,
// each loop calling once (with its client's index) until n objects have
// been finished, and returns how many were. A loop whose call finds
// nothing while others hold the rest waits a millisecond and calls again;
// the first error stops every loop.
func runClients(ctx context.Context, clients, loops, n int, once func(ctx context.Context, client int) (int, error)) (int, error) {
	var (
		finished atomic.Int64
		wg       sync.WaitGroup
		stop     sync.Once
		first    error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range clients {
		for range loops {
			wg.Go(func() {
				for finished.Load() < int64(n) {
					done, err := once(ctx, i)
					if err != nil {
						stop.Do(func() { first = err; cancel() })
						return
					}
					if done == 0 {
						time.Sleep(time.Millisecond)
					}
					finished.Add(int64(done))
				}
			})
		}
	}
	wg.Wait()
	return int(finished.Load()), first
}

// once claims up to f.batch objects for owner, writes and finishes them,
// and returns how many it finished.
func (f *pgFloor) once(ctx context.Context, pool *pgxpool.Pool, owner string) (int, error) {
	rows, err := pool.Query(ctx, f.claim, pgFloorKind+"/", f.batch, owner, pgFloorTTL.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("pgfloor: claim: %w", err)
	}
	var (
		keys             []string
		versions, tokens []int64
	)
	var key string
	var version, token int64
	_, err = pgx.ForEachRow(rows, []any{&key, &version, &token}, func() error {
		keys, versions, tokens = append(keys, key), append(versions, version), append(tokens, token)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("pgfloor: claim: %w", err)
	}
	if len(keys) == 0 {
		return 0, nil
	}
	now := time.Now()
	value, err := json.Marshal(controller.Object{State: "done", Since: now})
	if err != nil {
		return 0, err
	}
	values := make([][]byte, len(keys))
	for i := range values {
		values[i] = value
	}
	rows, err = pool.Query(ctx, f.put, keys, versions, tokens, values, now, "new", "done", "")
	if err != nil {
		return 0, fmt.Errorf("pgfloor: put: %w", err)
	}
	written, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("pgfloor: put: %w", err)
	}
	if len(written) != len(keys) {
		return 0, fmt.Errorf("%w: %d of %d claimed were put", errPGFloor, len(written), len(keys))
	}
	var released int
	if err := pool.QueryRow(ctx, f.finish, keys, tokens, owner, now.Add(pgFloorNext)).Scan(&released); err != nil {
		return 0, fmt.Errorf("pgfloor: finish: %w", err)
	}
	if released != len(keys) {
		return 0, fmt.Errorf("%w: %d of %d claimed were finished", errPGFloor, released, len(keys))
	}
	return released, nil
}

// TestPGFloor runs the floor on a few objects with three clients and
// checks that it did what BenchmarkPGFloor says: every record was written
// once (version 1 → 2, state "done"), with one history entry
// "new" → "done" besides the one of its adding, every lease was taken
// once (token 1 → 2) and released, and no record is left due; and that
// its put and finish refuse a stale lease token.
func TestPGFloor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objects int
		batch   int
		clients int
		loops   int
	}{
		{name: "batch=16", objects: 200, batch: 16, clients: pgReplicas, loops: 1},
		{name: "batch=64", objects: 200, batch: 64, clients: pgReplicas, loops: 1},
		{name: "pipelined", objects: 200, batch: 16, clients: pgReplicas, loops: pgFloorLoops},
		{name: "batch larger than the objects", objects: 10, batch: 64, clients: 1, loops: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := pgtest.DSN(t)
			ctx := context.Background()
			pools := make([]*pgxpool.Pool, tc.clients)
			for i := range pools {
				p, err := pgxpool.New(ctx, dsn)
				require.NoError(t, err)
				t.Cleanup(p.Close)
				pools[i] = p
			}
			s, err := pgstore.New(ctx, pools[0], pgstore.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, addPGFloorObjects(ctx, s, tc.objects))
			floor := newPGFloor(s.Schema(), tc.batch, tc.loops)

			finished, err := floor.run(ctx, pools, tc.objects)
			require.NoError(t, err)
			assert.Equal(t, tc.objects, finished)

			db := pools[0]
			for i := range tc.objects {
				key := pgFloorKind + "/" + pgKey(i)
				rec, err := s.Get(ctx, key)
				require.NoError(t, err, key)
				assert.Equal(t, uint64(2), rec.Version, key)
				var obj controller.Object
				require.NoError(t, json.Unmarshal(rec.Value, &obj), key)
				assert.Equal(t, controller.State("done"), obj.State, key)

				hist, err := s.History(ctx, key)
				require.NoError(t, err, key)
				require.Len(t, hist, 2, key)
				assert.Equal(t, [2]string{"", "new"}, [2]string{hist[0].From, hist[0].To}, key)
				assert.Equal(t, [2]string{"new", "done"}, [2]string{hist[1].From, hist[1].To}, key)

				var owner string
				var token int64
				require.NoError(t, db.QueryRow(ctx, `SELECT owner, token FROM converge.leases WHERE key = $1`, key).Scan(&owner, &token), key)
				assert.Empty(t, owner, key)
				assert.Equal(t, int64(2), token, key)
			}
			var due, claimed int
			require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE least(due_at, claimed_due) <= now() + interval '1 hour'),
				count(*) FILTER (WHERE claimed_due IS NOT NULL) FROM converge.records`).Scan(&due, &claimed))
			assert.Zero(t, due, "records due within the hour")
			assert.Zero(t, claimed, "records left claimed")

			// A claim of a record made due again, then a put and a finish
			// with the token before that claim: both are refused.
			key := pgFloorKind + "/" + pgKey(0)
			require.NoError(t, s.Schedule(ctx, key, time.Now()))
			owner := "replica-0"
			var claimedKey string
			var version, token int64
			require.NoError(t, db.QueryRow(ctx, floor.claim, pgFloorKind+"/", 1, owner, pgFloorTTL.Microseconds()).Scan(&claimedKey, &version, &token))
			assert.Equal(t, key, claimedKey)
			assert.Equal(t, int64(3), token)
			rows, err := db.Query(ctx, floor.put, []string{key}, []int64{version}, []int64{token - 1}, [][]byte{[]byte(`{}`)}, time.Now(), "done", "done", "")
			require.NoError(t, err)
			written, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			assert.Empty(t, written, "put with a stale token")
			var released int
			require.NoError(t, db.QueryRow(ctx, floor.finish, []string{key}, []int64{token - 1}, owner, time.Now()).Scan(&released))
			assert.Zero(t, released, "finish with a stale token")
			require.NoError(t, db.QueryRow(ctx, floor.finish, []string{key}, []int64{token}, "replica-1", time.Now()).Scan(&released))
			assert.Zero(t, released, "finish by another owner")
			rec, err := s.Get(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, uint64(2), rec.Version, "the refused put wrote")
		})
	}
}

// BenchmarkPGStoreLoop is BenchmarkPGFloor's loop on pgstore's own
// calls instead of the floor's statements: each of the pgReplicas
// clients (each its own pgstore.Store on its own pool, with its owner)
// claims up to batch objects with ClaimDue, then calls Put (fenced by the
// claim's token, with the history entry of the transition "new" →
// "done") for all of them at once, one goroutine each, and waits, then
// Finish for all of them at once, and waits; the store's group sends the
// calls that meet in one batch. It is converge's store doing converge's
// work with the floor's batching and no controller: between the floor
// and BenchmarkPGControllerReplicas, it tells the cost of the store's
// statements (and its batching of calls) from the controller's.
func BenchmarkPGStoreLoop(b *testing.B) {
	for _, batch := range pgFloorBatches {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchPGStoreLoop(b, batch, 0) })
	}
}

// BenchmarkPGStoreLoopInFlight is BenchmarkPGStoreLoop (batches of 16)
// while another owner holds records in flight: before the timed span it
// claims inflight of the stored objects for an hour and never finishes
// them, as replicas whose handlers run long (a host being provisioned)
// hold theirs. A claim that had to read past the records in flight would
// cost more with each; inflight=0 is the baseline of the same run.
func BenchmarkPGStoreLoopInFlight(b *testing.B) {
	for _, inflight := range []int{0, 1000, 10000} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) { benchPGStoreLoop(b, 16, inflight) })
	}
}

// benchPGStoreLoop runs BenchmarkPGStoreLoop in batches of batch
// objects, while another owner holds inflight more in flight.
func benchPGStoreLoop(b *testing.B, batch, inflight int) {
	dsn := pgtest.DSN(b)
	ctx := context.Background()
	n := b.N
	rt := &roundTrips{}
	stores := tracedStores(b, ctx, dsn, rt, pgReplicas)
	if err := addPGFloorObjects(ctx, stores[0], n+inflight); err != nil {
		b.Fatal(err)
	}
	if inflight > 0 {
		held, err := stores[0].ClaimDue(ctx, pgFloorKind+"/", "busy", time.Hour, inflight)
		if err != nil {
			b.Fatal(err)
		}
		if len(held) != inflight {
			b.Fatalf("claimed %d of %d records to hold in flight", len(held), inflight)
		}
	}
	analyze(b, ctx, dsn)

	timeObjects(b, ctx, dsn, rt, n, func() (int, error) { return runPGStoreLoop(ctx, stores, batch, n) })
}

// runPGStoreLoop runs BenchmarkPGStoreLoop's clients, one per store,
// until n objects have been finished, and returns how many were.
func runPGStoreLoop(ctx context.Context, stores []*pgstore.Store, batch, n int) (int, error) {
	return runClients(ctx, len(stores), 1, n, func(ctx context.Context, i int) (int, error) {
		return pgStoreLoopOnce(ctx, stores[i], fmt.Sprintf("replica-%d", i), batch)
	})
}

// pgStoreLoopOnce claims up to batch objects on s for owner, writes and
// finishes them, each call in its own goroutine, and returns how many it
// finished.
func pgStoreLoopOnce(ctx context.Context, s *pgstore.Store, owner string, batch int) (int, error) {
	claimed, err := s.ClaimDue(ctx, pgFloorKind+"/", owner, pgFloorTTL, batch)
	if err != nil || len(claimed) == 0 {
		return 0, err
	}
	now := time.Now()
	value, err := json.Marshal(controller.Object{State: "done", Since: now})
	if err != nil {
		return 0, err
	}
	errs := make([]error, len(claimed))
	var wg sync.WaitGroup
	for i, c := range claimed {
		wg.Go(func() {
			rec := converge.StoreRecord{Key: c.Record.Key, Version: c.Record.Version, Value: value, Token: c.Lease.Token}
			_, errs[i] = s.Put(ctx, rec, converge.HistoryEntry{At: now, From: "new", To: "done"})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	for i, c := range claimed {
		wg.Go(func() { errs[i] = s.Finish(ctx, c.Lease, now.Add(pgFloorNext)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return len(claimed), nil
}
