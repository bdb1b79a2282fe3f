package pgstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// finishBatch is the most Finish calls that one batch of a group carries.
const finishBatch = 256

// group commits the writes (Put and Finish) that a store's callers make
// at the same time together: the writes that come while one is in flight
// are sent next, together, in one round trip and one transaction; no
// write waits for a timer. Each write is checked and applied as if alone,
// with its own outcome, records locked in key order. A batch of updating
// Puts and Finish calls of distinct keys is one WriteMany statement; a
// batch of Finish calls only is one FinishMany; any other batch is a
// pgx.Batch; a refused batch runs again one write at a time.
// docs/internals.md ("pgstore's batches") gives the reasons.
type group struct {
	pool       *pgxpool.Pool
	finishMany string // statements.finishMany
	writeMany  string // statements.writeMany
	channel    string // the store's notification channel

	mu      sync.Mutex
	pending []*call
	running bool // a write or batch is in flight
}

// call is one write waiting in a group.
type call struct {
	ctx context.Context
	key string
	sql string
	// args makes the arguments of sql, when the call is sent as its own
	// statement: most are carried by a FinishMany or a WriteMany, which
	// need none of them.
	args func() []any
	// scan reads the statement's row; it runs again when the batch is
	// run again one write at a time.
	scan func(pgx.Row) error
	// fin, set for a Finish, is what a FinishMany or a WriteMany needs
	// of it; sql and args are then the single Finish.
	fin *finishArgs
	// put, set for a Put that updates a record, is what a WriteMany
	// needs of it.
	put *putArgs
	// version is the version a Put wrote, once done is closed.
	version int64

	state atomic.Int32 // callWaiting, callTaken or callAbandoned
	err   error        // the outcome, once done is closed
	done  chan struct{}
}

// finishArgs is a Finish call's lease and next due time (nil: not due).
type finishArgs struct {
	owner string
	token int64
	next  *time.Time
}

// putArgs is a Put's version read, lease token (0: not fenced), value
// as stored and history.
type putArgs struct {
	version, token int64
	value          []byte
	hist           histArgs
}

const (
	callWaiting   = iota // in pending
	callTaken            // in a batch on its way
	callAbandoned        // its caller stopped waiting before it was sent
)

// do runs the write c and returns its outcome: the error of c.scan
// (pgx.ErrNoRows when the statement returned no row; for a Finish, when
// the lease was not released) or the database's.
func (g *group) do(c *call) error {
	c.done = make(chan struct{})
	g.mu.Lock()
	if !g.running {
		// Nothing in flight: send this write now, alone, on the
		// caller's context (one that has ended sends nothing).
		g.running = true
		g.mu.Unlock()
		c.state.Store(callTaken)
		g.run(c.ctx, []*call{c})
		close(c.done)
		g.next()
		return c.err
	}
	g.pending = append(g.pending, c)
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-c.ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			return c.ctx.Err() // never sent
		}
		<-c.done // sent: its batch ends once no caller waits for it
		return c.err
	}
}

// next sends the writes that came while one was in flight, as one batch,
// or notes that nothing is in flight any more. The batches that come
// meanwhile are sent in turn by the same goroutine, whose stack has grown
// to what pgx needs by then: a new goroutine per batch would grow its
// own each time.
func (g *group) next() {
	batch := g.nextBatch()
	if batch == nil {
		return
	}
	go func() {
		for ; batch != nil; batch = g.nextBatch() {
			g.send(batch)
		}
	}()
}

// nextBatch takes the next batch of the writes pending, or notes that
// nothing is in flight any more and returns nil.
func (g *group) nextBatch() []*call {
	g.mu.Lock()
	defer g.mu.Unlock()
	batch, rest := take(g.pending)
	g.pending = rest
	if len(batch) == 0 {
		g.running = false
		return nil
	}
	return batch
}

// take splits the pending calls into those the next batch carries and
// the rest, dropping those abandoned: every Put, and at most finishBatch
// Finish calls; when there is no Put, at most finishBatch Finish calls of
// distinct keys, for one FinishMany. The order of the calls is kept.
func take(pending []*call) (batch, rest []*call) {
	puts := slices.ContainsFunc(pending, func(c *call) bool { return c.fin == nil && c.state.Load() == callWaiting })
	seen := map[string]bool{}
	finishes := 0
	for _, c := range pending {
		switch {
		case c.state.Load() == callAbandoned:
		case c.fin == nil:
			batch = append(batch, c)
		case finishes < finishBatch && (puts || !seen[c.key]):
			seen[c.key] = true
			finishes++
			batch = append(batch, c)
		default:
			rest = append(rest, c)
		}
	}
	return batch, rest
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
	ended := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	stops := make([]func() bool, len(taken))
	for i, c := range taken {
		stops[i] = context.AfterFunc(c.ctx, ended)
	}
	defer func() {
		for _, c := range taken {
			close(c.done)
		}
		for _, stop := range stops {
			stop()
		}
	}()
	g.run(ctx, taken)
}

