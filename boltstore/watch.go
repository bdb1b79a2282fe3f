package boltstore

import (
	"context"
	"strings"
	"sync"
)

// watchBacklog is how many distinct keys a watcher may fall behind by
// before its changes are dropped and it is called with "".
const watchBacklog = 4096

// watcher is one Watch: writers add keys to its backlog without waiting,
// and its goroutine hands them to fn.
type watcher struct {
	prefix string
	fn     func(key string)

	mu       sync.Mutex
	pending  []string
	seen     map[string]struct{}
	overflow bool

	wake     chan struct{} // capacity 1: something is pending
	quit     chan struct{} // closed by stop
	done     chan struct{} // closed when fn is no longer called
	stopOnce sync.Once
}

// add queues key for the watcher; it never blocks.
func (w *watcher) add(key string) {
	w.mu.Lock()
	switch {
	case w.overflow:
	case len(w.pending) >= watchBacklog:
		w.overflow, w.pending, w.seen = true, nil, nil
	default:
		if w.seen == nil {
			w.seen = map[string]struct{}{}
		}
		if _, dup := w.seen[key]; !dup {
			w.seen[key] = struct{}{}
			w.pending = append(w.pending, key)
		}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) run(ctx context.Context, s *Store) {
	defer close(w.done)
	defer s.unwatch(w)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.quit:
			return
		case <-w.wake:
		}
		w.mu.Lock()
		keys, overflow := w.pending, w.overflow
		w.pending, w.seen, w.overflow = nil, nil, false
		w.mu.Unlock()
		if overflow {
			keys = []string{""}
		}
		for _, k := range keys {
			select {
			case <-ctx.Done():
				return
			case <-w.quit:
				return
			default:
			}
			w.fn(k)
		}
	}
}

func (w *watcher) stop() {
	w.stopOnce.Do(func() { close(w.quit) })
	<-w.done
}

func (s *Store) unwatch(w *watcher) {
	s.watchMu.Lock()
	delete(s.watchers, w)
	s.watchMu.Unlock()
}

// notify tells the watchers of key's prefixes that key changed.
func (s *Store) notify(key string) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for w := range s.watchers {
		if strings.HasPrefix(key, w.prefix) {
			w.add(key)
		}
	}
}

// Watch implements converge.Queue, for this process only: a store file
// belongs to one process, so every change to it is made through this
// Store, and Watch sees them all (Put, Delete, Schedule, Finish, Release).
// Writers never wait for fn: a watcher more than 4096 keys behind gets
// fn("") instead of the keys it missed. stop must not be called from fn.
// Close ends every watch.
func (s *Store) Watch(ctx context.Context, prefix string, fn func(key string)) (stop func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &watcher{prefix: prefix, fn: fn, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	s.watchMu.Lock()
	if s.closed {
		s.watchMu.Unlock()
		return nil, ErrClosed
	}
	if s.watchers == nil {
		s.watchers = map[*watcher]struct{}{}
	}
	s.watchers[w] = struct{}{}
	s.watchMu.Unlock()
	go w.run(ctx, s)
	return w.stop, nil
}
