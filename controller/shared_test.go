package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/convergetest"
)

// interval is one handler run of one object by one replica.
type interval struct {
	owner      string
	start, end time.Time
}

// runLog records handler runs per key and finds overlapping ones.
type runLog struct {
	mu   sync.Mutex
	runs map[string][]interval
}

func (l *runLog) add(key string, iv interval) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[string][]interval{}
	}
	l.runs[key] = append(l.runs[key], iv)
}

// overlaps returns the keys handled by two replicas at overlapping times.
func (l *runLog) overlaps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, ivs := range l.runs {
		for i := range ivs {
			for j := i + 1; j < len(ivs); j++ {
				if ivs[i].start.Before(ivs[j].end) && ivs[j].start.Before(ivs[i].end) {
					out = append(out, fmt.Sprintf("%s: %s and %s", k, ivs[i].owner, ivs[j].owner))
				}
			}
		}
	}
	return out
}

func TestReplicasShareObjectsWithoutOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		var log runLog
		var faults atomic.Int32
		handled := map[string]*atomic.Int32{}
		replica := func(owner string, seed uint64) *controller.Controller {
			var mu sync.Mutex
			r := rand.New(rand.NewPCG(seed, 1))
			n := &atomic.Int32{}
			handled[owner] = n
			c, err := controller.New(controller.Config{
				Kind: "host", Store: store, Owner: owner, LeaseTTL: 10 * time.Second, Workers: 3,
				Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
					start := time.Now()
					time.Sleep(100 * time.Millisecond)
					defer func() { log.add(o.Key, interval{owner, start, time.Now()}) }()
					n.Add(1)
					mu.Lock()
					fault := r.Float64() < 0.3
					mu.Unlock()
					if fault {
						faults.Add(1)
						return controller.Result{}, errors.New("transient")
					}
					switch o.State {
					case "new":
						return controller.Transition("installing"), nil
					case "installing":
						return controller.Transition("ready"), nil
					}
					return controller.NoChange(), nil
				})})
			require.NoError(t, err)
			return c
		}
		a, b := replica("replica-a", 1), replica("replica-b", 2)
		for i := range 60 {
			require.NoError(t, a.Add(ctx, fmt.Sprintf("h%02d", i), "new", nil))
		}
		stopA, stopB := startController(t, a), startController(t, b)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		recs, err := store.List(ctx, "host/")
		require.NoError(t, err)
		require.Len(t, recs, 60)
		for _, rec := range recs {
			var o controller.Object
			require.NoError(t, json.Unmarshal(rec.Value, &o))
			assert.Equal(t, controller.State("ready"), o.State, rec.Key)
		}
		assert.Empty(t, log.overlaps(), "no object is handled by two replicas at once")
		assert.Positive(t, faults.Load(), "faults were injected")
		assert.Positive(t, handled["replica-a"].Load(), "replica a took a share")
		assert.Positive(t, handled["replica-b"].Load(), "replica b took a share")
		require.NoError(t, stopA())
		require.NoError(t, stopB())
	})
}

func TestReplicaEnqueueWakesTheOtherReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		runs := map[string]*atomic.Int32{"a": {}, "b": {}}
		replica := func(owner string) *controller.Controller {
			c, err := controller.New(controller.Config{
				Kind: "host", Store: store, Owner: owner, Poll: time.Hour, Resync: time.Hour,
				Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
					runs[owner].Add(1)
					return controller.NoChange(), nil
				})})
			require.NoError(t, err)
			return c
		}
		a, b := replica("a"), replica("b")
		require.NoError(t, a.Add(ctx, "h1", "ready", nil))
		stopA := startController(t, a)
		synctest.Wait()
		require.Equal(t, int32(1), runs["a"].Load(), "a handles the new object at once")
		require.NoError(t, stopA())
		stopB := startController(t, b)
		synctest.Wait()
		require.Equal(t, int32(0), runs["b"].Load(), "not due for an hour")

		require.NoError(t, a.Enqueue(ctx, "h1"), "a stopped, yet its Enqueue reaches the store")
		synctest.Wait()
		assert.Equal(t, int32(1), runs["b"].Load(), "b is woken by the store's watch, not by its hourly poll")

		err := a.Enqueue(ctx, "missing")
		require.ErrorIs(t, err, controller.ErrObjectNotFound)
		var oe *controller.ObjectError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, "missing", oe.Key)

		require.NoError(t, a.Request(ctx, "h1", "reinstall"))
		synctest.Wait()
		assert.Equal(t, int32(2), runs["b"].Load(), "a request is an enqueue too")
		require.NoError(t, stopB())
	})
}

func TestReplicaTakesOverExpiredLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		var handled atomic.Int32
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Owner: "replica-a", LeaseTTL: 45 * time.Second,
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				handled.Add(1)
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "ready", nil))
		// A replica that claimed the object and died.
		dead, err := store.ClaimDue(ctx, "vm/", "replica-dead", 45*time.Second, 10)
		require.NoError(t, err)
		require.Len(t, dead, 1)
		start := time.Now()
		stop := startController(t, c)
		synctest.Wait()
		assert.Equal(t, int32(0), handled.Load(), "held by the dead replica")
		for handled.Load() == 0 {
			time.Sleep(time.Second)
		}
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, 45*time.Second, "not before the lease expired")
		assert.LessOrEqual(t, took, 2*45*time.Second, "taken over within 2×TTL")
		require.ErrorIs(t, store.Finish(ctx, dead[0].Lease, time.Time{}), converge.ErrLeaseLost, "the dead replica's lease is gone")
		require.NoError(t, stop())
	})
}

func TestReplicaRenewsLeaseOfLongHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		release := make(chan struct{})
		var handled atomic.Int32
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Owner: "replica-a", LeaseTTL: 10 * time.Second,
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				if o.State == "done" {
					return controller.NoChange(), nil
				}
				if handled.Add(1) == 1 {
					<-release // a handler running for many lease durations
				}
				return controller.Transition("done"), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "new", nil))
		stop := startController(t, c)
		time.Sleep(time.Minute)
		got, err := store.ClaimDue(ctx, "vm/", "replica-b", time.Minute, 10)
		require.NoError(t, err)
		assert.Empty(t, got, "the lease is renewed while the handler runs")
		_, err = store.Claim(ctx, "vm/a", "replica-b", time.Minute)
		require.ErrorIs(t, err, converge.ErrClaimHeld)
		close(release)
		synctest.Wait()
		o, ok := c.Get("a")
		require.True(t, ok)
		assert.Equal(t, controller.State("done"), o.State, "the write after a long run is accepted: the lease is still ours")
		require.NoError(t, stop())
	})
}

func TestReplicaStopHandsBackClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		var started atomic.Int32
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Owner: "replica-a", LeaseTTL: time.Hour, Workers: 1,
			ShutdownTimeout: time.Second,
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				started.Add(1)
				<-ctx.Done() // runs until the shutdown timeout cancels it
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		for i := range 3 {
			require.NoError(t, c.Add(ctx, fmt.Sprintf("o%d", i), "ready", nil))
		}
		stop := startController(t, c)
		synctest.Wait()
		require.Equal(t, int32(1), started.Load(), "one worker")
		require.ErrorIs(t, stop(), controller.ErrShutdownTimeout)
		assert.Equal(t, int32(1), started.Load(), "a claim waiting for a worker is not started once stopping")
		// Every claim was finished: another replica takes the objects at
		// once, without waiting an hour for the leases to expire.
		got, err := store.ClaimDue(ctx, "vm/", "replica-b", time.Minute, 10)
		require.NoError(t, err)
		assert.Len(t, got, 2, "the two objects that waited for a worker are due at once")
		for i := range 3 {
			_, err := store.Claim(ctx, fmt.Sprintf("vm/o%d", i), "replica-c", time.Minute)
			if i == 0 {
				require.NoError(t, err, "the handled object's lease was released")
			}
		}
	})
}

func TestReplicaNeedsQueueStore(t *testing.T) {
	h := controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
		return controller.NoChange(), nil
	})
	_, err := controller.New(controller.Config{Kind: "vm", Handler: h, Owner: "a", Store: storeOnly{converge.NewMemStore()}})
	var ce *converge.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Store", ce.Field)
	_, err = controller.New(controller.Config{Kind: "vm", Handler: h, Owner: "a"})
	require.NoError(t, err, "the default MemStore is a Queue")
}

// storeOnly hides every method but those of converge.Store.
type storeOnly struct{ converge.Store }

