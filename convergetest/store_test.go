package convergetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

func TestStoreZeroValueWorks(t *testing.T) {
	ctx := context.Background()
	var s convergetest.Store
	v, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	rec, err := s.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, v, rec.Version)
	assert.Equal(t, 1, s.Calls(convergetest.OpGet))
	assert.Equal(t, 0, s.Injected())
}

func TestStoreFailNext(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	s := (&convergetest.Store{}).FailNext(convergetest.OpPut, 2, boom)
	for range 2 {
		_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
		require.ErrorIs(t, err, boom)
		var se *convergetest.StoreError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, convergetest.OpPut, se.Op)
		assert.False(t, se.Written)
	}
	_, err := s.Get(ctx, "k")
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "failed writes wrote nothing")
	_, err = s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	assert.Equal(t, 3, s.Calls(convergetest.OpPut))
	assert.Equal(t, 2, s.Injected())

	s.FailNext(convergetest.OpTarget, -1, nil)
	for range 3 {
		_, _, err := s.Target(ctx, "x")
		require.ErrorIs(t, err, convergetest.ErrInjected)
	}
}

func TestStoreFailRate(t *testing.T) {
	ctx := context.Background()
	s := convergetest.NewStore(0.3, 42)
	failed := 0
	for range 1000 {
		if _, err := s.List(ctx, ""); err != nil {
			require.ErrorIs(t, err, convergetest.ErrInjected)
			failed++
		}
	}
	assert.InDelta(t, 300, failed, 60)
	assert.Equal(t, failed, s.Injected())
	s.SetFailRate(0, 0)
	_, err := s.List(ctx, "")
	require.NoError(t, err)
}

func TestStoreLostReply(t *testing.T) {
	ctx := context.Background()
	s := &convergetest.Store{LostReplyRate: 1}
	_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)}, converge.HistoryEntry{To: "a"})
	var se *convergetest.StoreError
	require.ErrorAs(t, err, &se)
	assert.True(t, se.Written)
	rec, err := s.Mem.Get(ctx, "k")
	require.NoError(t, err, "the write happened")
	assert.Equal(t, uint64(1), rec.Version)
	require.Error(t, s.Delete(ctx, "k", 1))
	_, err = s.Mem.Get(ctx, "k")
	require.ErrorIs(t, err, converge.ErrStoreNotFound)
	h, err := s.History(ctx, "k")
	require.NoError(t, err)
	assert.Len(t, h, 1)
}

func TestStoreConformMemStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := converge.NewMemStore()
		require.NoError(t, convergetest.ConformStore(ctx, mem, convergetest.StoreConformOptions{
			Wait: time.Sleep,
			Peer: &convergetest.Store{Mem: mem},
		}))
	})
}

func TestStoreConformMemStoreSealedWithRetention(t *testing.T) {
	sealer, err := converge.NewAESGCMSealer(make([]byte, 32))
	require.NoError(t, err)
	for _, ret := range []converge.Retention{
		{Entries: 5, Age: time.Hour},
		{Entries: -1},
		{Entries: 1},
	} {
		t.Run(fmt.Sprintf("%+v", ret), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &converge.MemStore{Sealer: sealer, Retention: ret}
				require.NoError(t, convergetest.ConformStore(context.Background(), s, convergetest.StoreConformOptions{
					Wait: time.Sleep, Retention: ret,
				}))
			})
		})
	}
}

func TestStoreConformFake(t *testing.T) {
	ctx := context.Background()
	fake := &convergetest.Store{}
	require.NoError(t, convergetest.ConformStore(ctx, fake, convergetest.StoreConformOptions{Prefix: "t1/"}))
	assert.Positive(t, fake.Calls(convergetest.OpClaimDue))
	assert.Positive(t, fake.Calls(convergetest.OpWatch))
	// Twice on one store: the prefix keeps the runs apart.
	require.NoError(t, convergetest.ConformStore(ctx, fake, convergetest.StoreConformOptions{Prefix: "t2/", Peer: fake.Mem}))
}

