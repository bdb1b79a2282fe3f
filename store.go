package converge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
	// Subject says which part of the record moved, for records made of
	// parts (a plan's commands and their hosts); nil means the record
	// itself (a controller object, a plan).
	Subject *HistorySubject `json:"subject,omitempty"`
	// By names who made the transition happen when it was a person or
	// another program acting on the record (an operator's release from a
	// status page or a command line, an abort of a plan): the identity
	// its caller gave. Empty means the program that owns the record made
	// it on its own (a handler's transition, a quarantine, a breach).
	By string `json:"by,omitempty"`
}

// HistorySubject names the part of a plan a history entry is about: the
// command at index Command of spec.commands, or, when Host is not empty,
// the host Host of that command's group Group.
type HistorySubject struct {
	Command int    `json:"command"`
	Group   string `json:"group,omitempty"`
	Host    string `json:"host,omitempty"`
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
// value moved to another key fails to open; stores pass keys that tell a
// record from a target of the same name. A sealed value must start with a
// zero byte, which no JSON document does: that is how a store tells a
// sealed value from a clear one. A store with a Sealer fails closed: it
// refuses a clear value where a sealed one belongs with an error matching
// ErrNotSealed (unless its migration option, MemStore.AllowClear and the
// like, accepts clear values while sealing is turned on), and passes only
// sealed values to Open. A store without a Sealer refuses a sealed value
// with an error matching ErrSealed. Open fails with an error matching
// ErrSealed when the value was sealed with a key it does not hold or was
// altered; a Sealer that names keys in its values (NewAESGCMKeyring) seals
// with its newest key and opens with any, and Reseal seals every record
// again with the newest.
//
// NewAESGCMSealer and NewAESGCMKeyring return the Sealer on AES-GCM from
// the standard library.
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
	// kept. It is guarded by the version only, not by a lease's token. A stale version fails with a *StoreVersionError; a missing key
	// fails with ErrStoreNotFound.
	Delete(ctx context.Context, key string, version uint64, history ...HistoryEntry) error
	// List returns the records whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]StoreRecord, error)
	// History returns the stored transitions of key, oldest first (empty,
	// not an error, when there are none).
	History(ctx context.Context, key string) ([]HistoryEntry, error)
	// PutTarget stores target as the last target of the reconciler called
	// name and returns its revision: one more than the last revision
	// taken for name (1 for the first), assigned in the same atomic write
	// as the target, so that the revisions of a name only ever grow,
	// across restarts and across processes sharing the store, and no two
	// targets get the same one. A target of length 0 (nil) takes the next
	// revision without replacing the stored target: a target that is not
	// kept (TargetReconciler.ApplyIntermediate's) is numbered so.
	PutTarget(ctx context.Context, name string, target json.RawMessage) (revision uint64, err error)
	// Target returns the last target stored for name and the revision
	// PutTarget gave it, or an error matching ErrStoreNotFound when no
	// target is stored (even if revisions were taken for name).
	Target(ctx context.Context, name string) (target json.RawMessage, revision uint64, err error)
	// Claim gives key to owner for ttl: it succeeds when the key is free,
	// its lease expired, or owner already holds it (which renews it). When
	// another owner holds an unexpired lease it fails with a *ClaimError.
	Claim(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error)
	// Release gives the key of lease back. It fails with ErrLeaseLost when
	// the lease is no longer the current one for its key. Released after
	// Queue.ClaimDue (rather than finished with Queue.Finish), a record is
	// due again at the latest when the lease would have expired.
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
	// leases. A store shared by processes (pgstore) puts the records
	// whose lease expired without Finish first, so that a dead owner's
	// records are taken over within a lease's time, not after a backlog. Records that a concurrent ClaimDue is taking are skipped,
	// never waited for. It returns an empty slice when nothing is due.
	ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]Claimed, error)
	// Finish ends a lease taken by ClaimDue (or Claim): it makes the key
	// due at next (the zero time: not due until scheduled), unless
	// Schedule made it due earlier meanwhile, and releases the lease, in
	// one atomic write. It fails with ErrLeaseLost, changing nothing, when
	// the lease is no longer the current one or has expired (the record is
	// then due already, for whoever claims it next).
	Finish(ctx context.Context, lease Lease, next time.Time) error
	// Watch calls fn with the key of every record under prefix that may
	// have become due (created, scheduled, or finished with a due time not
	// in the future) or was deleted, by this process or another one
	// sharing the store, until ctx ends or stop is called. Other writes
	// (a new value for a record, a Finish with a later due time) may be
	// reported too, but need not be: a durable store announces only what
	// a waiting replica must know. It returns
	// once the watch is in place, so no change after it returns is missed.
	// Calls are serial and may be coalesced; fn("") means changes were
	// dropped (the watcher fell behind): look at everything again. fn must
	// not block for long, and must not call stop (which waits for fn to
	// return). stop ends the watch and returns once fn is no longer
	// called.
	Watch(ctx context.Context, prefix string, fn func(key string)) (stop func(), err error)
}

