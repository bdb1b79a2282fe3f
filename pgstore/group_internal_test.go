package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// batchSizes records the size of every pgx.Batch sent on a pool.
type batchSizes struct {
	mu    sync.Mutex
	sizes []int
	// many is the WriteMany statement of the store traced, set once it
	// is open; manySizes are the writes each WriteMany carried.
	many      string
	manySizes []int
}

func (b *batchSizes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d.SQL == b.many && b.many != "" {
		puts, _ := d.Args[0].(pgtype.FlatArray[string])
		finishes, _ := d.Args[13].(pgtype.FlatArray[string])
		b.manySizes = append(b.manySizes, len(puts)+len(finishes))
	}
	return ctx
}
func (b *batchSizes) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (b *batchSizes) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	b.mu.Lock()
	b.sizes = append(b.sizes, d.Batch.Len())
	b.mu.Unlock()
	return ctx
}
func (b *batchSizes) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (b *batchSizes) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// get returns the sizes of the pgx.Batches sent.
func (b *batchSizes) get() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...)
}

// getMany returns how many writes each WriteMany statement sent carried.
func (b *batchSizes) getMany() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.manySizes...)
}

// traceMany makes b count the WriteMany statements of s.
func (b *batchSizes) traceMany(s *Store) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.many = s.sql.writeMany
}

// groupFixture is a store whose pool traces batches, with the record
// "a" stored, and a way to hold a write of "a" in flight: a transaction
// of another connection that locks the record.
type groupFixture struct {
	s       *Store
	batches *batchSizes
	dsn     string
}

func newGroupFixture(t *testing.T) *groupFixture {
	t.Helper()
	b := &batchSizes{}
	s, dsn := tracedStore(t, b)
	b.traceMany(s)
	_, err := s.Put(context.Background(), converge.StoreRecord{Key: "a", Value: json.RawMessage(`0`)})
	require.NoError(t, err)
	return &groupFixture{s: s, batches: b, dsn: dsn}
}

// tracedStore opens a store on a database of its own, whose pool (of 8
// connections) reports its statements and batches to tracer; it returns
// the store and the database's DSN. Both are closed when the test ends.
func tracedStore(t *testing.T, tracer pgx.QueryTracer) (*Store, string) {
	t.Helper()
	return tracedStoreWith(t, tracer, Options{})
}

// tracedStoreWith is tracedStore with the options opts.
func tracedStoreWith(t *testing.T, tracer pgx.QueryTracer, opts Options) (*Store, string) {
	t.Helper()
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, s := storeOnPool(t, ctx, dsn, opts, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 8
		cfg.ConnConfig.Tracer = tracer
	})
	return s, dsn
}

// openInternal opens a store with the default options on a database of
// its own and returns a context that ends after a minute, the store and
// the database's DSN; the store is closed and the context ended when t
// ends.
func openInternal(t *testing.T) (context.Context, *Store, string) {
	t.Helper()
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return ctx, s, dsn
}