// leaseRun is a replica "a" whose handler blocks until its context ends,
// on a MemStore whose clock the test can step, with metrics and a log.
type leaseRun struct {
	store   *converge.MemStore
	faults  *convergetest.FaultStore
	metrics *convergetest.Metrics
	logs    *syncBuffer
	started chan time.Time
	ended   chan error // the cause of the handler's cancelled context
	storeAt atomic.Int64
}

func newLeaseRun(t *testing.T, ttl, deadline time.Duration, ignoreCtx func() bool) (*leaseRun, *controller.Controller) {
	r := &leaseRun{metrics: &convergetest.Metrics{}, logs: &syncBuffer{}, started: make(chan time.Time, 10), ended: make(chan error, 10)}
	r.store = &converge.MemStore{Now: func() time.Time { return time.Now().Add(time.Duration(r.storeAt.Load())) }}
	r.faults = convergetest.NewFaultStore(r.store)
	c, err := controller.New(controller.Config{
		Kind: "vm", Store: r.faults, Owner: "a", LeaseTTL: ttl, RenewDeadline: deadline, Workers: 1,
		Metrics: r.metrics, Logger: slog.New(slog.NewTextHandler(r.logs, nil)),
		Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
			r.started <- time.Now()
			<-ctx.Done()
			if ignoreCtx != nil && ignoreCtx() {
				time.Sleep(time.Hour)
			}
			r.ended <- context.Cause(ctx)
			return controller.Transition("done"), nil
		})})
	require.NoError(t, err)
	require.NoError(t, c.Add(context.Background(), "x", "new", nil))
	return r, c
}

// endedWithin returns the cause the handler saw its context cancelled
// with, failing the test when it did not end within d.
func (r *leaseRun) endedWithin(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case cause := <-r.ended:
		return cause
	case <-time.After(d):
		require.FailNow(t, "the handler was not cancelled", "within %s", d)
		return nil
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestReplicaCutOffStopsHandlerAtRenewDeadline(t *testing.T) {
	for _, mode := range []convergetest.PartitionMode{convergetest.PartitionFail, convergetest.PartitionHang} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				const ttl, deadline = 30 * time.Second, 20 * time.Second
				r, c := newLeaseRun(t, ttl, deadline, nil)
				before, err := r.store.Get(ctx, "vm/x")
				require.NoError(t, err)
				claimed := time.Now()
				stop := startController(t, c)
				started := <-r.started
				r.faults.Partition(mode)  // every renewal from now on fails or hangs
				r.faults.Step(-time.Hour) // the replica's wall clock steps back: no matter
				cause := r.endedWithin(t, ttl)
				assert.Equal(t, deadline, time.Since(claimed), "cancelled at the renew deadline, counted from the claim")
				assert.Less(t, time.Since(started), ttl, "before the lease can expire")
				require.ErrorIs(t, cause, converge.ErrLeaseLost)
				assert.Contains(t, cause.Error(), "not renewed within 20s")

				// The replica writes nothing more: the lease expires in the
				// store as it was, the record is as it was, and another
				// replica takes the object over once the lease expired.
				time.Sleep(ttl)
				synctest.Wait()
				after, err := r.store.Get(ctx, "vm/x")
				require.NoError(t, err)
				assert.Equal(t, before.Version, after.Version, "the handler's transition after the deadline is not written")
				got, err := r.store.ClaimDue(ctx, "vm/", "b", ttl, 10)
				require.NoError(t, err)
				assert.Len(t, got, 1, "the lease expired untouched, the object is due for another replica")
				assert.Zero(t, r.metrics.Value(controller.MetricHandlerOverruns.Name, "vm", "new"), "the handler honoured its context")
				r.faults.Heal()
				require.NoError(t, stop())
			})
		})
	}
}

func TestReplicaReportsHandlerIgnoringItsCancelledContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl, deadline = 30 * time.Second, 20 * time.Second
		var ignore atomic.Bool
		ignore.Store(true)
		r, c := newLeaseRun(t, ttl, deadline, ignore.Load)
		stop := startController(t, c)
		<-r.started
		r.faults.Partition(convergetest.PartitionFail)
		time.Sleep(ttl - time.Second)
		synctest.Wait()
		assert.Zero(t, r.metrics.Value(controller.MetricHandlerOverruns.Name, "vm", "new"), "not before the lease may expire")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, 1.0, r.metrics.Value(controller.MetricHandlerOverruns.Name, "vm", "new"), "the handler still runs when the lease may have expired")
		assert.Contains(t, r.logs.String(), "level=ERROR")
		assert.Contains(t, r.logs.String(), "handler ignored its cancelled context")
		assert.Contains(t, r.logs.String(), "key=x")
		r.faults.Heal()
		<-r.ended
		require.NoError(t, stop())
	})
}

