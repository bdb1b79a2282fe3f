package bench

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// The PostgreSQL benchmarks: converge's controller replicas (the store is
// the queue) against River, a job queue on PostgreSQL, on the same server
// in the same run. Each gets a fresh database from pgtest.DSN (a
// throw-away cluster unless CONVERGE_PG_DSN names a server; skipped
// without PostgreSQL, failed then under CONVERGE_REQUIRE_PG=1).
//
// Both run b.N objects (jobs): they are stored before the timer starts,
// then the timer covers starting the replicas (clients) until every
// object has been handled once, so one op is one object and objects/s is
// b.N over the timed span. Start-up is inside the span for both (the
// controller lists every object into its view when Run starts; River
// elects a leader and starts its producers).
//
// Both sides run 3 replicas with 8 workers each, every replica with its
// own connection pool (pgxpool defaults: 4 connections on 2 cores), and
// poll every pgPoll when nothing woke them.
const (
	pgReplicas = 3
	pgWorkers  = 8
	pgPoll     = 10 * time.Millisecond
	// pgLoaders is how many goroutines store the objects before the timer.
	pgLoaders = 16
)

// doneOnce counts objects handled for the first time and closes done
// when all n are.
type doneOnce struct {
	seen  []atomic.Bool
	n     atomic.Int64
	done  chan struct{}
	again atomic.Int64 // handled again (a lease lost, say): not counted
}

func newDoneOnce(n int) *doneOnce {
	return &doneOnce{seen: make([]atomic.Bool, n), done: make(chan struct{})}
}

func (d *doneOnce) handled(i int) {
	if d.seen[i].Swap(true) {
		d.again.Add(1)
		return
	}
	if d.n.Add(1) == int64(len(d.seen)) {
		close(d.done)
	}
}

// wait waits until every object is handled, failing b after limit.
func (d *doneOnce) wait(b *testing.B, limit time.Duration) {
	b.Helper()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-d.done:
	case <-t.C:
		b.Fatalf("after %s only %d of %d objects were handled", limit, d.n.Load(), len(d.seen))
	}
}

// pgKey is the key of object i.
func pgKey(i int) string { return fmt.Sprintf("obj-%07d", i) }

// pgIndex is the inverse of pgKey.
func pgIndex(key string) (int, error) { return strconv.Atoi(strings.TrimPrefix(key, "obj-")) }

// parallel runs fn(i) for i in [0, n) on pgLoaders goroutines and returns
// the first error.
func parallel(n int, fn func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range pgLoaders {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// tracedStores opens n stores on dsn, each on a pool of its own that
// counts its round trips in rt; they are closed when b ends.
func tracedStores(b *testing.B, ctx context.Context, dsn string, rt *roundTrips, n int) []*pgstore.Store {
	stores := make([]*pgstore.Store, n)
	for i := range stores {
		pool := tracedPool(b, ctx, dsn, rt)
		b.Cleanup(pool.Close)
		s, err := pgstore.New(ctx, pool, pgstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	return stores
}

// BenchmarkPGControllerReplicas: 3 controller replicas (distinct Owner,
// each on its own pgstore.Store, so its own pool; 8 workers each) share
// one PostgreSQL database. b.N objects in state "new" are added first;
// the timed span starts the replicas and ends when every object has been
// handled once: the handler moves it "new" → "done" (a fenced Put with a
// history entry) and, run again at once, returns NoChange with a long
// After, so each object costs a claim (ClaimDue, in batches), a
// transition and a Finish. The span ends when the handler has seen the
// last object in "done"; the Finish of the last few (at most the 24 in
// flight) is not waited for.
func BenchmarkPGControllerReplicas(b *testing.B) { benchPGController(b, pgReplicas) }

// BenchmarkPGControllerScaling is BenchmarkPGControllerReplicas with 1,
// 2, 3 and 6 replicas (8 workers each): the replica curve.
func BenchmarkPGControllerScaling(b *testing.B) {
	for _, n := range []int{1, 2, 3, 6} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) { benchPGController(b, n) })
	}
}

// analyze runs ANALYZE on the database of dsn, as autovacuum would after
// a bulk load, so that the timed span does not depend on whether it has.
func analyze(b *testing.B, ctx context.Context, dsn string) {
	b.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		b.Fatal(err)
	}
}