// ClaimHistoryEntries is the most history entries of a record that
// Queue.ClaimDue returns with it (Claimed.History).
const ClaimHistoryEntries = 16

// Claimed is one record taken by Queue.ClaimDue, with its lease.
type Claimed struct {
	Record StoreRecord
	Lease  Lease
	// History holds the newest entries of the record's history, oldest
	// first, at most ClaimHistoryEntries of them: the tail of what
	// Store.History returns, read in the same atomic step as the claim,
	// so that a controller needs no other call to show a handler the
	// object's recent transitions. Fewer than ClaimHistoryEntries entries
	// are the whole history. It is meaningful only when HasHistory is
	// set.
	History []HistoryEntry
	// HasHistory says the Queue filled History. The Queues of this module
	// (MemStore, pgstore, boltstore) always do; a Queue that leaves it
	// false makes the controller read the history with Store.History.
	HasHistory bool
	// Due is when the record became due, by the store's clock: its due
	// time, or the expiry of the lease it was taken over from. The zero
	// time means the store does not say (a record due since "at once",
	// the zero time, or a Queue that does not fill it). The controller
	// measures its queue duration from it (controller.MetricQueueDuration).
	Due time.Time
}

// historyTail returns a copy of the newest ClaimHistoryEntries entries of
// h, never nil.
func historyTail(h []HistoryEntry) []HistoryEntry {
	return append([]HistoryEntry{}, h[max(len(h)-ClaimHistoryEntries, 0):]...)
}

// MemStore is the in-memory Store and Queue: fast, safe for concurrent use,
// and lost when the process ends. The zero value is an empty store that
// uses time.Now, keeps the newest DefaultHistoryEntries history entries
// per key and seals nothing.
//
// Watch is in-process only: a MemStore is not shared with other processes.
type MemStore struct {
	// Now returns the current time for leases, due times and history
	// retention by age; nil means time.Now. Set it before first use.
	Now func() time.Time
	// Retention bounds the history kept per key, applied on every append;
	// the zero value keeps the newest DefaultHistoryEntries entries. Set it
	// before first use.
	Retention Retention
	// Sealer, when set, seals every record value and target the store
	// keeps and opens them on every read (see Sealer for what that
	// covers); a clear value then fails to read with an error matching
	// ErrNotSealed. Set it before first use: without it, a sealed value
	// fails to read with an error matching ErrSealed.
	Sealer Sealer
	// AllowClear, with a Sealer, reads a value that is not sealed as the
	// clear JSON it is, instead of failing with ErrNotSealed. It is the
	// migration path for a store that held values before sealing was
	// turned on: set Sealer and AllowClear, run Reseal, then unset
	// AllowClear. It weakens what sealing promises (anyone who can write
	// the store can then plant a clear value), so leave it off otherwise.
	// Without a Sealer it changes nothing.
	AllowClear bool

	mu      sync.RWMutex
	records map[string]memRecord
	history map[string]memHistory
	targets map[string]memTarget
	leases  map[string]Lease
	tokens  uint64
	due     memDueHeap
	watches []*memWatch
	// watching holds the keys each record watches (Linker), watchers
	// the records that watch each key.
	watching map[string][]string
	watchers map[string]map[string]struct{}
}

// memTarget is the last target of a name, its revision, and the last
// revision taken for the name (by it or by a PutTarget without a target).
type memTarget struct {
	value json.RawMessage // nil: only revisions were taken
	rev   uint64          // of value
	last  uint64
}

type memRecord struct {
	version uint64
	value   json.RawMessage
	q       *memDue
}

