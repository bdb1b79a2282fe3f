package pgstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// finishInFlight is how many FinishMany statements a store has on their
// way at once, and finishBatch the most Finish calls one of them carries.
const (
	finishInFlight = 2
	finishBatch    = 256
)

// finisher sends the Finish calls of a store's callers as FinishMany
// statements (statements.finishMany): a call that finds fewer than
// finishInFlight statements on their way is sent at once, and the calls
// that come meanwhile are sent together by the next statement, one
// statement (one round trip, one commit) for all of them. It keeps the
// Finish calls apart from the other writes (group), since a FinishMany
// commits without waiting for the flush of its WAL: see finishMany for
// why that is harmless for a Finish and only for a Finish.
type finisher struct {
	s *Store

	mu       sync.Mutex
	pending  []*finishCall
	inFlight int
}

// finishCall is one Finish waiting in a finisher.
type finishCall struct {
	ctx        context.Context
	key, owner string
	token      int64
	next       *time.Time
	state      atomic.Int32 // callWaiting, callTaken or callAbandoned
	released   bool         // the lease was released; valid once done is closed
	err        error
	done       chan struct{}
}

// finish releases the lease of key held by owner with token, making the
// key due at next (nil: not due), and tells whether it did (false: the
// lease was not the current one).
func (f *finisher) finish(ctx context.Context, key, owner string, token int64, next *time.Time) (bool, error) {
	c := &finishCall{ctx: ctx, key: key, owner: owner, token: token, next: next, done: make(chan struct{})}
	f.mu.Lock()
	f.pending = append(f.pending, c)
	if f.inFlight < finishInFlight {
		f.inFlight++
		go f.run()
	}
	f.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			return false, ctx.Err() // never sent
		}
		<-c.done
	}
	return c.released, c.err
}

// run sends the pending calls, a statement at a time, until none is left.
func (f *finisher) run() {
	for {
		f.mu.Lock()
		batch, rest := f.take()
		f.pending = rest
		if len(batch) == 0 {
			f.inFlight--
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		f.send(batch)
	}
}

// take splits the pending calls into those the next statement carries
// (at most finishBatch, of distinct keys, still wanted) and the rest. The
// caller holds f.mu.
func (f *finisher) take() (batch, rest []*finishCall) {
	seen := map[string]bool{}
	for _, c := range f.pending {
		switch {
		case c.state.Load() == callAbandoned:
		case len(batch) < finishBatch && !seen[c.key] && c.state.CompareAndSwap(callWaiting, callTaken):
			seen[c.key] = true
			batch = append(batch, c)
		default:
			rest = append(rest, c)
		}
	}
	return batch, rest
}

// send runs one FinishMany for batch and hands each caller its outcome.
func (f *finisher) send(batch []*finishCall) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	// The statement's context ends when every caller's has ended.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int64
	left.Store(int64(len(batch)))
	n := len(batch)
	keys, owners := make([]string, n), make([]string, n)
	tokens, nexts := make([]int64, n), make([]*time.Time, n)
	for i, c := range batch {
		stop := context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
		keys[i], owners[i], tokens[i], nexts[i] = c.key, c.owner, c.token, c.next
	}
	released, err := f.many(ctx, keys, owners, tokens, nexts)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// The database refused the statement (a key it cannot store,
		// say): send each call alone, for its own outcome.
		for _, c := range batch {
			c.released, c.err = f.one(c)
		}
		return
	}
	for _, c := range batch {
		c.released, c.err = released[c.key], err
	}
}

// many runs FinishMany and returns the keys whose lease it released.
func (f *finisher) many(ctx context.Context, keys, owners []string, tokens []int64, nexts []*time.Time) (map[string]bool, error) {
	rows, err := f.s.pool.Query(ctx, f.s.sql.finishMany, keys, owners, tokens, nexts, f.s.channel)
	if err != nil {
		return nil, err
	}
	released := map[string]bool{}
	var key, ignored string
	_, err = pgx.ForEachRow(rows, []any{&key, &ignored}, func() error {
		released[key] = true
		return nil
	})
	return released, err
}

// one runs the Finish of c alone, in the statement of a single Finish.
func (f *finisher) one(c *finishCall) (bool, error) {
	var ignored string
	err := f.s.pool.QueryRow(c.ctx, f.s.sql.finish, c.key, c.owner, c.token, c.next, f.s.channel, payload(c.key)).Scan(&ignored)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
