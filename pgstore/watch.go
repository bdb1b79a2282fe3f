package pgstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergekit/converge"
)

// maxPending is how many distinct keys a watcher holds for a slow fn
// before it drops them and calls fn("") instead.
const maxPending = 10000

// Watch implements converge.Queue with LISTEN/NOTIFY. The watch holds a
// connection of its own (outside the pool) in LISTEN on the store's
// channel, and returns once the LISTEN is in place. The writes of every
// process sharing the schema that may make a record due (a Put that
// creates it, Schedule, a Finish due at once) and Delete notify with their
// key in the same transaction, so a watcher hears of them once they
// commit; updates of a record's value are not announced. Keys under prefix are passed to fn one at a time, in order,
// coalesced while fn runs. fn("") means look at everything: after the
// connection was lost and made again (notifications sent meanwhile are
// lost), after more than 10000 keys piled up, and for keys too long for
// a notification (8000 bytes or more).
func (s *Store) Watch(ctx context.Context, prefix string, fn func(key string)) (stop func(), err error) {
	if fn == nil {
		return nil, &converge.StoreRequestError{Key: prefix, Field: "fn", Reason: "must not be nil"}
	}
	if err := checkText(prefix, "prefix", prefix); err != nil {
		return nil, err
	}
	conn, err := s.listen(ctx)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &watcher{s: s, prefix: prefix, fn: fn, cancel: cancel, wake: make(chan struct{}, 1), pending: map[string]struct{}{}}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		closeConn(conn)
		return nil, ErrClosed
	}
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
	w.wg.Add(2)
	go w.receive(wctx, conn)
	go w.deliver(wctx)
	return w.stop, nil
}

// listen opens a connection of its own and LISTENs on the channel.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("pgstore: watch: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("pgstore: watch: listen on channel %q: %w", s.channel, err)
	}
	return conn, nil
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

type watcher struct {
	s      *Store
	prefix string
	fn     func(string)
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	wake   chan struct{}

	mu      sync.Mutex
	pending map[string]struct{}
	order   []string
	reset   bool
}

func (w *watcher) stop() {
	w.once.Do(func() {
		w.cancel()
		w.wg.Wait()
		w.s.mu.Lock()
		delete(w.s.watchers, w)
		w.s.mu.Unlock()
	})
}

// push queues key for fn; "" asks fn to look at everything.
func (w *watcher) push(key string) {
	w.mu.Lock()
	switch {
	case w.reset:
	case key == "" || len(w.pending) >= maxPending:
		w.reset = true
		clear(w.pending)
		w.order = w.order[:0]
	default:
		if _, ok := w.pending[key]; !ok {
			w.pending[key] = struct{}{}
			w.order = append(w.order, key)
		}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued and empties the queue.
func (w *watcher) take() (keys []string, reset bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys, reset = w.order, w.reset
	w.order, w.reset = nil, false
	clear(w.pending)
	return keys, reset
}

func (w *watcher) deliver(ctx context.Context) {
	defer w.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		keys, reset := w.take()
		if reset {
			keys = []string{""}
		}
		for _, k := range keys {
			if ctx.Err() != nil {
				return
			}
			w.fn(k)
		}
	}
}

func (w *watcher) receive(ctx context.Context, conn *pgx.Conn) {
	defer w.wg.Done()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err == nil {
			if n.Payload == "" || strings.HasPrefix(n.Payload, w.prefix) {
				w.push(n.Payload)
			}
			continue
		}
		closeConn(conn)
		if conn = w.reconnect(ctx); conn == nil {
			return
		}
		// Notifications sent while the connection was down are lost.
		w.push("")
	}
}

// reconnect makes the LISTEN connection again, waiting longer between
// tries up to 2s, until it succeeds (returning the connection) or ctx
// ends (returning nil).
func (w *watcher) reconnect(ctx context.Context) *pgx.Conn {
	wait := 50 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := w.s.listen(ctx)
		if err == nil {
			return conn
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
	return nil
}