// run runs the writes calls, taken, on ctx and sets their outcomes.
func (g *group) run(ctx context.Context, taken []*call) {
	switch statementFor(taken) {
	case viaFinishMany:
		g.sendFinishes(ctx, taken)
		return
	case viaWriteMany:
		g.sendMany(ctx, taken)
		return
	}
	if len(taken) == 1 {
		c := taken[0]
		c.err = c.scan(g.pool.QueryRow(ctx, c.sql, c.args()...))
		return
	}
	// One order of keys for every batch (stable: writes of one key stay
	// in the order they came).
	slices.SortStableFunc(taken, func(a, b *call) int { return cmp.Compare(a.key, b.key) })
	b := &pgx.Batch{}
	for _, c := range taken {
		b.Queue(c.sql, c.args()...)
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
	g.settle(taken, failed)
}

// via is how a batch of writes is sent.
type via int

const (
	viaFinishMany via = iota // Finish calls only: one FinishMany
	viaWriteMany             // Puts that update a record, and Finish calls: one WriteMany
	viaSingles               // anything else: each write's own statement
)

// statementFor tells how calls, taken together, are sent: as one
// FinishMany or one WriteMany when they are of distinct keys and each of
// the kinds that statement carries (a single Put is sent as its own
// statement), as their own statements otherwise.
func statementFor(calls []*call) via {
	seen := make(map[string]bool, len(calls))
	finishes := true
	for _, c := range calls {
		if seen[c.key] || c.put == nil && c.fin == nil {
			return viaSingles
		}
		seen[c.key] = true
		finishes = finishes && c.fin != nil
	}
	switch {
	case finishes:
		return viaFinishMany
	case len(calls) > 1:
		return viaWriteMany
	}
	return viaSingles
}

// sendMany runs calls, Puts that update a record and Finish calls of
// distinct keys, as one WriteMany statement.
func (g *group) sendMany(ctx context.Context, calls []*call) {
	written := make(map[string]int64, len(calls))
	rows, err := g.pool.Query(ctx, g.writeMany, g.manyArgs(calls)...)
	if err == nil {
		var key, ignored string
		var version int64
		_, err = pgx.ForEachRow(rows, []any{&key, &version, &ignored}, func() error {
			written[key] = version
			return nil
		})
	}
	for _, c := range calls {
		v, ok := written[c.key]
		switch {
		case err != nil:
			c.err = err
		case !ok:
			c.err = pgx.ErrNoRows // stale, fenced off, or the lease was not the current one
		default:
			c.version, c.err = v, nil
		}
	}
	g.settle(calls, err)
}

// manyArgs returns the arguments of the WriteMany statement that carries
// calls, Puts that update a record and Finish calls of distinct keys.
func (g *group) manyArgs(calls []*call) []any {
	var (
		keys, fkeys, fowners      []string
		versions, tokens, ftokens []int64
		values                    [][]byte
		ns                        []int32
		fnexts                    []*time.Time
		ekeys                     []string
		eords                     []int32
		h                         histArgs
	)
	for _, c := range calls {
		if f := c.fin; f != nil {
			fkeys, fowners, ftokens, fnexts = append(fkeys, c.key), append(fowners, f.owner), append(ftokens, f.token), append(fnexts, f.next)
			continue
		}
		p := c.put
		n := len(p.hist.ats)
		keys, versions, tokens = append(keys, c.key), append(versions, p.version), append(tokens, p.token)
		values, ns = append(values, p.value), append(ns, int32(n))
		for i := range n {
			ekeys, eords = append(ekeys, c.key), append(eords, int32(i+1))
		}
		h.ats, h.froms, h.tos = append(h.ats, p.hist.ats...), append(h.froms, p.hist.froms...), append(h.tos, p.hist.tos...)
		h.reasons, h.subjects, h.bys = append(h.reasons, p.hist.reasons...), append(h.subjects, p.hist.subjects...), append(h.bys, p.hist.bys...)
	}
	args := []any{pgtype.FlatArray[string](keys), pgtype.FlatArray[int64](versions), pgtype.FlatArray[int64](tokens),
		pgtype.FlatArray[[]byte](values), pgtype.FlatArray[int32](ns), pgtype.FlatArray[string](ekeys), pgtype.FlatArray[int32](eords)}
	args = h.appendTo(args)
	args = append(args, pgtype.FlatArray[string](fkeys), pgtype.FlatArray[string](fowners), pgtype.FlatArray[int64](ftokens),
		pgtype.FlatArray[*time.Time](fnexts), g.channel)
	return args
}

// sendFinishes runs the Finish calls of distinct keys calls as one
// FinishMany statement.
func (g *group) sendFinishes(ctx context.Context, calls []*call) {
	n := len(calls)
	keys, owners := make([]string, n), make([]string, n)
	tokens, nexts := make([]int64, n), make([]*time.Time, n)
	for i, c := range calls {
		keys[i], owners[i], tokens[i], nexts[i] = c.key, c.fin.owner, c.fin.token, c.fin.next
	}
	released := map[string]bool{}
	rows, err := g.pool.Query(ctx, g.finishMany, keys, owners, tokens, nexts, g.channel)
	if err == nil {
		var key, ignored string
		_, err = pgx.ForEachRow(rows, []any{&key, &ignored}, func() error {
			released[key] = true
			return nil
		})
	}
	for _, c := range calls {
		switch {
		case err != nil:
			c.err = err
		case !released[c.key]:
			c.err = pgx.ErrNoRows // the lease was not the current one
		default:
			c.err = nil
		}
	}
	g.settle(calls, err)
}

// settle finishes the outcome of calls, sent together, whose statement or
// batch failed with failed (nil: it did not). A connection that failed
// leaves every call with its error; a statement the database refused
// rolled the others back, so each call is run again alone, for its own
// outcome.
func (g *group) settle(calls []*call, failed error) {
	if failed == nil {
		return
	}
	var pe *pgconn.PgError
	if !errors.As(failed, &pe) {
		// The connection failed: whether the batch committed is not
		// known, as for a single statement.
		for _, c := range calls {
			c.err = failed
		}
		return
	}
	for _, c := range calls {
		c.err = c.scan(g.pool.QueryRow(c.ctx, c.sql, c.args()...))
	}
}

// isDBError tells an error of the database or the connection from a
// statement that returned no row.
func isDBError(err error) bool {
	return err != nil && !errors.Is(err, pgx.ErrNoRows)
}
