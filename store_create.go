package converge

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// NewRecord is one record for Creator.CreateMany to create: its key, its
// JSON value and the first entries of its history.
type NewRecord struct {
	Key     string
	Value   json.RawMessage
	History []HistoryEntry
	// Priority is the record's priority in a Prioritizer (0 to
	// MaxPriority; see PriorityStep). A Creator that is not a Prioritizer
	// refuses a priority other than 0.
	Priority int
}

// Creator is a Store that creates many records in one atomic write: all of
// them, or none. MemStore, boltstore (one transaction) and pgstore (one
// statement over arrays) implement it; controller.AddObjects needs it.
type Creator interface {
	Store
	// CreateMany stores every record of recs, none of which may be
	// stored yet, with its history entries, and returns their versions
	// in the order of recs. Each new record is due at once, as a record
	// Put creates. When some keys are stored already it fails with a
	// *StoreExistsError naming them all and writes nothing; a record
	// that is invalid (an empty key, a key given twice, a value that is
	// not JSON) fails with a *StoreRequestError naming it, writing
	// nothing. No records is not an error.
	CreateMany(ctx context.Context, recs []NewRecord) ([]uint64, error)
}

// StoreExistsError is the error of Creator.CreateMany when records to
// create are stored already. It matches ErrStoreExists, and ErrStoreStale
// as a Put that creates a stored key does.
type StoreExistsError struct {
	// Keys are the keys stored already, sorted.
	Keys []string
}

// maxKeysNamed is how many keys a StoreExistsError names in its message;
// Keys holds them all.
const maxKeysNamed = 5

// Error names the keys (the first few of them, and how many more).
func (e *StoreExistsError) Error() string {
	var b strings.Builder
	b.WriteString("converge: store keys already stored:")
	for i, k := range e.Keys[:min(len(e.Keys), maxKeysNamed)] {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %q", k)
	}
	if n := len(e.Keys) - maxKeysNamed; n > 0 {
		fmt.Fprintf(&b, " and %d more", n)
	}
	return b.String()
}

// Is makes StoreExistsError match ErrStoreExists and ErrStoreStale.
func (e *StoreExistsError) Is(target error) bool {
	return target == ErrStoreExists || target == ErrStoreStale
}

// CheckNewRecords returns a *StoreRequestError naming the first record of
// recs that no store may create: an empty key, a key given twice, a
// value that is not valid JSON, or a priority outside 0..MaxPriority.
// Stores implementing Creator call it before they write.
func CheckNewRecords(recs []NewRecord) error {
	seen := make(map[string]struct{}, len(recs))
	for i, r := range recs {
		field := fmt.Sprintf("recs[%d]", i)
		switch _, dup := seen[r.Key]; {
		case r.Key == "":
			return &StoreRequestError{Key: r.Key, Field: field + ".Key", Reason: "must not be empty"}
		case dup:
			return &StoreRequestError{Key: r.Key, Field: field + ".Key", Reason: "given twice"}
		case !json.Valid(r.Value):
			return &StoreRequestError{Key: r.Key, Field: field + ".Value", Reason: "not valid JSON"}
		case r.Priority < 0 || r.Priority > MaxPriority:
			return &StoreRequestError{Key: r.Key, Field: field + ".Priority", Reason: fmt.Sprintf("must be between 0 and %d, got %d", MaxPriority, r.Priority)}
		}
		seen[r.Key] = struct{}{}
	}
	return nil
}

var _ Creator = (*MemStore)(nil)

// CreateMany implements Creator, under one lock: every record or none.
func (s *MemStore) CreateMany(ctx context.Context, recs []NewRecord) ([]uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckNewRecords(recs); err != nil {
		return nil, err
	}
	values := make([]json.RawMessage, len(recs))
	for i, r := range recs {
		v, err := s.seal(memSealRecord, r.Key, r.Value)
		if err != nil {
			return nil, err
		}
		values[i] = v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var exist []string
	for _, r := range recs {
		if _, ok := s.records[r.Key]; ok {
			exist = append(exist, r.Key)
		}
	}
	if len(exist) > 0 {
		slices.Sort(exist)
		return nil, &StoreExistsError{Keys: exist}
	}
	if s.records == nil {
		s.records = make(map[string]memRecord, len(recs))
	}
	now := unixNanos(s.now())
	versions := make([]uint64, len(recs))
	for i, r := range recs {
		q := &memDue{key: r.Key, idx: -1, prio: r.Priority}
		s.due.set(q, now)
		s.records[r.Key] = memRecord{version: 1, value: values[i], q: q}
		s.appendHistory(r.Key, r.History)
		s.wakeWatchers(r.Key, r.History)
		s.notify(r.Key)
		versions[i] = 1
	}
	return versions, nil
}
