package convergetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/convergekit/converge"
)

// ErrPartitioned is the error of a call to a FaultStore cut off with
// PartitionFail, inside a *StoreError naming the operation.
var ErrPartitioned = errors.New("convergetest: store partitioned")

// PartitionMode is how a cut-off replica meets its store.
type PartitionMode uint8

const (
	// PartitionNone: calls go through (a healed link).
	PartitionNone PartitionMode = iota
	// PartitionFail: every call fails at once with ErrPartitioned, as
	// when connections are refused or reset.
	PartitionFail
	// PartitionHang: every call waits until the link is healed (then it
	// goes through) or its context ends (then it fails with the
	// context's cause), as when packets are dropped without an answer.
	PartitionHang
)

// String returns "none", "fail" or "hang".
func (m PartitionMode) String() string {
	switch m {
	case PartitionNone:
		return "none"
	case PartitionFail:
		return "fail"
	case PartitionHang:
		return "hang"
	}
	return fmt.Sprintf("PartitionMode(%d)", uint8(m))
}

// Link is one replica's way to its store, which a test cuts, slows and
// heals. FaultStore is a Link; a TCP proxy in front of a database server
// can be one too.
type Link interface {
	// Partition cuts the link in mode (PartitionNone heals it).
	Partition(mode PartitionMode)
	// Delay makes every call (or round trip) take d longer; 0 none.
	Delay(d time.Duration)
}

// FaultStore wraps the handle of one replica on a converge.Queue shared
// with other replicas, and injects the faults a replica meets in the
// field: a partition from the store (every call fails, or hangs), a slow
// store (every reply is late), and a stepped wall clock (Now, for the
// replica's own clock: pass FaultStore.Now as controller.Config.Now). The
// storage itself is untouched, so the other replicas go on with it.
//
// The zero value wraps a fresh converge.MemStore, is not partitioned, not
// slow, and its Now is time.Now. Set Inner before first use. FaultStore is
// safe for concurrent use.
//
// Limits: a partition cuts the whole replica, not single keys; a call
// already inside Inner when the link is cut finishes normally (as a
// request already sent would); while the link is cut, the changes a Watch
// would report are dropped, as a replica cut off misses notifications:
// it finds them by polling (as the controller does every Config.Poll).
type FaultStore struct {
	// Inner is the replica's handle on the shared store; nil means a
	// fresh MemStore made on first use.
	Inner converge.Queue

	once   sync.Once
	mu     sync.Mutex
	mode   PartitionMode
	healed chan struct{} // closed when the link heals; nil while it is up
	delay  time.Duration
	offset time.Duration
	calls  int
	cut    int // calls failed or held by a partition
}

var (
	_ converge.Queue = (*FaultStore)(nil)
	_ Link           = (*FaultStore)(nil)
)

// NewFaultStore returns a FaultStore on inner.
func NewFaultStore(inner converge.Queue) *FaultStore { return &FaultStore{Inner: inner} }

func (f *FaultStore) init() {
	f.once.Do(func() {
		if f.Inner == nil {
			f.Inner = converge.NewMemStore()
		}
	})
}

// Partition cuts the replica off its store in mode; PartitionNone heals
// the link, releasing the calls that hang.
func (f *FaultStore) Partition(mode PartitionMode) {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode == mode {
		return
	}
	if f.mode == PartitionHang && f.healed != nil {
		close(f.healed)
		f.healed = nil
	}
	if mode == PartitionHang {
		f.healed = make(chan struct{})
	}
	f.mode = mode
}

// Heal is Partition(PartitionNone).
func (f *FaultStore) Heal() { f.Partition(PartitionNone) }

// Delay makes every reply of the store come d late (0: on time). The call
// is done by the store before the delay, as by a slow network or server
// whose answer is late: a lease the store gave has run for d when the
// replica learns of it. A call whose context ends during the delay
// returns the context's cause, whether or not the store did it.
func (f *FaultStore) Delay(d time.Duration) {
	f.init()
	f.mu.Lock()
	f.delay = max(d, 0)
	f.mu.Unlock()
}

// Step moves the replica's wall clock (Now) by d, forward or back, as NTP
// does on a device without a real-time clock. It changes neither the
// store's clock nor the monotonic clock that timers and time.Since use.
func (f *FaultStore) Step(d time.Duration) {
	f.init()
	f.mu.Lock()
	f.offset += d
	f.mu.Unlock()
}

// Now returns the replica's wall clock: time.Now moved by every Step,
// without a monotonic reading (as a stepped clock has none that holds).
func (f *FaultStore) Now() time.Time {
	f.init()
	f.mu.Lock()
	off := f.offset
	f.mu.Unlock()
	return time.Now().Add(off).Round(0)
}

// Calls returns how many calls the store got, and how many of them a
// partition failed or held.
func (f *FaultStore) Calls() (calls, cut int) {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.cut
}

// enter counts a call of op and applies the partition: it returns the
// error the call fails with, or nil to go on.
func (f *FaultStore) enter(ctx context.Context, op StoreOp) error {
	f.init()
	f.mu.Lock()
	f.calls++
	switch f.mode {
	case PartitionFail:
		f.cut++
		f.mu.Unlock()
		return &StoreError{Op: op, Err: ErrPartitioned}
	case PartitionHang:
		f.cut++
		healed := f.healed
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return &StoreError{Op: op, Err: context.Cause(ctx)}
		case <-healed:
			return f.enter(ctx, op) // the link may be cut again meanwhile
		}
	}
	f.mu.Unlock()
	return ctx.Err()
}

