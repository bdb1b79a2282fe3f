package bench

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// The bulk-add benchmarks: b.N objects (jobs) added in one call, by
// controller.AddObjects on a pgstore.Store and by River's InsertMany, each
// on a fresh database of the same server, in the same run (bench/run runs
// them with -benchtime 10000x: 10,000 objects in one call). The timed
// span is the call: building the documents, the statement and its
// commit. One op is one object; objects/s is b.N over the span. Both
// write through one pool of their own.

// BenchmarkPGAddObjects adds b.N objects in state "new" with a small
// document of data each, and their first history entry, in one
// AddObjects call: one statement over arrays in one transaction.
func BenchmarkPGAddObjects(b *testing.B) {
	dsn := pgtest.DSN(b)
	ctx := context.Background()
	n := b.N
	rt := &roundTrips{}
	store := tracedStores(b, ctx, dsn, rt, 1)[0]
	objs := make([]controller.NewObject, n)
	for i := range objs {
		objs[i] = controller.NewObject{Key: pgKey(i), State: "new", Data: []byte(`{"rack":"r1"}`)}
	}
	wal := walPosition(b, ctx, store.Pool())
	timeObjects(b, ctx, dsn, rt, n, func() (int, error) {
		if err := controller.AddObjects(ctx, store, pgFloorKind, objs); err != nil {
			return 0, err
		}
		return n, nil
	})
	reportWAL(b, ctx, store.Pool(), wal, n)
}

// walPosition returns the server's current WAL position, in bytes.
func walPosition(b *testing.B, ctx context.Context, pool *pgxpool.Pool) int64 {
	b.Helper()
	var lsn int64
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// reportWAL reports the WAL the server wrote since from, per object of n
// (the cluster is the test binary's own: nothing else writes to it
// meanwhile).
func reportWAL(b *testing.B, ctx context.Context, pool *pgxpool.Pool, from int64, n int) {
	b.ReportMetric(float64(walPosition(b, ctx, pool)-from)/float64(n), "wal-B/object")
}

// riverRackArgs is the job of BenchmarkRiverInsertMany: as much data as
// BenchmarkPGAddObjects's objects carry.
type riverRackArgs struct {
	Rack string `json:"rack"`
}

func (riverRackArgs) Kind() string { return "rack" }

type riverRackWorker struct {
	river.WorkerDefaults[riverRackArgs]
}

func (riverRackWorker) Work(context.Context, *river.Job[riverRackArgs]) error { return nil }

// BenchmarkRiverInsertMany is BenchmarkPGAddObjects for River: b.N jobs
// in one InsertMany call of an insert-only client (River's documented
// bulk insert, in one transaction).
func BenchmarkRiverInsertMany(b *testing.B) {
	dsn := pgtest.DSN(b)
	ctx := context.Background()
	n := b.N
	quiet := slog.New(slog.DiscardHandler)
	rt := &roundTrips{}
	pool := tracedPool(b, ctx, dsn, rt)
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, riverRackWorker{})
	client, err := river.NewClient[pgx.Tx](riverpgxv5.New(pool), &river.Config{Logger: quiet, Workers: workers})
	if err != nil {
		b.Fatal(err)
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: riverRackArgs{Rack: "r1"}}
	}
	wal := walPosition(b, ctx, pool)
	timeObjects(b, ctx, dsn, rt, n, func() (int, error) {
		res, err := client.InsertMany(ctx, params)
		return len(res), err
	})
	reportWAL(b, ctx, pool, wal, n)
}
