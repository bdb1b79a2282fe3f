package convergetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/convergekit/converge"
)

// StoreOp names a method of converge.Store, for injecting failures and
// counting calls on a fake Store.
type StoreOp string

// The operations of converge.Store.
const (
	OpGet       StoreOp = "Get"
	OpPut       StoreOp = "Put"
	OpDelete    StoreOp = "Delete"
	OpList      StoreOp = "List"
	OpHistory   StoreOp = "History"
	OpPutTarget StoreOp = "PutTarget"
	OpTarget    StoreOp = "Target"
	OpClaim     StoreOp = "Claim"
	OpRelease   StoreOp = "Release"
)

// Store is a fake converge.Store with injectable failures, backed by a
// converge.MemStore. The zero value is an empty store that never fails.
//
// Failures come in three kinds: scripted (FailNext: the next n calls of an
// operation fail), random (FailRate: every call fails with that
// probability, before doing anything), and ambiguous (LostReplyRate: a
// write that succeeded still returns an error, as when a reply from a
// database is lost). Injected errors wrap ErrInjected.
//
// Limits: failures are decided per call, not per key; the store keeps
// everything in memory.
type Store struct {
	// Mem is the store that does the work; nil means a fresh MemStore made
	// on first use. Set it before first use.
	Mem *converge.MemStore
	// FailRate is the probability (0..1) that a call fails before doing
	// anything. Change it with SetFailRate while the store is in use.
	FailRate float64
	// LostReplyRate is the probability (0..1) that a successful Put or
	// Delete still returns an error.
	LostReplyRate float64
	// Seed seeds the random failures; the same seed gives the same
	// sequence for the same order of calls.
	Seed uint64

	once     sync.Once
	mu       sync.Mutex
	rng      *rand.Rand
	scripted map[StoreOp]*failure
	calls    map[StoreOp]int
	injected int
}

var _ converge.Store = (*Store)(nil)

// NewStore returns a fake store that fails every call with probability
// failRate, with random failures seeded by seed.
func NewStore(failRate float64, seed uint64) *Store {
	return &Store{FailRate: failRate, Seed: seed}
}

func (s *Store) init() {
	s.once.Do(func() {
		if s.Mem == nil {
			s.Mem = converge.NewMemStore()
		}
		s.rng = rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15))
		s.scripted = map[StoreOp]*failure{}
		s.calls = map[StoreOp]int{}
	})
}

// SetFailRate changes FailRate and LostReplyRate while the store is in
// use, for example to 0 to let a test finish.
func (s *Store) SetFailRate(failRate, lostReplyRate float64) {
	s.init()
	s.mu.Lock()
	s.FailRate, s.LostReplyRate = failRate, lostReplyRate
	s.mu.Unlock()
}

// FailNext makes the next times calls of op fail with err (ErrInjected
// when nil) before doing anything; times < 0 fails every call.
func (s *Store) FailNext(op StoreOp, times int, err error) *Store {
	s.init()
	if err == nil {
		err = ErrInjected
	}
	s.mu.Lock()
	s.scripted[op] = &failure{remaining: times, err: err}
	s.mu.Unlock()
	return s
}

// Calls returns how many times op was called, failed calls included.
func (s *Store) Calls(op StoreOp) int {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Injected returns how many failures the store injected so far.
func (s *Store) Injected() int {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.injected
}

// enter counts a call of op and returns the injected error, if any.
func (s *Store) enter(op StoreOp) error {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	if f := s.scripted[op]; f != nil && f.remaining != 0 {
		if f.remaining > 0 {
			f.remaining--
		}
		s.injected++
		return &StoreError{Op: op, Err: f.err}
	}
	if s.FailRate > 0 && s.rng.Float64() < s.FailRate {
		s.injected++
		return &StoreError{Op: op, Err: ErrInjected}
	}
	return nil
}

// lostReply decides whether a successful write reports an error anyway.
func (s *Store) lostReply(op StoreOp) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.LostReplyRate > 0 && s.rng.Float64() < s.LostReplyRate {
		s.injected++
		return &StoreError{Op: op, Err: ErrInjected, Written: true}
	}
	return nil
}