// benchPGController runs BenchmarkPGControllerReplicas with n replicas.
func benchPGController(b *testing.B, n int) {
	dsn := pgtest.DSN(b)
	ctx := context.Background()
	objects := b.N
	cnt := newDoneOnce(objects)
	handler := controller.HandlerFunc(func(_ context.Context, obj controller.Object) (controller.Result, error) {
		if obj.State == "new" {
			return controller.Transition("done"), nil
		}
		i, err := pgIndex(obj.Key)
		if err != nil {
			return controller.Result{}, err
		}
		cnt.handled(i)
		return controller.NoChange().After(24 * time.Hour), nil
	})

	rt := &roundTrips{}
	stores := tracedStores(b, ctx, dsn, rt, n)
	cfg := controller.Config{Kind: "obj", Handler: handler, Workers: pgWorkers, Resync: time.Hour, Poll: pgPoll}

	// A controller that never runs stores the objects.
	loaderCfg := cfg
	loaderCfg.Store = stores[0]
	loader, err := controller.New(loaderCfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := parallel(objects, func(i int) error { return loader.Add(ctx, pgKey(i), "new", nil) }); err != nil {
		b.Fatal(err)
	}

	analyze(b, ctx, dsn)

	replicas := make([]*controller.Controller, n)
	for i := range replicas {
		rc := cfg
		rc.Store = stores[i]
		rc.Owner = fmt.Sprintf("replica-%d", i)
		c, err := controller.New(rc)
		if err != nil {
			b.Fatal(err)
		}
		replicas[i] = c
	}

	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, n)
	defer func() {
		cancel()
		for range replicas {
			if err := <-stopped; err != nil {
				b.Error(err)
			}
		}
	}()
	usage := startUsage(b, ctx, dsn, rt)
	b.ResetTimer()
	for _, c := range replicas {
		go func() { stopped <- c.Run(runCtx) }()
	}
	cnt.wait(b, 10*time.Minute)
	b.StopTimer()
	usage.report(b, ctx, objects)
	b.ReportMetric(float64(objects)/b.Elapsed().Seconds(), "objects/s")
	if again := cnt.again.Load(); again > 0 {
		b.Logf("%d objects were handled in \"done\" more than once", again)
	}
}

// riverNoopArgs is the job of BenchmarkRiverNoop.
type riverNoopArgs struct{}

// Kind implements river.JobArgs.
func (riverNoopArgs) Kind() string { return "noop" }

// riverNoopWorker does nothing.
type riverNoopWorker struct {
	river.WorkerDefaults[riverNoopArgs]
}

// Work implements river.Worker.
func (riverNoopWorker) Work(context.Context, *river.Job[riverNoopArgs]) error { return nil }

// BenchmarkRiverNoop is BenchmarkPGControllerReplicas for River: 3
// clients (each its own pool, 8 workers on the default queue) on a fresh
// database migrated with rivermigrate. b.N no-op jobs are inserted first
// (InsertMany, in batches); the timed span starts the clients and ends
// when every job's completion has been stored, as the clients' completed
// events tell (they are sent once the completer has written them).
//
// River is set up for throughput as its documentation advises:
// FetchCooldown at its minimum (1ms; the default 100ms caps each client
// at 8 jobs per 100ms) and FetchPollInterval at pgPoll, like the
// controller's Poll.
func BenchmarkRiverNoop(b *testing.B) {
	benchRiver(b, nil, func(*pgxpool.Pool) *river.Workers {
		workers := river.NewWorkers()
		river.AddWorker(workers, &riverNoopWorker{})
		return workers
	}, func(int) river.JobArgs { return riverNoopArgs{} })
}

// riverTransitionArgs is the job of BenchmarkRiverTransitionTx: object
// Key moves from "new" to "done".
type riverTransitionArgs struct {
	Key string `json:"key"`
}