// memDue is the queue state of one record.
type memDue struct {
	key string
	// at is when the record is due, in Unix nanoseconds, while idx >= 0.
	at int64
	// pending is the earliest time Schedule asked for while the record was
	// leased, when hasPending: Finish keeps it if it is earlier than next.
	pending    int64
	hasPending bool
	// prio is the record's priority, rank its place in the due order
	// (PriorityRank of at and prio).
	prio int
	rank int64
	// idx is the record's place in the due heap; -1: not due.
	idx int
}

var (
	_ Store       = (*MemStore)(nil)
	_ Queue       = (*MemStore)(nil)
	_ Prioritizer = (*MemStore)(nil)
)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{} }

func (s *MemStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// unixNanos maps t to Unix nanoseconds, clamping the times that int64
// cannot hold (the zero time among them: at once).
func unixNanos(t time.Time) int64 {
	const minSec, maxSec = math.MinInt64/int64(time.Second) + 1, math.MaxInt64/int64(time.Second) - 1
	switch sec := t.Unix(); {
	case sec <= minSec:
		return math.MinInt64
	case sec >= maxSec:
		return math.MaxInt64
	}
	return t.UnixNano()
}

// memSealPlace tells a record from a target: each is sealed under
// associated data of its own, so a value cannot move from one to the other.
type memSealPlace bool

const (
	memSealRecord memSealPlace = false
	memSealTarget memSealPlace = true
)

// ad returns the associated data of the value kept under key.
func (p memSealPlace) ad(key string) string {
	if p == memSealTarget {
		return "target\x00" + key
	}
	return "record\x00" + key
}

// name returns how errors name the value kept under key.
func (p memSealPlace) name(key string) string {
	if p == memSealTarget {
		return fmt.Sprintf("target %q", key)
	}
	return fmt.Sprintf("store key %q", key)
}

// open returns the clear value of the one stored under key in place p.
func (s *MemStore) open(p memSealPlace, key string, v json.RawMessage) (json.RawMessage, error) {
	sealed := len(v) > 0 && v[0] == 0
	switch {
	case s.Sealer == nil && sealed:
		return nil, fmt.Errorf("converge: %s: %w (the store has no Sealer)", p.name(key), bare(ErrSealed))
	case s.Sealer == nil:
		return v, nil
	case !sealed && s.AllowClear:
		return v, nil
	case !sealed:
		return nil, fmt.Errorf("converge: %s: %w (the store has a Sealer; AllowClear reads clear values while migrating)", p.name(key), bare(ErrNotSealed))
	}
	plain, err := s.Sealer.Open(p.ad(key), v)
	if err != nil {
		if !errors.Is(err, ErrSealed) {
			err = fmt.Errorf("%w: %w", ErrSealed, err)
		}
		return nil, fmt.Errorf("converge: %s: %w", p.name(key), bare(err))
	}
	return plain, nil
}

// seal returns the value to keep under key in place p for a clear one, a
// copy in any case.
func (s *MemStore) seal(p memSealPlace, key string, plain json.RawMessage) (json.RawMessage, error) {
	if s.Sealer == nil {
		return slices.Clone(plain), nil
	}
	v, err := s.Sealer.Seal(p.ad(key), plain)
	if err != nil {
		return nil, fmt.Errorf("converge: %s: seal: %w", p.name(key), bare(err))
	}
	if len(v) == 0 || v[0] != 0 {
		return nil, fmt.Errorf("converge: %s: seal: the Sealer returned a value that does not start with a zero byte", p.name(key))
	}
	return v, nil
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
		return StoreRecord{}, fmt.Errorf("converge: store key %q: %w", key, bare(ErrStoreNotFound))
	}
	v, err := s.open(memSealRecord, key, r.value)
	if err != nil {
		return StoreRecord{}, err
	}
	return StoreRecord{Key: key, Version: r.version, Value: v}, nil
}

// Put implements Store. It keeps a copy of rec.Value (sealed when the store
// has a Sealer). A new record is due at once, with priority 0; an update
// keeps the record's priority.
func (s *MemStore) Put(ctx context.Context, rec StoreRecord, history ...HistoryEntry) (uint64, error) {
	return s.write(ctx, rec, -1, nil, history)
}

// PutPriority implements Prioritizer.
func (s *MemStore) PutPriority(ctx context.Context, rec StoreRecord, priority int, history ...HistoryEntry) (uint64, error) {
	if err := CheckPriority(rec.Key, priority); err != nil {
		return 0, err
	}
	return s.write(ctx, rec, priority, nil, history)
}