func TestStoreQueueFailNext(t *testing.T) {
	ctx := context.Background()
	s := &convergetest.Store{}
	_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	calls := []struct {
		op   convergetest.StoreOp
		call func() error
	}{
		{convergetest.OpSchedule, func() error { return s.Schedule(ctx, "k", time.Now()) }},
		{convergetest.OpClaimDue, func() error { _, err := s.ClaimDue(ctx, "", "me", time.Minute, 10); return err }},
		{convergetest.OpFinish, func() error { return s.Finish(ctx, converge.Lease{Key: "k"}, time.Time{}) }},
		{convergetest.OpWatch, func() error { _, err := s.Watch(ctx, "", func(string) {}); return err }},
	}
	for _, tc := range calls {
		t.Run(string(tc.op), func(t *testing.T) {
			s.FailNext(tc.op, 1, nil)
			err := tc.call()
			require.ErrorIs(t, err, convergetest.ErrInjected)
			var se *convergetest.StoreError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.op, se.Op)
			assert.Equal(t, 1, s.Calls(tc.op))
		})
	}
	// The injected ClaimDue claimed nothing: the record is still due.
	got, err := s.ClaimDue(ctx, "", "me", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)

	// A lost reply on Finish: the lease is gone all the same.
	s.SetFailRate(0, 1)
	err = s.Finish(ctx, got[0].Lease, time.Time{})
	var se *convergetest.StoreError
	require.ErrorAs(t, err, &se)
	assert.True(t, se.Written)
	s.SetFailRate(0, 0)
	require.ErrorIs(t, s.Finish(ctx, got[0].Lease, time.Time{}), converge.ErrLeaseLost)
}

func TestStoreWatchDelegates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := &convergetest.Store{}
		var got []string
		stop, err := s.Watch(ctx, "obj/", func(k string) { got = append(got, k) })
		require.NoError(t, err)
		_, err = s.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`1`)})
		require.NoError(t, err)
		synctest.Wait()
		stop()
		assert.Equal(t, []string{"obj/a"}, got)
	})
}

// sloppyStore ignores versions on Put: last writer wins.
type sloppyStore struct{ *converge.MemStore }

func (s sloppyStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	cur, err := s.MemStore.Get(ctx, rec.Key)
	if err == nil {
		rec.Version = cur.Version
	} else {
		rec.Version = 0
	}
	return s.MemStore.Put(ctx, rec, h...)
}

// slowStore takes d for every write, as a loaded database may.
type slowStore struct {
	*converge.MemStore
	d time.Duration
}

func (s slowStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	time.Sleep(s.d)
	return s.MemStore.Put(ctx, rec, h...)
}

// Which entries the rules expect kept does not depend on how long the
// writes take: here each write takes a tenth of the retention's age, so
// the rules' writes together last many times Age (on the bubble's clock).
func TestStoreConformSlowStoreWithRetentionAge(t *testing.T) {
	for _, ret := range []converge.Retention{{Entries: -1, Age: 3 * time.Second}, {Entries: 5, Age: 3 * time.Second}} {
		t.Run(fmt.Sprintf("%+v", ret), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := slowStore{&converge.MemStore{Retention: ret}, ret.Age / 10}
				require.NoError(t, convergetest.ConformStore(context.Background(), s, convergetest.StoreConformOptions{
					Wait: time.Sleep, Retention: ret,
				}))
			})
		})
	}
}

func TestStoreConformCatchesBrokenStore(t *testing.T) {
	err := convergetest.ConformStore(context.Background(), sloppyStore{converge.NewMemStore()}, convergetest.StoreConformOptions{})
	require.ErrorIs(t, err, convergetest.ErrStoreNonConformant)
	var ce *convergetest.StoreConformanceError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "stale put", ce.Rule)
}

// brokenRules returns the rules ConformStore reports broken.
func brokenRules(t *testing.T, err error) []string {
	t.Helper()
	require.ErrorIs(t, err, convergetest.ErrStoreNonConformant)
	var me *multierror.Error
	require.ErrorAs(t, err, &me)
	var rules []string
	for _, e := range me.Errors {
		var ce *convergetest.StoreConformanceError
		require.ErrorAs(t, e, &ce)
		if !slices.Contains(rules, ce.Rule) {
			rules = append(rules, ce.Rule)
		}
	}
	return rules
}