// TestReplicaClaimHeldCancelsHandler: a renewal that finds the lease
// held by another owner (the store's clock ran ahead, so the lease
// expired there and another replica claimed it) cancels the handler at
// once, not at the renew deadline, and writes nothing.
func TestReplicaClaimHeldCancelsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const ttl, deadline = 30 * time.Second, 20 * time.Second
		r, c := newLeaseRun(t, ttl, deadline, nil)
		before, err := r.store.Get(ctx, "vm/x")
		require.NoError(t, err)
		stop := startController(t, c)
		started := <-r.started
		r.storeAt.Store(int64(ttl)) // the store's clock jumps past the lease
		b, err := r.store.Claim(ctx, "vm/x", "b", time.Hour)
		require.NoError(t, err, "the lease expired in the store")
		cause := r.endedWithin(t, deadline)
		assert.Equal(t, deadline/2, time.Since(started), "cancelled by the first renewal, which found b's lease")
		require.ErrorIs(t, cause, converge.ErrLeaseLost)
		synctest.Wait()
		after, err := r.store.Get(ctx, "vm/x")
		require.NoError(t, err)
		assert.Equal(t, before.Version, after.Version, "nothing written")
		require.NoError(t, r.store.Finish(ctx, b, time.Time{}), "b's lease is untouched")
		require.NoError(t, stop())
	})
}

// reclaimQueue is a Queue whose Claim of "vm/b" by replica "a" waits
// until a ClaimDue has handed "vm/b" out a second time.
type reclaimQueue struct {
	converge.Queue
	mu        sync.Mutex
	claimedB  int
	reclaimed chan struct{}
}

func (q *reclaimQueue) ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]converge.Claimed, error) {
	got, err := q.Queue.ClaimDue(ctx, prefix, owner, ttl, limit)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, cl := range got {
		if cl.Lease.Key == "vm/b" {
			if q.claimedB++; q.claimedB == 2 {
				close(q.reclaimed)
			}
		}
	}
	return got, err
}

func (q *reclaimQueue) Claim(ctx context.Context, key, owner string, ttl time.Duration) (converge.Lease, error) {
	if key == "vm/b" && owner == "a" {
		select {
		case <-q.reclaimed:
		case <-ctx.Done():
			return converge.Lease{}, ctx.Err()
		}
	}
	return q.Queue.Claim(ctx, key, owner, ttl)
}

// TestReplicaWaitingClaimKeepsItsOwnNewerLease: a claim that waited for a
// worker until its lease expired, while the replica claimed the object
// again, finds the newer lease on renewing. That lease is the replica's
// own newer claim, about to be handled by a worker: it must not be given
// back, or another replica would take the object while this one handles
// it (the overlap the pgstore partition checker found).
func TestReplicaWaitingClaimKeepsItsOwnNewerLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const ttl, deadline = 30 * time.Second, 20 * time.Second
		mem := converge.NewMemStore()
		q := &reclaimQueue{Queue: mem, reclaimed: make(chan struct{})}
		started := make(chan string, 10)
		release := make(chan struct{})
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: q, Owner: "a", LeaseTTL: ttl, RenewDeadline: deadline, Workers: 1,
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				started <- o.Key
				if o.Key == "a" {
					// Holds the only worker, its lease renewed, past the
					// expiry of b's lease.
					time.Sleep(ttl + 5*time.Second)
					return controller.NoChange().After(time.Hour), nil
				}
				select {
				case <-ctx.Done():
				case <-release:
				}
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "new", nil))
		time.Sleep(time.Millisecond) // b is due after a
		require.NoError(t, c.Add(ctx, "b", "new", nil))
		stop := startController(t, c)
		require.Equal(t, "a", <-started)
		// b's first claim waited for the worker while a ran; its lease
		// expired and the replica claimed b again, before the first claim
		// was renewed.
		require.Equal(t, "b", <-started)
		synctest.Wait()
		_, err = mem.Claim(ctx, "vm/b", "b", ttl)
		require.ErrorIs(t, err, converge.ErrClaimHeld, "b is handled by a under its newer lease: nobody else may take it")
		got, err := mem.ClaimDue(ctx, "vm/", "b", ttl, 10)
		require.NoError(t, err)
		assert.Empty(t, got)
		close(release)
		require.NoError(t, stop())
	})
}