// Priority implements Prioritizer.
func (s *MemStore) Priority(ctx context.Context, key string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.records[key]
	if !ok {
		return 0, fmt.Errorf("converge: store key %q: %w", key, bare(ErrStoreNotFound))
	}
	return r.q.prio, nil
}

// write writes rec, setting its priority unless priority is negative,
// and what it watches unless watched is nil.
func (s *MemStore) write(ctx context.Context, rec StoreRecord, priority int, watched []string, history []HistoryEntry) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if rec.Key == "" {
		return 0, &StoreRequestError{Key: rec.Key, Field: "Key", Reason: "must not be empty"}
	}
	if !json.Valid(rec.Value) {
		return 0, &StoreRequestError{Key: rec.Key, Field: "Value", Reason: "not valid JSON"}
	}
	value, err := s.seal(memSealRecord, rec.Key, rec.Value)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec.Token != 0 {
		l, held := s.leases[rec.Key]
		if !held || l.Token != rec.Token || !s.now().Before(l.Expires) {
			return 0, fmt.Errorf("converge: store key %q: fencing token %d is not the current lease: %w", rec.Key, rec.Token, bare(ErrLeaseLost))
		}
	}
	cur, ok := s.records[rec.Key]
	if cur.version != rec.Version || (!ok && rec.Version != 0) {
		return 0, &StoreVersionError{Key: rec.Key, Want: rec.Version, Have: cur.version}
	}
	if s.records == nil {
		s.records = map[string]memRecord{}
	}
	if !ok {
		cur.q = &memDue{key: rec.Key, idx: -1}
		cur.q.prio = max(priority, 0)
		s.due.set(cur.q, unixNanos(s.now()))
	} else if priority >= 0 && priority != cur.q.prio {
		cur.q.prio = priority
		if cur.q.idx >= 0 {
			s.due.set(cur.q, cur.q.at)
		}
	}
	next := cur.version + 1
	s.records[rec.Key] = memRecord{version: next, value: value, q: cur.q}
	if watched != nil {
		s.setWatching(rec.Key, watched)
	}
	s.appendHistory(rec.Key, history)
	s.wakeWatchers(rec.Key, history)
	s.notify(rec.Key)
	return next, nil
}

// memHistory is the kept history of one key. Below the retention's
// count it is a plain slice; at the count it is a ring whose oldest entry
// is at start, so that appending to a full history neither allocates nor
// copies.
type memHistory struct {
	buf   []HistoryEntry
	start int // oldest entry; not 0 only when the ring is full
}

// ordered returns a copy of h, oldest first.
func (h memHistory) ordered() []HistoryEntry {
	if len(h.buf) == 0 {
		return nil
	}
	out := make([]HistoryEntry, 0, len(h.buf))
	return append(append(out, h.buf[h.start:]...), h.buf[:h.start]...)
}

// appendHistory appends entries to the history of key and applies the
// retention. The caller holds s.mu.
func (s *MemStore) appendHistory(key string, entries []HistoryEntry) {
	if len(entries) == 0 {
		return
	}
	if s.history == nil {
		s.history = map[string]memHistory{}
	}
	keep := s.Retention.Entries
	if keep == 0 {
		keep = DefaultHistoryEntries
	}
	h := s.history[key]
	if h.buf == nil {
		// Most records see few transitions: size the first slice exactly.
		h.buf = make([]HistoryEntry, 0, min(len(entries), max(keep, 1)))
	}
	for _, e := range entries {
		if keep < 0 || len(h.buf) < keep {
			h.buf = append(h.buf, e)
			continue
		}
		h.buf[h.start] = e
		h.start = (h.start + 1) % keep
	}
	if s.Retention.Age > 0 {
		h = h.dropOlder(s.now().Add(-s.Retention.Age))
	}
	s.history[key] = h
}

// dropOlder removes the entries older than cutoff, but never the newest
// one.
func (h memHistory) dropOlder(cutoff time.Time) memHistory {
	newest := (h.start + len(h.buf) - 1) % len(h.buf)
	old := 0
	for i := range h.buf {
		if i != newest && h.buf[i].At.Before(cutoff) {
			old++
		}
	}
	if old == 0 {
		return h
	}
	all := h.ordered()
	kept := make([]HistoryEntry, 0, len(all)-old)
	for _, e := range all[:len(all)-1] {
		if !e.At.Before(cutoff) {
			kept = append(kept, e)
		}
	}
	return memHistory{buf: append(kept, all[len(all)-1])}
}

