package pgstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// group commits the writes that a store's callers make at the same time
// together: while one write is on its way to the database, the writes
// that come meanwhile wait, and are then sent as one pgx.Batch, which
// PostgreSQL runs as one implicit transaction. A dozen controller workers
// writing objects at once thus cost one round trip and one commit (one
// WAL flush) instead of a dozen. No write waits for a timer: a write that
// finds nothing in flight is sent at once, alone.
//
// Each write is still one self-contained statement, run in the batch as
// if alone and in turn, and its caller returns only once the batch has
// committed: what a write promises (its version check, its fence, its
// history) is unchanged. The statements of a batch are ordered by key,
// so batches of replicas lock records in one order and cannot deadlock
// with each other. When the database refuses one statement, the whole
// transaction is rolled back, so the batch is run again one write at a
// time, each with its own outcome.
type group struct {
	pool *pgxpool.Pool

	mu      sync.Mutex
	pending []*call
	running bool // a write or batch is in flight
}

// call is one write waiting in a group.
type call struct {
	ctx  context.Context
	key  string
	sql  string
	args []any
	// scan reads the statement's row; it runs again when the batch is
	// run again one write at a time.
	scan func(pgx.Row) error

	state atomic.Int32 // callWaiting, callTaken or callAbandoned
	err   error        // the outcome, once done is closed
	done  chan struct{}
}

const (
	callWaiting   = iota // in pending
	callTaken            // in a batch on its way
	callAbandoned        // its caller stopped waiting before it was sent
)

// do runs the statement sql with args as a write of key, scanning its row
// with scan, and returns scan's error (pgx.ErrNoRows when the statement
// returned no row) or the database's.
func (g *group) do(ctx context.Context, key, sql string, args []any, scan func(pgx.Row) error) error {
	c := &call{ctx: ctx, key: key, sql: sql, args: args, scan: scan}
	g.mu.Lock()
	if !g.running {
		// Nothing in flight: send this write now, alone.
		g.running = true
		g.mu.Unlock()
		c.err = scan(g.pool.QueryRow(ctx, sql, args...))
		g.next()
		return c.err
	}
	c.done = make(chan struct{})
	g.pending = append(g.pending, c)
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			return ctx.Err() // never sent
		}
		<-c.done // sent: its batch ends once no caller waits for it
		return c.err
	}
}

// next sends the writes that came while one was in flight, as one batch,
// or notes that nothing is in flight any more.
func (g *group) next() {
	g.mu.Lock()
	batch := g.pending
	g.pending = nil
	if len(batch) == 0 {
		g.running = false
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	go func() {
		g.send(batch)
		g.next()
	}()
}

// send runs the writes of batch that are still wanted and hands each
// caller its outcome.
func (g *group) send(batch []*call) {
	taken := batch[:0]
	for _, c := range batch {
		if c.state.CompareAndSwap(callWaiting, callTaken) {
			taken = append(taken, c)
		}
	}
	if len(taken) == 0 {
		return
	}
	// The batch's context ends when every caller's has ended: then
	// nobody waits for its outcome.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int64
	left.Store(int64(len(taken)))
	for _, c := range taken {
		stop := context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	defer func() {
		for _, c := range taken {
			close(c.done)
		}
	}()
	if len(taken) == 1 {
		c := taken[0]
		c.err = c.scan(g.pool.QueryRow(ctx, c.sql, c.args...))
		return
	}
	// One order of keys for every batch (stable: writes of one key stay
	// in the order they came).
	slices.SortStableFunc(taken, func(a, b *call) int { return cmp.Compare(a.key, b.key) })
	b := &pgx.Batch{}
	for _, c := range taken {
		b.Queue(c.sql, c.args...)
	}
	res := g.pool.SendBatch(ctx, b)
	var failed error
	for _, c := range taken {
		c.err = c.scan(res.QueryRow())
		if isDBError(c.err) {
			failed = cmp.Or(failed, c.err)
		}
	}
	if err := res.Close(); err != nil {
		failed = cmp.Or(failed, err)
	}
	if failed == nil {
		return
	}
	var pe *pgconn.PgError
	if !errors.As(failed, &pe) {
		// The connection failed: whether the batch committed is not
		// known, as for a single statement.
		for _, c := range taken {
			c.err = failed
		}
		return
	}
	// The database refused a statement and rolled the batch back: run
	// each write alone, for its own outcome.
	for _, c := range taken {
		c.err = c.scan(g.pool.QueryRow(c.ctx, c.sql, c.args...))
	}
}

// isDBError tells an error of the database or the connection from a
// statement that returned no row.
func isDBError(err error) bool {
	return err != nil && !errors.Is(err, pgx.ErrNoRows)
}