// StoreError is an injected store failure. Written reports that the write
// was done despite the error (a lost reply).
type StoreError struct {
	Op      StoreOp
	Err     error
	Written bool
}

// Error describes the problem, naming its culprit.
func (e *StoreError) Error() string {
	if e.Written {
		return "convergetest: store " + string(e.Op) + " (written, reply lost): " + e.Err.Error()
	}
	return "convergetest: store " + string(e.Op) + ": " + e.Err.Error()
}

// Unwrap returns the injected error.
func (e *StoreError) Unwrap() error { return e.Err }

// Get implements converge.Store.
func (s *Store) Get(ctx context.Context, key string) (converge.StoreRecord, error) {
	if err := s.enter(OpGet); err != nil {
		return converge.StoreRecord{}, err
	}
	return s.Mem.Get(ctx, key)
}

// Put implements converge.Store.
func (s *Store) Put(ctx context.Context, rec converge.StoreRecord, history ...converge.HistoryEntry) (uint64, error) {
	if err := s.enter(OpPut); err != nil {
		return 0, err
	}
	v, err := s.Mem.Put(ctx, rec, history...)
	if err != nil {
		return v, err
	}
	if err := s.lostReply(OpPut); err != nil {
		return 0, err
	}
	return v, nil
}

// Delete implements converge.Store.
func (s *Store) Delete(ctx context.Context, key string, version uint64, history ...converge.HistoryEntry) error {
	if err := s.enter(OpDelete); err != nil {
		return err
	}
	if err := s.Mem.Delete(ctx, key, version, history...); err != nil {
		return err
	}
	return s.lostReply(OpDelete)
}

// List implements converge.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]converge.StoreRecord, error) {
	if err := s.enter(OpList); err != nil {
		return nil, err
	}
	return s.Mem.List(ctx, prefix)
}

// History implements converge.Store.
func (s *Store) History(ctx context.Context, key string) ([]converge.HistoryEntry, error) {
	if err := s.enter(OpHistory); err != nil {
		return nil, err
	}
	return s.Mem.History(ctx, key)
}

// PutTarget implements converge.Store.
func (s *Store) PutTarget(ctx context.Context, name string, target json.RawMessage) error {
	if err := s.enter(OpPutTarget); err != nil {
		return err
	}
	return s.Mem.PutTarget(ctx, name, target)
}

// Target implements converge.Store.
func (s *Store) Target(ctx context.Context, name string) (json.RawMessage, error) {
	if err := s.enter(OpTarget); err != nil {
		return nil, err
	}
	return s.Mem.Target(ctx, name)
}

// Claim implements converge.Store.
func (s *Store) Claim(ctx context.Context, key, owner string, ttl time.Duration) (converge.Lease, error) {
	if err := s.enter(OpClaim); err != nil {
		return converge.Lease{}, err
	}
	return s.Mem.Claim(ctx, key, owner, ttl)
}

// Release implements converge.Store.
func (s *Store) Release(ctx context.Context, lease converge.Lease) error {
	if err := s.enter(OpRelease); err != nil {
		return err
	}
	return s.Mem.Release(ctx, lease)
}

// ErrStoreNonConformant is matched by every *StoreConformanceError.
var ErrStoreNonConformant = errors.New("convergetest: store breaks the Store contract")

// StoreConformanceError is one broken rule of the converge.Store contract
// found by ConformStore.
type StoreConformanceError struct {
	Rule string
	Err  error
}

// Error describes the problem, naming its culprit.
func (e *StoreConformanceError) Error() string {
	return fmt.Sprintf("convergetest: store: %s: %v", e.Rule, e.Err)
}

// Unwrap returns the cause.
func (e *StoreConformanceError) Unwrap() error { return e.Err }

// Is makes StoreConformanceError match ErrStoreNonConformant.
func (e *StoreConformanceError) Is(target error) bool { return target == ErrStoreNonConformant }

