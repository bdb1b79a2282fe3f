package converge

import (
	"context"
	"slices"
)

// Linker is a Queue whose records can watch other records: a write that
// records a transition of a watched record makes its watchers due at
// once, in the same atomic write as the transition, so that every process
// sharing the store finds them due (and Queue.Watch announces them),
// whichever wrote the transition. It is how a controller's object follows
// objects of other kinds (a machine its rack): controller.SetWatches.
//
// A transition is a history entry whose To differs from its From, as Put,
// Delete and Creator.CreateMany append them: a state change, a creation
// or a deletion. A write without one (a new value, a wait recorded with
// the same state) wakes nobody. MemStore and pgstore implement it.
type Linker interface {
	Queue
	// PutWatching writes rec as Put does (versions, fencing token and
	// history alike) and, in the same atomic write, makes rec.Key watch
	// the records under the keys of watched, replacing what it watched
	// before (none: it stops watching). A watched key need not be stored
	// (yet). A watched key that is empty or is rec.Key fails with a
	// *StoreRequestError (field "watched") and writes nothing. Delete of
	// rec.Key drops what it watches.
	PutWatching(ctx context.Context, rec StoreRecord, watched []string, history ...HistoryEntry) (uint64, error)
	// Watching returns the keys that key watches, sorted (empty, not an
	// error, when it watches none or is not stored).
	Watching(ctx context.Context, key string) ([]string, error)
}

// CheckWatched returns the keys of watched sorted and without repeats,
// or a *StoreRequestError naming key when one of them is empty or is key
// itself. Linkers call it before they write.
func CheckWatched(key string, watched []string) ([]string, error) {
	out := slices.Clone(watched)
	slices.Sort(out)
	out = slices.Compact(out)
	for _, w := range out {
		switch w {
		case "":
			return nil, &StoreRequestError{Key: key, Field: "watched", Reason: "holds an empty key"}
		case key:
			return nil, &StoreRequestError{Key: key, Field: "watched", Reason: "a record cannot watch itself"}
		}
	}
	return out, nil
}

// isTransition reports whether entries record a transition (see Linker).
func isTransition(entries []HistoryEntry) bool {
	return slices.ContainsFunc(entries, func(e HistoryEntry) bool { return e.From != e.To })
}

var _ Linker = (*MemStore)(nil)

// PutWatching implements Linker.
func (s *MemStore) PutWatching(ctx context.Context, rec StoreRecord, watched []string, history ...HistoryEntry) (uint64, error) {
	w, err := CheckWatched(rec.Key, watched)
	if err != nil {
		return 0, err
	}
	if w == nil {
		w = []string{}
	}
	return s.write(ctx, rec, -1, w, history)
}

// Watching implements Linker.
func (s *MemStore) Watching(ctx context.Context, key string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]string{}, s.watching[key]...), nil
}

// setWatching makes key watch the keys of watched (sorted, distinct).
// The caller holds s.mu.
func (s *MemStore) setWatching(key string, watched []string) {
	for _, old := range s.watching[key] {
		delete(s.watchers[old], key)
		if len(s.watchers[old]) == 0 {
			delete(s.watchers, old)
		}
	}
	delete(s.watching, key)
	if len(watched) == 0 {
		return
	}
	if s.watching == nil {
		s.watching, s.watchers = map[string][]string{}, map[string]map[string]struct{}{}
	}
	s.watching[key] = watched
	for _, w := range watched {
		if s.watchers[w] == nil {
			s.watchers[w] = map[string]struct{}{}
		}
		s.watchers[w][key] = struct{}{}
	}
}

// wakeWatchers makes the watchers of key due at once when entries record
// a transition. The caller holds s.mu.
func (s *MemStore) wakeWatchers(key string, entries []HistoryEntry) {
	if len(s.watchers[key]) == 0 || !isTransition(entries) {
		return
	}
	now := unixNanos(s.now())
	for w := range s.watchers[key] {
		if r, ok := s.records[w]; ok {
			s.scheduleLocked(w, r.q, now)
		}
	}
}