// leave delays the reply of a call that returned err.
func (f *FaultStore) leave(ctx context.Context, op StoreOp, err error) error {
	f.mu.Lock()
	d := f.delay
	f.mu.Unlock()
	if d <= 0 {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return &StoreError{Op: op, Err: context.Cause(ctx)}
	case <-t.C:
		return err
	}
}

// Get implements converge.Store.
func (f *FaultStore) Get(ctx context.Context, key string) (converge.StoreRecord, error) {
	if err := f.enter(ctx, OpGet); err != nil {
		return converge.StoreRecord{}, err
	}
	rec, err := f.Inner.Get(ctx, key)
	if err := f.leave(ctx, OpGet, err); err != nil {
		return converge.StoreRecord{}, err
	}
	return rec, nil
}

// Put implements converge.Store.
func (f *FaultStore) Put(ctx context.Context, rec converge.StoreRecord, history ...converge.HistoryEntry) (uint64, error) {
	if err := f.enter(ctx, OpPut); err != nil {
		return 0, err
	}
	v, err := f.Inner.Put(ctx, rec, history...)
	if err := f.leave(ctx, OpPut, err); err != nil {
		return 0, err
	}
	return v, nil
}

// Delete implements converge.Store.
func (f *FaultStore) Delete(ctx context.Context, key string, version uint64, history ...converge.HistoryEntry) error {
	if err := f.enter(ctx, OpDelete); err != nil {
		return err
	}
	return f.leave(ctx, OpDelete, f.Inner.Delete(ctx, key, version, history...))
}

// List implements converge.Store.
func (f *FaultStore) List(ctx context.Context, prefix string) ([]converge.StoreRecord, error) {
	if err := f.enter(ctx, OpList); err != nil {
		return nil, err
	}
	recs, err := f.Inner.List(ctx, prefix)
	if err := f.leave(ctx, OpList, err); err != nil {
		return nil, err
	}
	return recs, nil
}

// History implements converge.Store.
func (f *FaultStore) History(ctx context.Context, key string) ([]converge.HistoryEntry, error) {
	if err := f.enter(ctx, OpHistory); err != nil {
		return nil, err
	}
	h, err := f.Inner.History(ctx, key)
	if err := f.leave(ctx, OpHistory, err); err != nil {
		return nil, err
	}
	return h, nil
}

// PutTarget implements converge.Store.
func (f *FaultStore) PutTarget(ctx context.Context, name string, target json.RawMessage) (uint64, error) {
	if err := f.enter(ctx, OpPutTarget); err != nil {
		return 0, err
	}
	rev, err := f.Inner.PutTarget(ctx, name, target)
	if err := f.leave(ctx, OpPutTarget, err); err != nil {
		return 0, err
	}
	return rev, nil
}

// Target implements converge.Store.
func (f *FaultStore) Target(ctx context.Context, name string) (json.RawMessage, uint64, error) {
	if err := f.enter(ctx, OpTarget); err != nil {
		return nil, 0, err
	}
	v, rev, err := f.Inner.Target(ctx, name)
	if err := f.leave(ctx, OpTarget, err); err != nil {
		return nil, 0, err
	}
	return v, rev, nil
}

// Claim implements converge.Store.
func (f *FaultStore) Claim(ctx context.Context, key, owner string, ttl time.Duration) (converge.Lease, error) {
	if err := f.enter(ctx, OpClaim); err != nil {
		return converge.Lease{}, err
	}
	l, err := f.Inner.Claim(ctx, key, owner, ttl)
	if err := f.leave(ctx, OpClaim, err); err != nil {
		return converge.Lease{}, err
	}
	return l, nil
}

// Release implements converge.Store.
func (f *FaultStore) Release(ctx context.Context, lease converge.Lease) error {
	if err := f.enter(ctx, OpRelease); err != nil {
		return err
	}
	return f.leave(ctx, OpRelease, f.Inner.Release(ctx, lease))
}

// Schedule implements converge.Queue.
func (f *FaultStore) Schedule(ctx context.Context, key string, at time.Time) error {
	if err := f.enter(ctx, OpSchedule); err != nil {
		return err
	}
	return f.leave(ctx, OpSchedule, f.Inner.Schedule(ctx, key, at))
}

// ClaimDue implements converge.Queue.
func (f *FaultStore) ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]converge.Claimed, error) {
	if err := f.enter(ctx, OpClaimDue); err != nil {
		return nil, err
	}
	got, err := f.Inner.ClaimDue(ctx, prefix, owner, ttl, limit)
	if err := f.leave(ctx, OpClaimDue, err); err != nil {
		return nil, err
	}
	return got, nil
}

// Finish implements converge.Queue.
func (f *FaultStore) Finish(ctx context.Context, lease converge.Lease, next time.Time) error {
	if err := f.enter(ctx, OpFinish); err != nil {
		return err
	}
	return f.leave(ctx, OpFinish, f.Inner.Finish(ctx, lease, next))
}

// Watch implements converge.Queue. While the link is cut, the changes the
// watch would report are dropped.
func (f *FaultStore) Watch(ctx context.Context, prefix string, fn func(key string)) (stop func(), err error) {
	if err := f.enter(ctx, OpWatch); err != nil {
		return nil, err
	}
	innerStop, err := f.Inner.Watch(ctx, prefix, func(key string) {
		f.mu.Lock()
		cut := f.mode != PartitionNone
		f.mu.Unlock()
		if !cut {
			fn(key)
		}
	})
	if err := f.leave(ctx, OpWatch, err); err != nil {
		if innerStop != nil {
			innerStop()
		}
		return nil, err
	}
	return innerStop, nil
}