// unfencedStore ignores fencing tokens.
type unfencedStore struct{ *converge.MemStore }

func (s unfencedStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	rec.Token = 0
	return s.MemStore.Put(ctx, rec, h...)
}

// carelessStore ignores cancelled contexts on writes.
type carelessStore struct{ *converge.MemStore }

func (s carelessStore) Put(_ context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	return s.MemStore.Put(context.Background(), rec, h...)
}

// lenientStore takes anything for JSON.
type lenientStore struct{ *converge.MemStore }

func (s lenientStore) PutTarget(ctx context.Context, name string, target json.RawMessage) (uint64, error) {
	if !json.Valid(target) {
		target = json.RawMessage(`null`)
	}
	return s.MemStore.PutTarget(ctx, name, target)
}

// forgetfulTargets numbers every target 1, as if each were the first.
type forgetfulTargets struct{ *converge.MemStore }

func (s forgetfulTargets) PutTarget(ctx context.Context, name string, target json.RawMessage) (uint64, error) {
	_, err := s.MemStore.PutTarget(ctx, name, target)
	return 1, err
}

// nullReservations stores null for a revision taken without a target.
type nullReservations struct{ *converge.MemStore }

func (s nullReservations) PutTarget(ctx context.Context, name string, target json.RawMessage) (uint64, error) {
	if len(target) == 0 {
		target = json.RawMessage(`null`)
	}
	return s.MemStore.PutTarget(ctx, name, target)
}

// sharedRevisions gives every revision to two targets.
type sharedRevisions struct{ *converge.MemStore }

func (s sharedRevisions) PutTarget(ctx context.Context, name string, target json.RawMessage) (uint64, error) {
	rev, err := s.MemStore.PutTarget(ctx, name, target)
	return (rev + 1) / 2, err
}

// subjectlessStore forgets what its history entries are about.
type subjectlessStore struct{ *converge.MemStore }

func (s subjectlessStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	h = slices.Clone(h)
	for i := range h {
		h[i].Subject = nil
	}
	return s.MemStore.Put(ctx, rec, h...)
}

// zeroSubjectStore takes a subject of command 0 for the record itself, as a
// store keeping only the command's number would.
type zeroSubjectStore struct{ *converge.MemStore }

func (s zeroSubjectStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	h = slices.Clone(h)
	for i := range h {
		if h[i].Subject != nil && *h[i].Subject == (converge.HistorySubject{}) {
			h[i].Subject = nil
		}
	}
	return s.MemStore.Put(ctx, rec, h...)
}

// anonymousStore forgets who made its transitions, on writes or, with
// onDelete, only on deletes.
type anonymousStore struct {
	*converge.MemStore
	onDelete bool
}

func anonymous(h []converge.HistoryEntry) []converge.HistoryEntry {
	h = slices.Clone(h)
	for i := range h {
		h[i].By = ""
	}
	return h
}

func (s anonymousStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	if !s.onDelete {
		h = anonymous(h)
	}
	return s.MemStore.Put(ctx, rec, h...)
}

func (s anonymousStore) Delete(ctx context.Context, key string, version uint64, h ...converge.HistoryEntry) error {
	return s.MemStore.Delete(ctx, key, version, anonymous(h)...)
}

// leakyQueue hands out due records without keeping them from others.
type leakyQueue struct{ *converge.MemStore }

func (s leakyQueue) ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]converge.Claimed, error) {
	got, err := s.MemStore.ClaimDue(ctx, prefix, owner, ttl, limit)
	for _, c := range got {
		_ = s.MemStore.Release(ctx, c.Lease)
		_ = s.MemStore.Schedule(ctx, c.Record.Key, time.Time{})
	}
	return got, err
}

// deafQueue's watches never call fn.
type deafQueue struct{ *converge.MemStore }

func (s deafQueue) Watch(ctx context.Context, prefix string, _ func(string)) (func(), error) {
	return s.MemStore.Watch(ctx, prefix, func(string) {})
}