// Kind implements river.JobArgs.
func (riverTransitionArgs) Kind() string { return "transition" }

// riverTransitionWorker does a controller's work for a transition in
// the job's completion transaction: the object's row gets a new version
// and value, a history row is added, and the job is completed, in one
// transaction on its client's pool.
type riverTransitionWorker struct {
	river.WorkerDefaults[riverTransitionArgs]
	pool *pgxpool.Pool
}

// Work implements river.Worker.
func (w *riverTransitionWorker) Work(ctx context.Context, job *river.Job[riverTransitionArgs]) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below, or nothing to keep
	if _, err := tx.Exec(ctx, `UPDATE objects SET version = version + 1, value = $2 WHERE key = $1`, job.Args.Key, []byte(`{"state":"done"}`)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO history (key, at, from_state, to_state, reason) VALUES ($1, now(), 'new', 'done', '')`, job.Args.Key); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// BenchmarkRiverTransitionTx is BenchmarkRiverNoop with the work of
// converge's transition done by the job: River doing what a controller
// replica does per object (an object row updated and a history row
// inserted in the job's completion transaction). b.N object rows are
// stored before the timer, like the controller's.
func BenchmarkRiverTransitionTx(b *testing.B) {
	benchRiver(b, func(ctx context.Context, pool *pgxpool.Pool, n int) error {
		_, err := pool.Exec(ctx, `CREATE TABLE objects (key text PRIMARY KEY, version bigint NOT NULL, value bytea NOT NULL);
CREATE TABLE history (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, at timestamptz NOT NULL,
	from_state text NOT NULL, to_state text NOT NULL, reason text NOT NULL);
CREATE INDEX history_key ON history (key, id)`)
		if err != nil {
			return err
		}
		_, err = pool.Exec(ctx, `INSERT INTO objects (key, version, value)
	SELECT 'obj-' || lpad(i::text, 7, '0'), 1, '{"state":"new"}' FROM generate_series(0, $1::int - 1) i`, n)
		return err
	}, func(pool *pgxpool.Pool) *river.Workers {
		workers := river.NewWorkers()
		river.AddWorker(workers, &riverTransitionWorker{pool: pool})
		return workers
	}, func(i int) river.JobArgs { return riverTransitionArgs{Key: pgKey(i)} })
}

// benchRiver runs b.N River jobs, args(i) each, on pgReplicas clients,
// each with the workers workers makes for its pool, after setup (when
// set) made the tables the jobs need.
func benchRiver(b *testing.B, setup func(ctx context.Context, pool *pgxpool.Pool, n int) error, workersFor func(*pgxpool.Pool) *river.Workers, args func(i int) river.JobArgs) {
	dsn := pgtest.DSN(b)
	ctx := context.Background()
	n := b.N

	quiet := slog.New(slog.DiscardHandler)

	rt := &roundTrips{}
	pools := make([]*pgxpool.Pool, pgReplicas)
	for i := range pools {
		p := tracedPool(b, ctx, dsn, rt)
		defer p.Close()
		pools[i] = p
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pools[0]), &rivermigrate.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	if setup != nil {
		if err := setup(ctx, pools[0], n); err != nil {
			b.Fatal(err)
		}
	}

	clients := make([]*river.Client[pgx.Tx], pgReplicas)
	events := make([]<-chan *river.Event, pgReplicas)
	for i := range clients {
		c, err := river.NewClient(riverpgxv5.New(pools[i]), &river.Config{
			ID:                fmt.Sprintf("replica-%d", i),
			Logger:            quiet,
			FetchCooldown:     river.FetchCooldownMin,
			FetchPollInterval: pgPoll,
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: pgWorkers}},
			Workers:           workersFor(pools[i]),
		})
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = c
		// A buffer for every job: events that do not fit are dropped.
		ch, unsubscribe := c.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: n + 1})
		defer unsubscribe()
		events[i] = ch
	}

	const batch = 5000
	params := make([]river.InsertManyParams, 0, min(n, batch))
	for i := 0; i < n; i += batch {
		params = params[:0]
		for range min(batch, n-i) {
			params = append(params, river.InsertManyParams{Args: args(i + len(params))})
		}
		if _, err := clients[0].InsertMany(ctx, params); err != nil {
			b.Fatal(err)
		}
	}

	analyze(b, ctx, dsn)

	var completed atomic.Int64
	all := make(chan struct{})
	var counters sync.WaitGroup
	countCtx, stopCounting := context.WithCancel(ctx)
	defer func() { stopCounting(); counters.Wait() }()
	for _, ch := range events {
		counters.Go(func() {
			for {
				select {
				case <-countCtx.Done():
					return
				case ev := <-ch:
					if ev != nil && ev.Kind == river.EventKindJobCompleted && completed.Add(1) == int64(n) {
						close(all)
					}
				}
			}
		})
	}

	var started []*river.Client[pgx.Tx]
	defer func() {
		for _, c := range started {
			stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
			if err := c.Stop(stopCtx); err != nil {
				b.Error(err)
			}
			cancel()
		}
	}()
	usage := startUsage(b, ctx, dsn, rt)
	b.ResetTimer()
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			b.Fatal(err)
		}
		started = append(started, c)
	}
	t := time.NewTimer(10 * time.Minute)
	defer t.Stop()
	select {
	case <-all:
	case <-t.C:
		b.Fatalf("after 10m only %d of %d jobs completed", completed.Load(), n)
	}
	b.StopTimer()
	usage.report(b, ctx, n)
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "objects/s")
}

// pgResumeObjects is how many objects BenchmarkPGControllerResume finds
// stored.
const pgResumeObjects = 100_000

// BenchmarkPGControllerResume: a replica starting on a PostgreSQL store
// that holds pgResumeObjects objects (stored by SQL in bulk, each with a
// history entry, then ANALYZE), all due. One op is one start: the timed
// span runs from Run until the handler's first call, so ns/op is the time
// to the first handled object (also reported as ms-to-first). The replica
// then loads its view of every object while it works; B/object is the
// heap it grew by, per object, once the view holds them all.
func BenchmarkPGControllerResume(b *testing.B) {
	ctx := context.Background()
	var first time.Duration
	var perObject float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dsn := pgtest.DSN(b)
		s, err := pgstore.Open(ctx, dsn, pgstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		pool := s.Pool()
		if _, err := pool.Exec(ctx, `INSERT INTO converge.records (key, version, value, due_at)
	SELECT 'obj/' || lpad(i::text, 7, '0'), 1, convert_to('{"state":"new","since":"2026-11-25T00:00:00Z"}', 'UTF8'), now()
	FROM generate_series(0, $1::int - 1) i`, pgResumeObjects); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO converge.history (key, at, from_state, to_state, reason)
	SELECT 'obj/' || lpad(i::text, 7, '0'), now(), '', 'new', 'added' FROM generate_series(0, $1::int - 1) i`, pgResumeObjects); err != nil {
			b.Fatal(err)
		}
		analyze(b, ctx, dsn)
		handled := make(chan struct{})
		var once sync.Once
		c, err := controller.New(controller.Config{
			Kind: "obj", Store: s, Owner: "replica-0", Workers: pgWorkers, Resync: time.Hour, Poll: pgPoll,
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				once.Do(func() { close(handled) })
				return controller.NoChange().After(24 * time.Hour), nil
			}),
		})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		runCtx, cancel := context.WithCancel(ctx)
		stopped := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go func() { stopped <- c.Run(runCtx) }()
		<-handled
		first = time.Since(start)
		b.StopTimer()
		deadline := time.Now().Add(5 * time.Minute)
		for c.Len() < pgResumeObjects {
			if time.Now().After(deadline) {
				b.Fatalf("after 5m the replica's view holds %d of %d objects", c.Len(), pgResumeObjects)
			}
			time.Sleep(10 * time.Millisecond)
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		perObject = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / pgResumeObjects
		cancel()
		if err := <-stopped; err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
	b.ReportMetric(float64(first.Microseconds())/1000, "ms-to-first")
	b.ReportMetric(perObject, "B/object")
}