// Delete implements Store. The record's due time goes with it.
func (s *MemStore) Delete(ctx context.Context, key string, version uint64, history ...HistoryEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.records[key]
	if !ok {
		return fmt.Errorf("converge: store key %q: %w", key, bare(ErrStoreNotFound))
	}
	if cur.version != version {
		return &StoreVersionError{Key: key, Want: version, Have: cur.version}
	}
	delete(s.records, key)
	s.due.remove(cur.q)
	s.setWatching(key, nil)
	s.appendHistory(key, history)
	s.wakeWatchers(key, history)
	s.notify(key)
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
	for i := range out {
		v, err := s.open(memSealRecord, out[i].Key, out[i].Value)
		if err != nil {
			return nil, err
		}
		out[i].Value = v
	}
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
	return s.history[key].ordered(), nil
}

// PutTarget implements Store. It keeps a copy of target (sealed when the
// store has a Sealer).
func (s *MemStore) PutTarget(ctx context.Context, name string, target json.RawMessage) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var t json.RawMessage
	if len(target) > 0 {
		if !json.Valid(target) {
			return 0, &StoreRequestError{Key: name, Field: "target", Reason: "not valid JSON"}
		}
		var err error
		if t, err = s.seal(memSealTarget, name, target); err != nil {
			return 0, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.targets == nil {
		s.targets = map[string]memTarget{}
	}
	cur := s.targets[name]
	cur.last++
	if t != nil {
		cur.value, cur.rev = t, cur.last
	}
	s.targets[name] = cur
	return cur.last, nil
}

// Target implements Store.
func (s *MemStore) Target(ctx context.Context, name string) (json.RawMessage, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	s.mu.RLock()
	t := s.targets[name]
	s.mu.RUnlock()
	if t.value == nil {
		return nil, 0, fmt.Errorf("converge: target %q: %w", name, bare(ErrStoreNotFound))
	}
	v, err := s.open(memSealTarget, name, t.value)
	if err != nil {
		return nil, 0, err
	}
	return v, t.rev, nil
}

// checkClaim validates the arguments of Claim and ClaimDue.
func checkClaim(key, keyField, owner string, ttl time.Duration) error {
	switch {
	case key == "" && keyField != "":
		return &StoreRequestError{Key: key, Field: keyField, Reason: "must not be empty"}
	case owner == "":
		return &StoreRequestError{Key: key, Field: "owner", Reason: "must not be empty"}
	case ttl <= 0:
		return &StoreRequestError{Key: key, Field: "ttl", Reason: fmt.Sprintf("must be positive, got %s", ttl)}
	}
	return nil
}

// newLease makes a lease with a token never used before. The caller holds
// s.mu.
func (s *MemStore) newLease(key, owner string, expires time.Time) Lease {
	s.tokens++
	l := Lease{Key: key, Owner: owner, Expires: expires, Token: s.tokens}
	if s.leases == nil {
		s.leases = map[string]Lease{}
	}
	s.leases[key] = l
	return l
}

// Claim implements Store. Tokens come from one counter for the whole store,
// so a key never gets a token twice, even after a Release.
func (s *MemStore) Claim(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	if err := checkClaim(key, "key", owner, ttl); err != nil {
		return Lease{}, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, held := s.leases[key]
	live := held && now.Before(cur.Expires)
	if live && cur.Owner != owner {
		return Lease{}, &ClaimError{Key: key, Owner: owner, Holder: cur.Owner, Expires: cur.Expires}
	}
	if live {
		cur.Expires = now.Add(ttl)
		s.leases[key] = cur
		return cur, nil
	}
	return s.newLease(key, owner, now.Add(ttl)), nil
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
		return fmt.Errorf("converge: lease on %q by %q: %w", lease.Key, lease.Owner, bare(ErrLeaseLost))
	}
	delete(s.leases, lease.Key)
	return nil
}

// Schedule implements Queue.
func (s *MemStore) Schedule(ctx context.Context, key string, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := unixNanos(at)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[key]
	if !ok {
		return fmt.Errorf("converge: store key %q: %w", key, bare(ErrStoreNotFound))
	}
	s.scheduleLocked(key, r.q, t)
	return nil
}

// scheduleLocked makes the record key, of queue state q, due at t (Unix
// nanoseconds) as Schedule does. The caller holds s.mu.
func (s *MemStore) scheduleLocked(key string, q *memDue, t int64) {
	if l, held := s.leases[key]; held && s.now().Before(l.Expires) {
		if !q.hasPending || t < q.pending {
			q.pending, q.hasPending = t, true
		}
	}
	if q.idx < 0 || t < q.at {
		s.due.set(q, t)
	}
	s.notify(key)
}

// ClaimDue implements Queue. It takes the due records from an index, so
// its cost grows with the records it looks at, not with the store. A
// claimed record becomes due again when its lease expires, so that
// another owner takes it over unless Finish is called in time.
func (s *MemStore) ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]Claimed, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkClaim(prefix, "", owner, ttl); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, &StoreRequestError{Key: prefix, Field: "limit", Reason: fmt.Sprintf("must be positive, got %d", limit)}
	}
	now := s.now()
	nowNanos := unixNanos(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	picked := s.due.earliest(nowNanos, limit, func(q *memDue) bool {
		if !strings.HasPrefix(q.key, prefix) {
			return false
		}
		l, held := s.leases[q.key]
		return !held || !now.Before(l.Expires)
	})
	out := make([]Claimed, len(picked))
	for i, q := range picked {
		r := s.records[q.key]
		v, err := s.open(memSealRecord, q.key, r.value)
		if err != nil {
			return nil, err // nothing claimed yet
		}
		out[i].Record = StoreRecord{Key: q.key, Version: r.version, Value: v}
		out[i].History, out[i].HasHistory = historyTail(s.history[q.key].ordered()), true
		if q.at != math.MinInt64 {
			out[i].Due = time.Unix(0, q.at)
		}
	}
	expires := now.Add(ttl)
	for i, q := range picked {
		out[i].Lease = s.newLease(q.key, owner, expires)
		q.hasPending = false
		s.due.set(q, unixNanos(expires))
	}
	return out, nil
}