// StoreConformOptions tunes ConformStore. The zero value checks everything
// but lease expiry.
type StoreConformOptions struct {
	// Prefix is put before every key ConformStore writes, so it can run on
	// a shared database; the store should hold no other key under it.
	Prefix string
	// Wait, when set, lets time pass by d for the store's leases (a real
	// sleep for a database, time.Sleep inside a testing/synctest bubble for
	// MemStore). Without it, lease expiry is not checked.
	Wait func(d time.Duration)
}

// ConformStore runs the converge.Store contract against s and returns nil
// or an error aggregating one *StoreConformanceError per broken rule. It
// checks that:
//
//   - Get of a missing key and Target of a missing name match
//     converge.ErrStoreNotFound;
//   - Put with version 0 creates, returns version 1 and then a higher
//     version on each write; a stale version (0 on an existing key, an old
//     or future version) fails with a *converge.StoreVersionError and
//     writes nothing, history included;
//   - history entries are appended atomically with their write, in order,
//     and outlive Delete; Delete checks the version;
//   - List returns the records under a prefix, sorted by key;
//   - the last target is replaced by PutTarget;
//   - a claim is exclusive until released or (with Wait) expired, renewing
//     keeps the token, and a lost lease cannot be released.
//
// It imports no testing package.
func ConformStore(ctx context.Context, s converge.Store, opts StoreConformOptions) error {
	var errs []error
	fail := func(rule string, format string, args ...any) {
		errs = append(errs, &StoreConformanceError{Rule: rule, Err: fmt.Errorf(format, args...)})
	}
	k := func(name string) string { return opts.Prefix + name }
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := func(i int, to string) converge.HistoryEntry {
		return converge.HistoryEntry{At: t0.Add(time.Duration(i) * time.Second), To: to}
	}

	if _, err := s.Get(ctx, k("missing")); !errors.Is(err, converge.ErrStoreNotFound) {
		fail("get missing", "want ErrStoreNotFound, got %v", err)
	}
	v1, err := s.Put(ctx, converge.StoreRecord{Key: k("obj/a"), Value: json.RawMessage(`{"n":1}`)}, h(1, "one"))
	if err != nil || v1 != 1 {
		fail("create", "want version 1, got %d, %v", v1, err)
	}
	for _, stale := range []uint64{0, v1 + 5} {
		_, err := s.Put(ctx, converge.StoreRecord{Key: k("obj/a"), Version: stale, Value: json.RawMessage(`{"n":9}`)}, h(9, "stale"))
		var ve *converge.StoreVersionError
		if !errors.As(err, &ve) || !errors.Is(err, converge.ErrStoreStale) {
			fail("stale put", "version %d: want *StoreVersionError, got %v", stale, err)
		}
	}
	v2, err := s.Put(ctx, converge.StoreRecord{Key: k("obj/a"), Version: v1, Value: json.RawMessage(`{"n":2}`)}, h(2, "two"))
	if err != nil || v2 <= v1 {
		fail("update", "want a version above %d, got %d, %v", v1, v2, err)
	}
	if _, err := s.Put(ctx, converge.StoreRecord{Key: k("obj/a"), Version: v1, Value: json.RawMessage(`{"n":9}`)}); !errors.Is(err, converge.ErrStoreStale) {
		fail("stale put", "old version %d: want ErrStoreStale, got %v", v1, err)
	}
	if rec, err := s.Get(ctx, k("obj/a")); err != nil || rec.Version != v2 || !jsonEqual(rec.Value, `{"n":2}`) {
		fail("get", "want version %d {\"n\":2}, got %d %s, %v", v2, rec.Version, rec.Value, err)
	}
	if hist, err := s.History(ctx, k("obj/a")); err != nil || !historyEqual(hist, []converge.HistoryEntry{h(1, "one"), h(2, "two")}) {
		fail("history", "want entries one, two; got %v, %v", hist, err)
	}

	if _, err := s.Put(ctx, converge.StoreRecord{Key: k("obj/b"), Value: json.RawMessage(`2`)}); err != nil {
		fail("create", "second key: %v", err)
	}
	if _, err := s.Put(ctx, converge.StoreRecord{Key: k("other/c"), Value: json.RawMessage(`3`)}); err != nil {
		fail("create", "third key: %v", err)
	}
	recs, err := s.List(ctx, k("obj/"))
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key)
	}
	if err != nil || !slices.Equal(keys, []string{k("obj/a"), k("obj/b")}) {
		fail("list", "want [obj/a obj/b] sorted, got %v, %v", keys, err)
	}

	if err := s.Delete(ctx, k("obj/a"), v1, h(3, "")); !errors.Is(err, converge.ErrStoreStale) {
		fail("delete", "stale version: want ErrStoreStale, got %v", err)
	}
	if err := s.Delete(ctx, k("obj/a"), v2, h(3, "")); err != nil {
		fail("delete", "%v", err)
	}
	if _, err := s.Get(ctx, k("obj/a")); !errors.Is(err, converge.ErrStoreNotFound) {
		fail("delete", "record still there: %v", err)
	}
	if err := s.Delete(ctx, k("obj/a"), v2); !errors.Is(err, converge.ErrStoreNotFound) {
		fail("delete", "missing key: want ErrStoreNotFound, got %v", err)
	}
	if hist, err := s.History(ctx, k("obj/a")); err != nil || len(hist) != 3 {
		fail("history", "want 3 entries after delete, got %v, %v", hist, err)
	}

	if _, err := s.Target(ctx, k("device")); !errors.Is(err, converge.ErrStoreNotFound) {
		fail("target", "missing: want ErrStoreNotFound, got %v", err)
	}
	for _, v := range []string{`{"v":1}`, `{"v":2}`} {
		if err := s.PutTarget(ctx, k("device"), json.RawMessage(v)); err != nil {
			fail("target", "put: %v", err)
		}
	}
	if got, err := s.Target(ctx, k("device")); err != nil || !jsonEqual(got, `{"v":2}`) {
		fail("target", "want the last one, got %s, %v", got, err)
	}

	a, err := s.Claim(ctx, k("obj/b"), "owner-a", time.Minute)
	if err != nil {
		fail("claim", "free key: %v", err)
	}
	var ce *converge.ClaimError
	if _, err := s.Claim(ctx, k("obj/b"), "owner-b", time.Minute); !errors.As(err, &ce) || !errors.Is(err, converge.ErrClaimHeld) {
		fail("claim", "held key: want *ClaimError, got %v", err)
	}
	if a2, err := s.Claim(ctx, k("obj/b"), "owner-a", time.Minute); err != nil || a2.Token != a.Token {
		fail("claim", "renewal: want token %d, got %d, %v", a.Token, a2.Token, err)
	}
	if err := s.Release(ctx, a); err != nil {
		fail("release", "%v", err)
	}
	if err := s.Release(ctx, a); !errors.Is(err, converge.ErrLeaseLost) {
		fail("release", "twice: want ErrLeaseLost, got %v", err)
	}
	if opts.Wait != nil {
		short, err := s.Claim(ctx, k("obj/b"), "owner-a", time.Second)
		if err != nil {
			fail("claim", "released key: %v", err)
		}
		opts.Wait(2 * time.Second)
		b, err := s.Claim(ctx, k("obj/b"), "owner-b", time.Minute)
		if err != nil {
			fail("claim", "expired lease: want it taken over, got %v", err)
		} else if b.Token == short.Token {
			fail("claim", "new owner got the old token %d", b.Token)
		}
		if err := s.Release(ctx, short); !errors.Is(err, converge.ErrLeaseLost) {
			fail("release", "expired lease: want ErrLeaseLost, got %v", err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &multierror.Error{Errors: errs}
}

func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

func historyEqual(got, want []converge.HistoryEntry) bool {
	return slices.EqualFunc(got, want, func(a, b converge.HistoryEntry) bool {
		return a.At.Equal(b.At) && a.From == b.From && a.To == b.To && a.Reason == b.Reason
	})
}