// stubbornQueue's watches ignore stop and their context; they call fn
// from Put, before it returns.
type stubbornQueue struct {
	*converge.MemStore
	mu      sync.Mutex
	watches map[string][]func(string)
}

func newStubbornQueue() *stubbornQueue {
	return &stubbornQueue{MemStore: converge.NewMemStore(), watches: map[string][]func(string){}}
}

func (s *stubbornQueue) Watch(ctx context.Context, prefix string, fn func(string)) (func(), error) {
	s.mu.Lock()
	s.watches[prefix] = append(s.watches[prefix], fn)
	s.mu.Unlock()
	return func() {}, nil
}

func (s *stubbornQueue) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	v, err := s.MemStore.Put(ctx, rec, h...)
	if err == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		for prefix, fns := range s.watches {
			if strings.HasPrefix(rec.Key, prefix) {
				for _, fn := range fns {
					fn(rec.Key)
				}
			}
		}
	}
	return v, err
}

// halfCreator creates records one by one, so that a stored key fails a
// batch half-written.
type halfCreator struct{ *converge.MemStore }

func (s halfCreator) CreateMany(ctx context.Context, recs []converge.NewRecord) ([]uint64, error) {
	var out []uint64
	for _, r := range recs {
		v, err := s.Put(ctx, converge.StoreRecord{Key: r.Key, Value: r.Value}, r.History...)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func TestStoreConformCatchesBrokenRules(t *testing.T) {
	tests := []struct {
		name  string
		store func() converge.Store
		opts  convergetest.StoreConformOptions
		rule  string
	}{
		{"fencing ignored", func() converge.Store { return unfencedStore{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "fencing"},
		{"history kept beyond the default", func() converge.Store {
			return &converge.MemStore{Retention: converge.Retention{Entries: -1}}
		}, convergetest.StoreConformOptions{}, "retention"},
		{"history kept beyond its age", func() converge.Store {
			return &converge.MemStore{Retention: converge.Retention{Entries: 5}}
		}, convergetest.StoreConformOptions{Retention: converge.Retention{Entries: 5, Age: time.Hour}}, "retention"},
		{"history subjects dropped", func() converge.Store { return subjectlessStore{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "history subject"},
		{"subject of command 0 read as nil", func() converge.Store { return zeroSubjectStore{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "history subject"},
		{"who dropped", func() converge.Store { return anonymousStore{MemStore: converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "history by"},
		{"who dropped on delete", func() converge.Store { return anonymousStore{MemStore: converge.NewMemStore(), onDelete: true} }, convergetest.StoreConformOptions{}, "history by"},
		{"cancellation ignored", func() converge.Store { return carelessStore{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "cancellation"},
		{"invalid target taken", func() converge.Store { return lenientStore{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "invalid input"},
		{"target revisions restart", func() converge.Store { return forgetfulTargets{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "target"},
		{"revision without a target replaces it", func() converge.Store { return nullReservations{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "target revision"},
		{"revision given twice", func() converge.Store { return sharedRevisions{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "concurrent targets"},
		{"claims not exclusive", func() converge.Store { return leakyQueue{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "queue: exclusive claims"},
		{"claims taken twice", func() converge.Store { return leakyQueue{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "queue: concurrent claims"},
		{"watch never delivers", func() converge.Store { return deafQueue{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "watch"},
		{"watch ignores stop", func() converge.Store { return newStubbornQueue() }, convergetest.StoreConformOptions{}, "watch: stop"},
		{"watch ignores its context", func() converge.Store { return newStubbornQueue() }, convergetest.StoreConformOptions{}, "watch: cancel"},
		{"bulk create half-written", func() converge.Store { return halfCreator{converge.NewMemStore()} }, convergetest.StoreConformOptions{}, "create many: exists"},
		{"peer writes not seen", func() converge.Store { return converge.NewMemStore() }, convergetest.StoreConformOptions{Peer: converge.NewMemStore()}, "watch: peer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				err := convergetest.ConformStore(context.Background(), tt.store(), tt.opts)
				assert.Contains(t, brokenRules(t, err), tt.rule)
			})
		})
	}
}