// Finish implements Queue. A lease that expired is no longer current, even
// when nobody took the key since.
func (s *MemStore) Finish(ctx context.Context, lease Lease, next time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.leases[lease.Key]
	if !ok || cur.Token != lease.Token || cur.Owner != lease.Owner || !now.Before(cur.Expires) {
		return fmt.Errorf("converge: lease on %q by %q: %w", lease.Key, lease.Owner, bare(ErrLeaseLost))
	}
	delete(s.leases, lease.Key)
	r, ok := s.records[lease.Key]
	if !ok {
		return nil
	}
	q := r.q
	at, due := unixNanos(next), !next.IsZero()
	if q.hasPending && (!due || q.pending < at) {
		at, due = q.pending, true
	}
	q.hasPending = false
	if !due {
		s.due.remove(q)
		return nil
	}
	s.due.set(q, at)
	s.notify(lease.Key)
	return nil
}

// memDueHeap is a binary min-heap of due records by rank (the due time
// less the priority's worth, see PriorityStep), then due time, then key.
type memDueHeap []*memDue

func (h memDueHeap) less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].key < h[j].key
}

func (h memDueHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h memDueHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h memDueHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h.less(c+1, c) {
			c++
		}
		if !h.less(c, i) {
			return
		}
		h.swap(i, c)
		i = c
	}
}

// set makes q due at at, adding it to the heap if needed.
func (h *memDueHeap) set(q *memDue, at int64) {
	q.at, q.rank = at, PriorityRank(at, q.prio)
	if q.idx < 0 {
		q.idx = len(*h)
		*h = append(*h, q)
		h.up(q.idx)
		return
	}
	h.down(q.idx)
	h.up(q.idx)
}

// remove takes q out of the heap (it is no longer due).
func (h *memDueHeap) remove(q *memDue) {
	i := q.idx
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
	q.idx = -1
}

// earliest returns up to limit records due at or before now that ok
// accepts, the first by rank first, visiting the heap in order without
// changing it: only the records ranked by now are looked at (those due,
// and those of a priority above 0 due within its worth of now), since a
// rank is never after its record's due time.
func (h memDueHeap) earliest(now int64, limit int, ok func(*memDue) bool) []*memDue {
	var out []*memDue
	if len(h) == 0 || h[0].rank > now {
		return out
	}
	// frontier is a min-heap (by the same order) of heap indexes whose
	// parents were visited.
	frontier := memIndexHeap{h: h, idx: []int{0}}
	for len(frontier.idx) > 0 && len(out) < limit {
		i := frontier.pop()
		if h[i].at <= now && ok(h[i]) {
			out = append(out, h[i])
		}
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h) && h[c].rank <= now {
				frontier.push(c)
			}
		}
	}
	return out
}

