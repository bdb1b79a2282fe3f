package convergetest

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/convergekit/converge"
)

// StoreOp names a method of converge.Store or converge.Queue, for
// injecting failures and counting calls on a fake Store.
type StoreOp string

// The operations of converge.Store and converge.Queue.
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
	OpSchedule  StoreOp = "Schedule"
	OpClaimDue  StoreOp = "ClaimDue"
	OpFinish    StoreOp = "Finish"
	OpWatch     StoreOp = "Watch"
	// OpCreateMany is converge.Creator's CreateMany.
	OpCreateMany StoreOp = "CreateMany"
)

// Store is a fake converge.Store and converge.Queue with injectable
// failures, backed by a converge.MemStore. The zero value is an empty
// store that never fails.
//
// Failures come in three kinds: scripted (FailNext: the next n calls of an
// operation fail), random (FailRate: every call fails with that
// probability, before doing anything), and ambiguous (LostReplyRate: a
// write that succeeded still returns an error, as when a reply from a
// database is lost). Injected errors wrap ErrInjected.
//
// An injected failure on Watch fails the call itself; the changes a
// working watch delivers are never dropped by the fake (the MemStore may
// still coalesce them, or call fn("") when it falls behind).
//
// Limits: failures are decided per call, not per key; the store keeps
// everything in memory. Two fakes sharing one Mem are two handles on the
// same storage, as two processes on one database.
type Store struct {
	// Mem is the store that does the work; nil means a fresh MemStore made
	// on first use. Set it before first use.
	Mem *converge.MemStore
	// FailRate is the probability (0..1) that a call fails before doing
	// anything. Change it with SetFailRate while the store is in use.
	FailRate float64
	// LostReplyRate is the probability (0..1) that a successful Put,
	// Delete, Schedule or Finish still returns an error.
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

var (
	_ converge.Queue   = (*Store)(nil)
	_ converge.Creator = (*Store)(nil)
)

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

// CreateMany implements converge.Creator. A lost reply (LostReplyRate)
// returns an error after every record was created.
func (s *Store) CreateMany(ctx context.Context, recs []converge.NewRecord) ([]uint64, error) {
	if err := s.enter(OpCreateMany); err != nil {
		return nil, err
	}
	v, err := s.Mem.CreateMany(ctx, recs)
	if err != nil {
		return nil, err
	}
	if err := s.lostReply(OpCreateMany); err != nil {
		return nil, err
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
func (s *Store) PutTarget(ctx context.Context, name string, target json.RawMessage) (uint64, error) {
	if err := s.enter(OpPutTarget); err != nil {
		return 0, err
	}
	return s.Mem.PutTarget(ctx, name, target)
}

// Target implements converge.Store.
func (s *Store) Target(ctx context.Context, name string) (json.RawMessage, uint64, error) {
	if err := s.enter(OpTarget); err != nil {
		return nil, 0, err
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

// Schedule implements converge.Queue.
func (s *Store) Schedule(ctx context.Context, key string, at time.Time) error {
	if err := s.enter(OpSchedule); err != nil {
		return err
	}
	if err := s.Mem.Schedule(ctx, key, at); err != nil {
		return err
	}
	return s.lostReply(OpSchedule)
}

// ClaimDue implements converge.Queue.
func (s *Store) ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]converge.Claimed, error) {
	if err := s.enter(OpClaimDue); err != nil {
		return nil, err
	}
	return s.Mem.ClaimDue(ctx, prefix, owner, ttl, limit)
}

// Finish implements converge.Queue.
func (s *Store) Finish(ctx context.Context, lease converge.Lease, next time.Time) error {
	if err := s.enter(OpFinish); err != nil {
		return err
	}
	if err := s.Mem.Finish(ctx, lease, next); err != nil {
		return err
	}
	return s.lostReply(OpFinish)
}

// Watch implements converge.Queue.
func (s *Store) Watch(ctx context.Context, prefix string, fn func(key string)) (stop func(), err error) {
	if err := s.enter(OpWatch); err != nil {
		return nil, err
	}
	return s.Mem.Watch(ctx, prefix, fn)
}