// TestReplicaReadsHistoryWithTheClaim checks that a replica shows its
// handler the history that ClaimDue returned with the object, with no
// History call, when the object was written by another controller (so
// this one has no copy of its history); and that it reads the history
// when the claim does not carry enough of it.
func TestReplicaReadsHistoryWithTheClaim(t *testing.T) {
	for _, tc := range []struct {
		name     string
		entries  int // transitions before the replica starts
		handler  int // Config.HandlerHistory
		readsOne bool
	}{
		{"short history", 3, 0, false},
		{"more than the claim carries", converge.ClaimHistoryEntries + 4, 0, false},
		{"handler wants more than the claim carries", converge.ClaimHistoryEntries + 4, converge.ClaimHistoryEntries + 2, true},
		{"handler wants more, history is whole", 5, converge.ClaimHistoryEntries + 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				store := &convergetest.Store{}
				for i := range tc.entries {
					// Another controller's transitions.
					rec := converge.StoreRecord{Key: "host/h1", Value: json.RawMessage(`{"state":"s"}`)}
					if i > 0 {
						cur, err := store.Get(ctx, rec.Key)
						require.NoError(t, err)
						rec.Version = cur.Version
					}
					_, err := store.Put(ctx, rec, converge.HistoryEntry{At: time.Now(), From: fmt.Sprint(i - 1), To: fmt.Sprint(i)})
					require.NoError(t, err)
				}
				want, err := store.History(ctx, "host/h1")
				require.NoError(t, err)
				n := cmpOr(tc.handler, controller.DefaultHandlerHistory)
				want = want[max(len(want)-n, 0):]
				seen := make(chan []converge.HistoryEntry, 1)
				c, err := controller.New(controller.Config{
					Kind: "host", Store: store, Owner: "a", Poll: time.Hour, Resync: time.Hour, HandlerHistory: tc.handler,
					Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
						select {
						case seen <- o.History:
						default:
						}
						return controller.NoChange().After(time.Hour), nil
					})})
				require.NoError(t, err)
				before := store.Calls(convergetest.OpHistory)
				stop := startController(t, c)
				synctest.Wait()
				got := <-seen
				require.NoError(t, stop())
				assert.Len(t, got, len(want))
				for i := range min(len(got), len(want)) {
					assert.Equal(t, want[i].To, got[i].To, "entry %d", i)
				}
				calls := store.Calls(convergetest.OpHistory) - before
				if tc.readsOne {
					assert.Equal(t, 1, calls, "the claim carried too few entries: History read once")
				} else {
					assert.Zero(t, calls, "the history came with the claim")
				}
			})
		})
	}
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// slowFinish is a Queue whose Finish waits until release is closed.
type slowFinish struct {
	*converge.MemStore
	release  chan struct{}
	finishes atomic.Int32
}

func (s *slowFinish) Finish(ctx context.Context, l converge.Lease, next time.Time) error {
	s.finishes.Add(1)
	<-s.release
	return s.MemStore.Finish(ctx, l, next)
}

// TestReplicaWorkerDoesNotWaitForFinish checks that a worker takes its
// next object while the Finish of its last one is on its way, the lease
// held until then, and that Run waits for the Finish before it returns.
// With one worker, the second object was handled only once the first
// Finish returned.
func TestReplicaWorkerDoesNotWaitForFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &slowFinish{MemStore: converge.NewMemStore(), release: make(chan struct{})}
		var handled atomic.Int32
		c, err := controller.New(controller.Config{
			Kind: "host", Store: store, Owner: "a", Workers: 1, Poll: time.Hour, Resync: time.Hour,
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				handled.Add(1)
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "h1", "ready", nil))
		require.NoError(t, c.Add(ctx, "h2", "ready", nil))
		stop := startController(t, c)
		synctest.Wait()
		assert.Equal(t, int32(2), handled.Load(), "the one worker handled both objects")
		assert.Equal(t, int32(2), store.finishes.Load(), "both Finish calls are on their way")
		_, err = store.Claim(ctx, "host/h1", "b", time.Minute)
		require.ErrorIs(t, err, converge.ErrClaimHeld, "the lease is held until the Finish commits")

		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		synctest.Wait()
		select {
		case err := <-stopped:
			t.Fatalf("Run returned (%v) before its Finish calls did", err)
		default:
		}
		close(store.release)
		require.NoError(t, <-stopped)
		claimed, err := store.ClaimDue(ctx, "host/", "b", time.Minute, 10)
		require.NoError(t, err)
		assert.Empty(t, claimed, "both finished, due in an hour")
	})
}

