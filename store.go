package converge

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// StoreVersionError is the error of a write whose expected version does not
// match the stored one. It matches ErrStoreStale.
type StoreVersionError struct {
	Key string
	// Want is the version the writer expected (0: the key must not exist).
	Want uint64
	// Have is the stored version (0: the key does not exist).
	Have uint64
}

// Error describes the problem, naming its culprit.
func (e *StoreVersionError) Error() string {
	return fmt.Sprintf("converge: store key %q: stale version %d, stored version is %d", e.Key, e.Want, e.Have)
}

// Is makes StoreVersionError match ErrStoreStale.
func (e *StoreVersionError) Is(target error) bool { return target == ErrStoreStale }

// ClaimError is the error of a claim on a key that another owner holds. It
// matches ErrClaimHeld.
type ClaimError struct {
	Key     string
	Owner   string // who asked
	Holder  string // who holds it
	Expires time.Time
}

// Error describes the problem, naming its culprit.
func (e *ClaimError) Error() string {
	return fmt.Sprintf("converge: claim on %q by %q: held by %q until %s", e.Key, e.Owner, e.Holder, e.Expires.Format(time.RFC3339Nano))
}

// Is makes ClaimError match ErrClaimHeld.
func (e *ClaimError) Is(target error) bool { return target == ErrClaimHeld }

// StoreRequestError names the argument of a store call that is invalid. It
// matches ErrStoreInvalid.
type StoreRequestError struct {
	Key    string
	Field  string
	Reason string
}

// Error describes the problem, naming its culprit.
func (e *StoreRequestError) Error() string {
	return fmt.Sprintf("converge: store key %q: %s: %s", e.Key, e.Field, e.Reason)
}

// Is makes StoreRequestError match ErrStoreInvalid.
func (e *StoreRequestError) Is(target error) bool { return target == ErrStoreInvalid }

// StoreRecord is one versioned value in a Store. The zero value is a record
// with no key, which stores reject.
type StoreRecord struct {
	// Key identifies the record. Controllers use "kind/name"; plans use
	// their own prefix.
	Key string
	// Version is the version of the stored value. When writing, it is the
	// version the writer read (0 to create a record that must not exist);
	// the store assigns the next one.
	Version uint64
	// Value is the record's JSON document. Callers must not modify a Value
	// they got from a store.
	Value json.RawMessage
	// Token, when not zero on a write, fences it: Put succeeds only while
	// the lease with this token (Lease.Token) is the current, unexpired
	// lease on Key, and fails with ErrLeaseLost otherwise, writing
	// nothing. A writer that lost its lease (it paused longer than the
	// lease, and another owner took the key) can thus not overwrite the
	// new owner's work. Stores return records with Token zero.
	Token uint64
}