// memIndexHeap is a min-heap of indexes into a memDueHeap.
type memIndexHeap struct {
	h   memDueHeap
	idx []int
}

func (f *memIndexHeap) less(a, b int) bool { return f.h.less(f.idx[a], f.idx[b]) }

func (f *memIndexHeap) push(i int) {
	f.idx = append(f.idx, i)
	for c := len(f.idx) - 1; c > 0; {
		p := (c - 1) / 2
		if !f.less(c, p) {
			break
		}
		f.idx[c], f.idx[p] = f.idx[p], f.idx[c]
		c = p
	}
}

func (f *memIndexHeap) pop() int {
	top := f.idx[0]
	last := len(f.idx) - 1
	f.idx[0] = f.idx[last]
	f.idx = f.idx[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(f.idx) {
			break
		}
		if c+1 < len(f.idx) && f.less(c+1, c) {
			c++
		}
		if !f.less(c, i) {
			break
		}
		f.idx[i], f.idx[c] = f.idx[c], f.idx[i]
		i = c
	}
	return top
}

// memWatchPending bounds the keys a watch holds for delivery; past it, the
// watch drops them and delivers fn("") once.
const memWatchPending = 4096

// memWatch is one Watch on a MemStore. Writers add keys to its pending
// set, never waiting; its own goroutine delivers them.
type memWatch struct {
	prefix string
	fn     func(string)
	wake   chan struct{} // a token: there is something to deliver
	stop   chan struct{} // closed by stop
	done   chan struct{} // closed when the goroutine has ended

	mu       sync.Mutex
	keys     []string // pending keys, in the order of their first change
	seen     map[string]struct{}
	overflow bool
}

// Watch implements Queue, within this process: fn sees the changes made
// through this MemStore. Writers never wait for fn: changes wait in a
// set per watch (a key changed twice is delivered once), delivered by the
// watch's own goroutine; when more than a few thousand keys wait, they are
// dropped and fn("") is called once. Do not call stop from fn.
func (s *MemStore) Watch(ctx context.Context, prefix string, fn func(key string)) (stop func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, &StoreRequestError{Key: prefix, Field: "fn", Reason: "must not be nil"}
	}
	w := &memWatch{
		prefix: prefix,
		fn:     fn,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		seen:   map[string]struct{}{},
	}
	s.mu.Lock()
	s.watches = append(s.watches, w)
	s.mu.Unlock()
	go s.deliver(ctx, w)
	var once sync.Once
	return func() {
		once.Do(func() { close(w.stop) })
		<-w.done
	}, nil
}

// notify hands key to the watches under its prefix. The caller holds s.mu.
func (s *MemStore) notify(key string) {
	for _, w := range s.watches {
		if strings.HasPrefix(key, w.prefix) {
			w.add(key)
		}
	}
}

// add puts key in the pending set of w and wakes its goroutine; it never
// blocks on it.
func (w *memWatch) add(key string) {
	w.mu.Lock()
	if !w.overflow {
		if _, ok := w.seen[key]; !ok {
			if len(w.keys) >= memWatchPending {
				w.overflow = true
				clear(w.keys)
				w.keys = w.keys[:0]
				clear(w.seen)
			} else {
				w.seen[key] = struct{}{}
				w.keys = append(w.keys, key)
			}
		}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// deliver is the goroutine of a watch: it calls fn with the pending keys
// until ctx ends or stop is called.
func (s *MemStore) deliver(ctx context.Context, w *memWatch) {
	defer close(w.done)
	defer func() {
		s.mu.Lock()
		s.watches = slices.DeleteFunc(s.watches, func(x *memWatch) bool { return x == w })
		s.mu.Unlock()
	}()
	ended := func() bool {
		select {
		case <-ctx.Done():
			return true
		case <-w.stop:
			return true
		default:
			return false
		}
	}
	var batch []string
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.stop:
			return
		case <-w.wake:
		}
		w.mu.Lock()
		batch, w.keys = w.keys, batch[:0]
		overflow := w.overflow
		w.overflow = false
		clear(w.seen)
		w.mu.Unlock()
		if overflow {
			batch = append(batch[:0], "")
		}
		for _, k := range batch {
			if ended() {
				return
			}
			w.fn(k)
		}
		clear(batch)
	}
}