// slowList is a Queue whose List waits until release is closed.
type slowList struct {
	*converge.MemStore
	release chan struct{}
}

func (s *slowList) List(ctx context.Context, prefix string) ([]converge.StoreRecord, error) {
	<-s.release
	return s.MemStore.List(ctx, prefix)
}

// TestReplicaWorksBeforeItHasListedEveryObject checks that a replica
// handles its first object without waiting for the list of every stored
// object (its view is loaded meanwhile): resuming on a large store, it
// waited for a List of all of them first.
func TestReplicaWorksBeforeItHasListedEveryObject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &slowList{MemStore: converge.NewMemStore(), release: make(chan struct{})}
		var handled atomic.Int32
		c, err := controller.New(controller.Config{
			Kind: "host", Store: store, Owner: "a", Poll: time.Hour, Resync: time.Hour,
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				handled.Add(1)
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		loader, err := controller.New(controller.Config{Kind: "host", Store: store.MemStore, Handler: controller.HandlerFunc(
			func(context.Context, controller.Object) (controller.Result, error) { return controller.NoChange(), nil })})
		require.NoError(t, err)
		for _, k := range []string{"h1", "h2"} {
			require.NoError(t, loader.Add(ctx, k, "ready", nil))
		}
		stop := startController(t, c)
		synctest.Wait()
		assert.Equal(t, int32(2), handled.Load(), "handled while the List waits")
		close(store.release)
		synctest.Wait()
		assert.Equal(t, 2, c.Len(), "the view is loaded")
		require.NoError(t, stop())
	})
}

// limitQueue is a Queue that records the limit of every ClaimDue.
type limitQueue struct {
	*converge.MemStore
	mu     sync.Mutex
	limits []int
}

func (q *limitQueue) ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]converge.Claimed, error) {
	q.mu.Lock()
	q.limits = append(q.limits, limit)
	q.mu.Unlock()
	return q.MemStore.ClaimDue(ctx, prefix, owner, ttl, limit)
}

func (q *limitQueue) seen() []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]int(nil), q.limits...)
}

// TestReplicaClaimsTwiceItsWorkersAtOnce checks that a replica claims
// 2×Workers objects at a time, and only once none of the objects it holds
// waits to start and it holds at most 2×Workers: a replica that claimed
// whenever Workers places were free made a round trip per Workers
// objects, and with slow handlers no more than 2×Workers objects wait
// behind them, under lease, while another replica might run them.
func TestReplicaClaimsTwiceItsWorkersAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const workers, objects = 2, 40
		store := &limitQueue{MemStore: converge.NewMemStore()}
		gate := make(chan struct{})
		var handled atomic.Int32
		c, err := controller.New(controller.Config{
			Kind: "host", Store: store, Owner: "a", Workers: workers, Poll: time.Hour, Resync: time.Hour,
			Handler: controller.HandlerFunc(func(ctx context.Context, _ controller.Object) (controller.Result, error) {
				select {
				case <-gate:
				case <-ctx.Done():
					return controller.Result{}, ctx.Err()
				}
				handled.Add(1)
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		for i := range objects {
			require.NoError(t, c.Add(ctx, fmt.Sprintf("h%02d", i), "ready", nil))
		}
		stop := startController(t, c)
		synctest.Wait()
		assert.Equal(t, []int{2 * workers}, store.seen(), "the first claim asks for 2×Workers")
		for range workers - 1 {
			gate <- struct{}{}
			synctest.Wait()
		}
		assert.Len(t, store.seen(), 1, "no claim while a claimed object waits to start")
		gate <- struct{}{}
		synctest.Wait()
		assert.Equal(t, []int{2 * workers, 2 * workers}, store.seen(), "a claim once every claimed object has started")
		close(gate)
		synctest.Wait()
		assert.Equal(t, int32(objects), handled.Load())
		for i, l := range store.seen() {
			assert.Equal(t, 2*workers, l, "claim %d", i)
		}
		require.NoError(t, stop())
	})
}