// HistoryEntry is one stored transition of a record's state. From is empty
// for the first entry of a record; To is empty for the entry that records
// its deletion.
type HistoryEntry struct {
	At     time.Time `json:"at"`
	From   string    `json:"from,omitempty"`
	To     string    `json:"to,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

// Lease is a claim on a key by one owner until Expires. Token increases
// every time the key changes owner, so an owner can tell a lease it holds
// from a newer one.
type Lease struct {
	Key     string    `json:"key"`
	Owner   string    `json:"owner"`
	Expires time.Time `json:"expires"`
	Token   uint64    `json:"token"`
}

// Retention bounds the history a Store keeps per key. Stores apply it
// when they append to a key's history; History returns what is kept,
// oldest first, so the newest entries are always there.
type Retention struct {
	// Entries is the most entries kept per key (the newest ones); 0 means
	// DefaultHistoryEntries and a negative value keeps every entry.
	Entries int
	// Age, when positive, also drops the entries older than Age (by
	// HistoryEntry.At, against the store's clock), but never the newest
	// entry of a key. 0 keeps entries whatever their age.
	Age time.Duration
}

// Sealer encrypts stored values at rest. A Store given a Sealer seals
// every record value and every target before it writes them, and opens
// them when it reads them; keys, versions, history entries, leases and
// due times stay in clear, so they must never carry a secret.
//
// Seal must bind the sealed value to key (as associated data), so that a
// value moved to another key fails to open. A sealed value must start with
// a zero byte, which no JSON document does: a store without a Sealer (or
// with a Sealer, reading a value written before sealing was turned on)
// tells a sealed value from a clear one by that byte. A store without a
// Sealer refuses a sealed value with an error matching ErrSealed. Open
// fails with an error matching ErrSealed when the value was sealed with
// another key or was altered.
//
// NewAESGCMSealer returns the Sealer on AES-GCM from the standard library.
type Sealer interface {
	Seal(key string, plain []byte) ([]byte, error)
	Open(key string, sealed []byte) ([]byte, error)
}

// Store is where reconcile loops and plans keep what must survive a restart:
// versioned records with a history of their transitions, the last target of
// a target reconciler, and claims that hand a key to one owner at a time.
//
// Current state of the real system is never kept here: only what the
// system cannot tell (lifecycle states, plan status, the target itself).
//
// Implementations must be safe for concurrent use. MemStore is the
// in-memory implementation; durable ones live in adapter packages, and
// convergetest has a fake with injectable failures.
type Store interface {
	// Get returns the record stored under key, or an error matching
	// ErrStoreNotFound.
	Get(ctx context.Context, key string) (StoreRecord, error)
	// Put writes rec.Value under rec.Key if rec.Version is the stored
	// version (0: the key must not exist) and returns the new version. A
	// stale version fails with a *StoreVersionError and writes nothing.
	// The history entries are appended in the same atomic write.
	Put(ctx context.Context, rec StoreRecord, history ...HistoryEntry) (uint64, error)
	// Delete removes key if version is the stored version, appending the
	// history entries in the same atomic write; the history itself is
	// kept. A stale version fails with a *StoreVersionError; a missing key
	// fails with ErrStoreNotFound.
	Delete(ctx context.Context, key string, version uint64, history ...HistoryEntry) error
	// List returns the records whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]StoreRecord, error)
	// History returns the stored transitions of key, oldest first (empty,
	// not an error, when there are none).
	History(ctx context.Context, key string) ([]HistoryEntry, error)
	// PutTarget stores the last target of the reconciler called name.
	PutTarget(ctx context.Context, name string, target json.RawMessage) error
	// Target returns the last target stored for name, or an error matching
	// ErrStoreNotFound.
	Target(ctx context.Context, name string) (json.RawMessage, error)
	// Claim gives key to owner for ttl: it succeeds when the key is free,
	// its lease expired, or owner already holds it (which renews it). When
	// another owner holds an unexpired lease it fails with a *ClaimError.
	Claim(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error)
	// Release gives the key of lease back. It fails with ErrLeaseLost when
	// the lease is no longer the current one for its key.
	Release(ctx context.Context, lease Lease) error
}

// Queue is a Store that is also a durable work queue over its records,
// for several processes sharing one store (controller replicas): every
// record has a due time, and ClaimDue hands the due records to one owner
// at a time, in batches, with a lease each. The controller uses it when
// its Config.Owner is set; MemStore and the durable stores implement it.
//
// A record is due at once when it is created, and again when Schedule or
// Finish says so. A claimed record is not due (and not claimable) until
// its lease is finished with Finish, or expires: the records of an owner
// that died are taken over once their leases run out.
type Queue interface {
	Store
	// Schedule makes key due at at, or keeps it due earlier if it already
	// is (a time in the past means at once). It works while the key is
	// claimed: Finish then keeps the earlier time. A key that is not
	// stored fails with ErrStoreNotFound.
	Schedule(ctx context.Context, key string, at time.Time) error
	// ClaimDue leases to owner, for ttl, at most limit records under
	// prefix that are due and not leased by anyone (or whose lease
	// expired), the earliest due first, and returns them with their
	// leases. Records that a concurrent ClaimDue is taking are skipped,
	// never waited for. It returns an empty slice when nothing is due.
	ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]Claimed, error)
	// Finish ends a lease taken by ClaimDue (or Claim): it makes the key
	// due at next (the zero time: not due until scheduled), unless
	// Schedule made it due earlier meanwhile, and releases the lease, in
	// one atomic write. It fails with ErrLeaseLost, changing nothing, when
	// the lease is no longer the current one.
	Finish(ctx context.Context, lease Lease, next time.Time) error
	// Watch calls fn with the key of every record under prefix that is
	// created, written, deleted or scheduled, by this process or another
	// one sharing the store, until ctx ends or stop is called. It returns
	// once the watch is in place, so no change after it returns is missed.
	// Calls are serial and may be coalesced; fn("") means changes were
	// dropped (the watcher fell behind): look at everything again. fn must
	// not block for long. stop ends the watch and returns once fn is no
	// longer called.
	Watch(ctx context.Context, prefix string, fn func(key string)) (stop func(), err error)
}

// Claimed is one record taken by Queue.ClaimDue, with its lease.
type Claimed struct {
	Record StoreRecord
	Lease  Lease
}

// MemStore is the in-memory Store: fast, safe for concurrent use, and lost
// when the process ends. The zero value is an empty store that uses
// time.Now for leases.
type MemStore struct {
	// Now returns the current time for leases; nil means time.Now. Set it
	// before first use.
	Now func() time.Time

	mu      sync.RWMutex
	records map[string]memRecord
	history map[string][]HistoryEntry
	targets map[string]json.RawMessage
	leases  map[string]Lease
	tokens  uint64
}

type memRecord struct {
	version uint64
	value   json.RawMessage
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{} }

func (s *MemStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Get implements Store.
func (s *MemStore) Get(ctx context.Context, key string) (StoreRecord, error) {
	if err := ctx.Err(); err != nil {
		return StoreRecord{}, err
	}
	s.mu.RLock()
	r, ok := s.records[key]
	s.mu.RUnlock()
	if !ok {
		return StoreRecord{}, fmt.Errorf("converge: store key %q: %w", key, ErrStoreNotFound)
	}
	return StoreRecord{Key: key, Version: r.version, Value: r.value}, nil
}

// Put implements Store. It keeps a copy of rec.Value.
func (s *MemStore) Put(ctx context.Context, rec StoreRecord, history ...HistoryEntry) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if rec.Key == "" {
		return 0, &StoreRequestError{Key: rec.Key, Field: "Key", Reason: "must not be empty"}
	}
	if !json.Valid(rec.Value) {
		return 0, &StoreRequestError{Key: rec.Key, Field: "Value", Reason: "not valid JSON"}
	}
	value := slices.Clone(rec.Value)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.records[rec.Key]
	if cur.version != rec.Version || (!ok && rec.Version != 0) {
		return 0, &StoreVersionError{Key: rec.Key, Want: rec.Version, Have: cur.version}
	}
	if s.records == nil {
		s.records = map[string]memRecord{}
	}
	next := cur.version + 1
	s.records[rec.Key] = memRecord{version: next, value: value}
	s.appendHistory(rec.Key, history)
	return next, nil
}

func (s *MemStore) appendHistory(key string, entries []HistoryEntry) {
	if len(entries) == 0 {
		return
	}
	if s.history == nil {
		s.history = map[string][]HistoryEntry{}
	}
	h := s.history[key]
	if h == nil {
		// Most records see few transitions: size the first slice exactly.
		h = make([]HistoryEntry, 0, len(entries))
	}
	s.history[key] = append(h, entries...)
}

// Delete implements Store.
func (s *MemStore) Delete(ctx context.Context, key string, version uint64, history ...HistoryEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.records[key]
	if !ok {
		return fmt.Errorf("converge: store key %q: %w", key, ErrStoreNotFound)
	}
	if cur.version != version {
		return &StoreVersionError{Key: key, Want: version, Have: cur.version}
	}
	delete(s.records, key)
	s.appendHistory(key, history)
	return nil
}

// List implements Store.
func (s *MemStore) List(ctx context.Context, prefix string) ([]StoreRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	out := make([]StoreRecord, 0, len(s.records))
	for k, r := range s.records {
		if strings.HasPrefix(k, prefix) {
			out = append(out, StoreRecord{Key: k, Version: r.version, Value: r.value})
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b StoreRecord) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// History implements Store. The returned slice is a copy.
func (s *MemStore) History(ctx context.Context, key string) ([]HistoryEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.history[key]), nil
}

// PutTarget implements Store. It keeps a copy of target.
func (s *MemStore) PutTarget(ctx context.Context, name string, target json.RawMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !json.Valid(target) {
		return &StoreRequestError{Key: name, Field: "target", Reason: "not valid JSON"}
	}
	t := slices.Clone(target)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.targets == nil {
		s.targets = map[string]json.RawMessage{}
	}
	s.targets[name] = t
	return nil
}

// Target implements Store.
func (s *MemStore) Target(ctx context.Context, name string) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.targets[name]
	if !ok {
		return nil, fmt.Errorf("converge: target %q: %w", name, ErrStoreNotFound)
	}
	return t, nil
}

// Claim implements Store.
func (s *MemStore) Claim(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	switch {
	case key == "":
		return Lease{}, &StoreRequestError{Key: key, Field: "key", Reason: "must not be empty"}
	case owner == "":
		return Lease{}, &StoreRequestError{Key: key, Field: "owner", Reason: "must not be empty"}
	case ttl <= 0:
		return Lease{}, &StoreRequestError{Key: key, Field: "ttl", Reason: fmt.Sprintf("must be positive, got %s", ttl)}
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, held := s.leases[key]
	if held && cur.Owner != owner && now.Before(cur.Expires) {
		return Lease{}, &ClaimError{Key: key, Owner: owner, Holder: cur.Owner, Expires: cur.Expires}
	}
	l := Lease{Key: key, Owner: owner, Expires: now.Add(ttl), Token: cur.Token}
	if !held || cur.Owner != owner || !now.Before(cur.Expires) {
		s.tokens++
		l.Token = s.tokens
	}
	if s.leases == nil {
		s.leases = map[string]Lease{}
	}
	s.leases[key] = l
	return l, nil
}

// Release implements Store.
func (s *MemStore) Release(ctx context.Context, lease Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.leases[lease.Key]
	if !ok || cur.Token != lease.Token || cur.Owner != lease.Owner {
		return fmt.Errorf("converge: lease on %q by %q: %w", lease.Key, lease.Owner, ErrLeaseLost)
	}
	delete(s.leases, lease.Key)
	return nil
}