// storeOnPool opens a store with opts on a pool of its own to dsn, which
// configure sets up first, and returns both; they are closed when t ends.
func storeOnPool(t testing.TB, ctx context.Context, dsn string, opts Options, configure func(*pgxpool.Config)) (*pgxpool.Pool, *Store) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	configure(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(ctx, pool, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return pool, s
}

// storeAndClaim stores the records keys (value 0), claims every due
// record of s for the owner "me", and returns the leases by key.
func storeAndClaim(t *testing.T, s *Store, keys ...string) map[string]converge.Lease {
	t.Helper()
	ctx := context.Background()
	for _, k := range keys {
		_, err := s.Put(ctx, converge.StoreRecord{Key: k, Value: json.RawMessage(`0`)})
		require.NoError(t, err)
	}
	claimed, err := s.ClaimDue(ctx, "", "me", time.Minute, 10)
	require.NoError(t, err)
	leases := map[string]converge.Lease{}
	for _, c := range claimed {
		leases[c.Record.Key] = c.Lease
	}
	return leases
}

// holdA locks the record "a" until the returned function is called, and
// starts a write of "a", which waits for the lock while the writes
// started meanwhile queue up behind it. It returns that write's outcome.
func (f *groupFixture) holdA(t *testing.T) (release func(), written <-chan error) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.dsn)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM converge.records WHERE key = 'a' FOR UPDATE`)
	require.NoError(t, err)
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = tx.Rollback(ctx)
			_ = conn.Close(ctx)
		})
	}
	t.Cleanup(release) // also when the test fails before it releases
	done := make(chan error, 1)
	go func() {
		_, err := f.s.Put(ctx, converge.StoreRecord{Key: "a", Version: 1, Value: json.RawMessage(`1`)})
		done <- err
	}()
	require.Eventually(t, func() bool {
		f.s.writes.mu.Lock()
		defer f.s.writes.mu.Unlock()
		return f.s.writes.running
	}, 30*time.Second, time.Millisecond, "the write of a is in flight")
	return release, done
}

// waitPending waits until n writes wait behind the one in flight.
func (f *groupFixture) waitPending(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		f.s.writes.mu.Lock()
		defer f.s.writes.mu.Unlock()
		return len(f.s.writes.pending) == n
	}, 30*time.Second, time.Millisecond, "%d writes queued", n)
}

// TestWritesThatComeTogetherAreSentAsOneBatch checks the group commit of
// Put: the writes made while one is in flight are sent together, these
// Puts that update records as one WriteMany statement, and each still
// gets its own outcome: a fenced write whose lease was lost fails with
// ErrLeaseLost, a stale one with a *StoreVersionError, and the others
// are stored with their history.
func TestWritesThatComeTogetherAreSentAsOneBatch(t *testing.T) {
	f := newGroupFixture(t)
	s := f.s
	ctx := context.Background()
	leases := storeAndClaim(t, s, "b", "c", "d")
	require.Contains(t, leases, "b")
	require.Contains(t, leases, "c")

	release, aDone := f.holdA(t)
	before, manyBefore := len(f.batches.get()), len(f.batches.getMany())
	results := make(map[string]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	write := func(name string, fn func() error) {
		wg.Go(func() {
			err := fn()
			mu.Lock()
			results[name] = err
			mu.Unlock()
		})
	}
	h := converge.HistoryEntry{At: time.Now(), From: "x", To: "y"}
	write("fenced b", func() error {
		_, err := s.Put(ctx, converge.StoreRecord{Key: "b", Version: 1, Value: json.RawMessage(`1`), Token: leases["b"].Token}, h)
		return err
	})
	f.waitPending(t, 1)
	write("lost c", func() error {
		_, err := s.Put(ctx, converge.StoreRecord{Key: "c", Version: 1, Value: json.RawMessage(`1`), Token: leases["c"].Token + 1})
		return err
	})
	f.waitPending(t, 2)
	write("stale d", func() error {
		_, err := s.Put(ctx, converge.StoreRecord{Key: "d", Version: 7, Value: json.RawMessage(`1`)})
		return err
	})
	f.waitPending(t, 3)
	release()
	wg.Wait()
	require.NoError(t, <-aDone)

	assert.Equal(t, []int{3}, f.batches.getMany()[manyBefore:], "the three writes that came together are one WriteMany")
	assert.Empty(t, f.batches.get()[before:], "and no batch of single statements")
	assert.NoError(t, results["fenced b"])
	assert.ErrorIs(t, results["lost c"], converge.ErrLeaseLost)
	var ve *converge.StoreVersionError
	assert.ErrorAs(t, results["stale d"], &ve)
	hist, err := s.History(ctx, "b")
	require.NoError(t, err)
	assert.Len(t, hist, 1, "the history entry is stored with the write")
	rec, err := s.Get(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), rec.Version, "the fenced-off write changed nothing")
}

// TestBatchRefusedByTheDatabaseRunsEachWriteAlone checks what happens
// when the database refuses one statement of a batch: PostgreSQL rolls
// the whole batch back, so the others must not be reported stored on
// its word: each is run again alone, with its own outcome.
func TestBatchRefusedByTheDatabaseRunsEachWriteAlone(t *testing.T) {
	f := newGroupFixture(t)
	s := f.s
	ctx := context.Background()
	// A key longer than a btree entry may be (2704 bytes), random so
	// that it does not compress: the database refuses it.
	raw := make([]byte, 4000)
	_, _ = rand.Read(raw)
	huge := hex.EncodeToString(raw)

	release, aDone := f.holdA(t)
	before := len(f.batches.get())
	var wg sync.WaitGroup
	var errB, errHuge, errD error
	wg.Go(func() { _, errB = s.Put(ctx, converge.StoreRecord{Key: "b", Value: json.RawMessage(`1`)}) })
	f.waitPending(t, 1)
	wg.Go(func() { _, errHuge = s.Put(ctx, converge.StoreRecord{Key: huge, Value: json.RawMessage(`1`)}) })
	f.waitPending(t, 2)
	wg.Go(func() { _, errD = s.Put(ctx, converge.StoreRecord{Key: "zz", Value: json.RawMessage(`1`)}) })
	f.waitPending(t, 3)
	release()
	wg.Wait()
	require.NoError(t, <-aDone)

	assert.Equal(t, []int{3}, f.batches.get()[before:])
	assert.Error(t, errHuge)
	require.NoError(t, errB)
	require.NoError(t, errD)
	for _, k := range []string{"b", "zz"} {
		rec, err := s.Get(ctx, k)
		require.NoError(t, err, "%s is stored, as its Put said", k)
		assert.Equal(t, uint64(1), rec.Version)
	}
}

// TestWriteManyRefusedByTheDatabaseRunsEachWriteAlone is
// TestBatchRefusedByTheDatabaseRunsEachWriteAlone for a WriteMany: when
// the database refuses the statement (here a history entry that a check
// constraint forbids), nothing of it is kept, and each write is run again
// alone, with its own outcome.
func TestWriteManyRefusedByTheDatabaseRunsEachWriteAlone(t *testing.T) {
	f := newGroupFixture(t)
	s := f.s
	ctx := context.Background()
	leases := storeAndClaim(t, s, "b", "c", "d")
	require.Len(t, leases, 4, "a, b, c and d")
	_, err := s.pool.Exec(ctx, `ALTER TABLE converge.history ADD CONSTRAINT refuse CHECK (reason <> 'refuse')`)
	require.NoError(t, err)

	release, aDone := f.holdA(t)
	manyBefore := len(f.batches.getMany())
	var wg sync.WaitGroup
	var errB, errC, errD error
	wg.Go(func() {
		_, errB = s.Put(ctx, converge.StoreRecord{Key: "b", Version: 1, Value: json.RawMessage(`1`), Token: leases["b"].Token},
			converge.HistoryEntry{At: time.Now(), From: "x", To: "y"})
	})
	f.waitPending(t, 1)
	wg.Go(func() {
		_, errC = s.Put(ctx, converge.StoreRecord{Key: "c", Version: 1, Value: json.RawMessage(`1`), Token: leases["c"].Token},
			converge.HistoryEntry{At: time.Now(), From: "x", To: "y", Reason: "refuse"})
	})
	f.waitPending(t, 2)
	wg.Go(func() { errD = s.Finish(ctx, leases["d"], time.Now().Add(-time.Second)) })
	f.waitPending(t, 3)
	release()
	wg.Wait()
	require.NoError(t, <-aDone)

	assert.Equal(t, []int{3}, f.batches.getMany()[manyBefore:], "the three were sent as one WriteMany first")
	var pe *pgconn.PgError
	require.ErrorAs(t, errC, &pe)
	assert.Equal(t, "refuse", pe.ConstraintName)
	require.NoError(t, errB)
	require.NoError(t, errD)
	rec, err := s.Get(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), rec.Version, "b is stored, as its Put said")
	hist, err := s.History(ctx, "b")
	require.NoError(t, err)
	assert.Len(t, hist, 1, "with its entry, once")
	rec, err = s.Get(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), rec.Version, "c's refused write changed nothing")
	again, err := s.ClaimDue(ctx, "", "other", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, again, 1, "d is finished and due; a, b and c are still leased")
	assert.Equal(t, "d", again[0].Record.Key)
}

// TestWriteGivenUpBeforeItIsSentIsNotWritten checks that a write whose
// context ends while it waits behind another returns the context's error
// and is never sent.
func TestWriteGivenUpBeforeItIsSentIsNotWritten(t *testing.T) {
	f := newGroupFixture(t)
	s := f.s
	release, aDone := f.holdA(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, converge.StoreRecord{Key: "b", Value: json.RawMessage(`1`)})
		errc <- err
	}()
	f.waitPending(t, 1)
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("the write given up still waits for the one in flight")
	}
	assert.True(t, errors.Is(err, context.Canceled), "got %v", err)
	release()
	require.NoError(t, <-aDone)
	// The group is idle again: a later write goes through.
	require.Eventually(t, func() bool {
		s.writes.mu.Lock()
		defer s.writes.mu.Unlock()
		return !s.writes.running
	}, 30*time.Second, time.Millisecond)
	_, err = s.Get(context.Background(), "b")
	assert.ErrorIs(t, err, converge.ErrStoreNotFound, "the write given up was not sent")
}

// batchStatements records the statements of every pgx.Batch sent on a
// pool, and the statements sent alone.
type batchStatements struct {
	batchSizes
	mu      sync.Mutex
	batches [][]string
	alone   []string
}

func (b *batchStatements) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	ctx = b.batchSizes.TraceQueryStart(ctx, conn, d)
	b.mu.Lock()
	b.alone = append(b.alone, d.SQL)
	b.mu.Unlock()
	return ctx
}

func (b *batchStatements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	b.mu.Lock()
	b.batches = append(b.batches, sqls)
	b.mu.Unlock()
	return ctx
}

func (b *batchStatements) get() (batches [][]string, alone []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.batches), slices.Clone(b.alone)
}

// TestFinishRidesWithPuts checks that Finish calls made while a write is
// in flight are sent with the Puts that wait with them, in one WriteMany
// statement (one round trip, one transaction that commits synchronously:
// TestOnlyFinishCommitsAsynchronously), never as the FinishMany that
// commits without waiting for the flush; and that each still gets its
// own outcome.
func TestFinishRidesWithPuts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := &batchStatements{}
	s, dsn := tracedStore(t, tr)
	tr.traceMany(s)
	leases := storeAndClaim(t, s, "a", "b", "c", "d")
	require.Len(t, leases, 4)
	f := &groupFixture{s: s, dsn: dsn}
	release, aDone := f.holdA(t)
	_, aloneBefore := tr.get()

	results := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	write := func(name string, fn func() error) {
		wg.Go(func() {
			err := fn()
			mu.Lock()
			results[name] = err
			mu.Unlock()
		})
	}
	write("finish d", func() error { return s.Finish(ctx, leases["d"], time.Now().Add(-time.Second)) })
	f.waitPending(t, 1)
	write("put b", func() error {
		_, err := s.Put(ctx, converge.StoreRecord{Key: "b", Version: 1, Value: json.RawMessage(`1`), Token: leases["b"].Token},
			converge.HistoryEntry{At: time.Now(), From: "x", To: "y"})
		return err
	})
	f.waitPending(t, 2)
	lost := leases["c"]
	lost.Token++
	write("lost c", func() error { return s.Finish(ctx, lost, time.Now().Add(-time.Second)) })
	f.waitPending(t, 3)
	release()
	wg.Wait()
	require.NoError(t, <-aDone)

	batches, alone := tr.get()
	assert.Empty(t, batches, "no batch of single statements")
	// The Put of a, which holdA sent alone, may be traced after
	// aloneBefore was read: it is the only unfenced Put of the test.
	sent := slices.DeleteFunc(slices.Clone(alone[len(aloneBefore):]), func(q string) bool { return q == s.sql.put[putVariant(false, false)] })
	assert.Equal(t, []string{s.sql.writeMany}, sent,
		"the fenced Put of b and the Finish of c and of d are one WriteMany, which commits synchronously")
	assert.Equal(t, []int{3}, tr.getMany())
	assert.NoError(t, results["put b"])
	assert.NoError(t, results["finish d"])
	assert.ErrorIs(t, results["lost c"], converge.ErrLeaseLost)

	again, err := s.ClaimDue(ctx, "", "other", time.Minute, 10)
	require.NoError(t, err)
	var got []string
	for _, c := range again {
		got = append(got, c.Record.Key)
	}
	assert.Equal(t, []string{"d"}, got, "d is finished and due; a, b and c are still leased")
}

// TestPutsSentTogetherWriteWhatPutsAloneWrite runs the same Puts, with
// several history entries each (some older than the age bound), on two
// stores with the same retention: on one, the last Puts come together
// and are sent together, as one WriteMany (Puts that update records) or
// as one batch of single statements (with a Put that creates a record
// among them); on the other, each is sent alone. The outcomes, records
// and histories must be the same: both ways apply each put's version
// check, fence, history and retention exactly as a Put sent alone does.
func TestPutsSentTogetherWriteWhatPutsAloneWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		ret  converge.Retention
	}{
		{"default", converge.Retention{}},
		{"entries", converge.Retention{Entries: 3}},
		{"one entry", converge.Retention{Entries: 1}},
		{"entries and age", converge.Retention{Entries: 3, Age: time.Hour}},
		{"age only", converge.Retention{Entries: -1, Age: time.Hour}},
	} {
		for _, many := range []bool{true, false} {
			name := tc.name + "/as one WriteMany"
			if !many {
				name = tc.name + "/as one batch"
			}
			t.Run(name, func(t *testing.T) { putsTogetherAndAlone(t, tc.ret, many) })
		}
	}
}

// putsTogetherAndAlone is a case of
// TestPutsSentTogetherWriteWhatPutsAloneWrite with retention ret, whose
// Puts sent together are a WriteMany (many) or a batch of statements.
func putsTogetherAndAlone(t *testing.T, ret converge.Retention, many bool) {
	ctx := context.Background()
	tr := &batchStatements{}
	s, dsn := tracedStoreWith(t, tr, Options{Retention: ret})
	tr.traceMany(s)
	alone, err := New(ctx, s.pool, Options{Schema: "alone", Retention: ret})
	require.NoError(t, err)
	defer alone.Close()
	now := time.Now().Truncate(time.Microsecond)
	entries := func(key string, n int, old ...int) []converge.HistoryEntry {
		var out []converge.HistoryEntry
		for i := range n {
			e := converge.HistoryEntry{At: now.Add(time.Duration(i) * time.Microsecond), From: key, To: fmt.Sprint(i), Reason: "r", By: "me"}
			if slices.Contains(old, i) {
				e.At = now.Add(-2*time.Hour + time.Duration(i)*time.Microsecond)
				e.Subject = &converge.HistorySubject{Command: i, Group: "g"}
			}
			out = append(out, e)
		}
		return out
	}
	keys := []string{"b", "c", "d", "e"}
	// Before: each key stored with an old entry and a new one, then
	// written again with two more.
	for _, st := range []*Store{s, alone} {
		_, err := st.Put(ctx, converge.StoreRecord{Key: "a", Value: json.RawMessage(`0`)})
		require.NoError(t, err)
		for _, k := range keys {
			_, err := st.Put(ctx, converge.StoreRecord{Key: k, Value: json.RawMessage(`0`)}, entries(k, 2, 0)...)
			require.NoError(t, err)
			_, err = st.Put(ctx, converge.StoreRecord{Key: k, Version: 1, Value: json.RawMessage(`1`)}, entries(k, 2)...)
			require.NoError(t, err)
		}
	}
	leases := map[string]converge.Lease{}
	for _, st := range []*Store{s, alone} {
		claimed, err := st.ClaimDue(ctx, "", "me", time.Minute, 10)
		require.NoError(t, err)
		for _, c := range claimed {
			if st == s {
				leases[c.Record.Key] = c.Lease
			}
		}
	}
	// The Puts: b without history, c with two entries (the first
	// old), d fenced with five (the first three and the last old),
	// e stale.
	type put struct {
		rec  converge.StoreRecord
		hist []converge.HistoryEntry
	}
	puts := []put{
		{converge.StoreRecord{Key: "b", Version: 2, Value: json.RawMessage(`2`)}, nil},
		{converge.StoreRecord{Key: "c", Version: 2, Value: json.RawMessage(`2`)}, entries("c", 2, 0)},
		{converge.StoreRecord{Key: "d", Version: 2, Value: json.RawMessage(`2`), Token: leases["d"].Token}, entries("d", 5, 0, 1, 2, 4)},
		{converge.StoreRecord{Key: "e", Version: 1, Value: json.RawMessage(`2`)}, entries("e", 1)},
	}
	if !many {
		// A Put that creates a record: not one WriteMany carries.
		puts = append(puts, put{converge.StoreRecord{Key: "f", Value: json.RawMessage(`0`)}, entries("f", 3, 1)})
		keys = append(keys, "f")
	}
	f := &groupFixture{s: s, dsn: dsn}
	release, aDone := f.holdA(t)
	batchesBefore, _ := tr.get()
	manyBefore := len(tr.getMany())
	var wg sync.WaitGroup
	together := make([]error, len(puts))
	for i, p := range puts {
		wg.Go(func() { _, together[i] = s.Put(ctx, p.rec, p.hist...) })
		f.waitPending(t, i+1)
	}
	release()
	wg.Wait()
	require.NoError(t, <-aDone)
	batches, _ := tr.get()
	if many {
		require.Equal(t, []int{len(puts)}, tr.getMany()[manyBefore:], "the Puts came together: one WriteMany")
		require.Empty(t, batches[len(batchesBefore):], "and no batch")
	} else {
		require.Len(t, batches[len(batchesBefore):], 1, "the Puts came together: one batch")
		require.Empty(t, tr.getMany()[manyBefore:], "and no WriteMany")
	}

	for i, p := range puts {
		_, err := alone.Put(ctx, p.rec, p.hist...)
		if err == nil {
			assert.NoError(t, together[i], p.rec.Key)
			continue
		}
		var ve *converge.StoreVersionError
		require.ErrorAs(t, err, &ve, p.rec.Key)
		assert.ErrorAs(t, together[i], &ve, p.rec.Key)
	}
	for _, k := range keys {
		want, err := alone.Get(ctx, k)
		require.NoError(t, err)
		got, err := s.Get(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, want, got, k)
		wantH, err := alone.History(ctx, k)
		require.NoError(t, err)
		gotH, err := s.History(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, wantH, gotH, "history of %s", k)
	}
}

// TestWriteManyIsPlannedGenerically runs WriteMany statements of
// different sizes many times on one connection, on tables bulk-loaded and
// never analysed, and checks in pg_prepared_statements that PostgreSQL
// planned it generically after its first custom plans (as
// TestHotStatementsArePlannedGenerically does for the single
// statements): its plan must not depend on how many writes it carries.
func TestWriteManyIsPlannedGenerically(t *testing.T) {
	ctx := context.Background()
	pool, s := openUnplanned(t, pgtest.DSN(t), Options{Schema: "writemany_plans"})

	const rounds = 30
	for i := range rounds {
		n := 1 + i%6 // writes per statement
		var keys []string
		for j := range n {
			k := fmt.Sprintf("obj-%03d-%d", i, j)
			keys = append(keys, k)
			_, err := s.Put(ctx, converge.StoreRecord{Key: k, Value: json.RawMessage(`0`)})
			require.NoError(t, err)
		}
		claimed, err := s.ClaimDue(ctx, fmt.Sprintf("obj-%03d-", i), "me", time.Minute, n)
		require.NoError(t, err)
		require.Len(t, claimed, n)
		var calls []*call
		for j, c := range claimed {
			if j%2 == 1 {
				calls = append(calls, &call{key: c.Lease.Key, fin: &finishArgs{owner: "me", token: int64(c.Lease.Token)}})
				continue
			}
			h, err := s.history(c.Lease.Key, []converge.HistoryEntry{{At: time.Now(), From: "new", To: "done"}})
			require.NoError(t, err)
			calls = append(calls, &call{key: c.Lease.Key, put: &putArgs{version: 1, token: int64(c.Lease.Token), value: []byte(`1`), hist: h}})
		}
		s.writes.sendMany(ctx, calls)
		for _, c := range calls {
			require.NoError(t, c.err, c.key)
		}
	}
	var generic, custom int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, s.sql.writeMany).Scan(&generic, &custom))
	assert.Equal(t, int64(rounds), generic+custom, "executions")
	assert.LessOrEqual(t, custom, int64(5), "WriteMany planned for its parameters %d times in %d calls", custom, rounds)
}
