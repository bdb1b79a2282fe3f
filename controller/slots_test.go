package controller_test

import (
	"context"
	"fmt"
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

// heldPut is a MemStore whose Puts of key (any key when key is ""), once
// armed, wait until release is closed; started is closed when the first
// of them starts.
type heldPut struct {
	*converge.MemStore
	key              string
	armed            atomic.Bool
	started, release chan struct{}
	once             sync.Once
}

func newHeldPut(key string) *heldPut {
	return &heldPut{MemStore: converge.NewMemStore(), key: key, started: make(chan struct{}), release: make(chan struct{})}
}

func (s *heldPut) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	if (s.key == "" || rec.Key == s.key) && s.armed.Load() {
		s.once.Do(func() { close(s.started) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return s.MemStore.Put(ctx, rec, h...)
}

// concurrency counts the handlers running at once and the most seen.
type concurrency struct{ now, most atomic.Int32 }

func (c *concurrency) enter() {
	n := c.now.Add(1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
}

func (c *concurrency) leave() { c.now.Add(-1) }

// TestReplicaHandlerSlotIsFreeWhileItsWriteCommits: with one worker, the
// next claimed object's handler runs while the write of what the first
// object's handler returned waits for the store; the first object then
// goes on once its write commits. One handler runs at a time throughout.
func TestReplicaHandlerSlotIsFreeWhileItsWriteCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := newHeldPut("vm/a")
		var running concurrency
		var mu sync.Mutex
		var runs []string
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Owner: "r", Workers: 1,
			Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
				running.enter()
				defer running.leave()
				mu.Lock()
				runs = append(runs, o.Key+":"+string(o.State))
				mu.Unlock()
				if o.State == "new" {
					return controller.Transition("done"), nil
				}
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "new", nil))
		time.Sleep(time.Millisecond) // b is due after a
		require.NoError(t, c.Add(ctx, "b", "new", nil))
		store.armed.Store(true) // a's transition waits for the store
		stop := startController(t, c)
		<-store.started
		synctest.Wait()
		mu.Lock()
		assert.Equal(t, []string{"a:new", "b:new", "b:done"}, runs, "b ran while a's write waited for the store")
		mu.Unlock()
		close(store.release)
		synctest.Wait()
		mu.Lock()
		assert.Equal(t, []string{"a:new", "b:new", "b:done", "a:done"}, runs, "a went on once its write committed")
		mu.Unlock()
		assert.Equal(t, int32(1), running.most.Load(), "one handler at a time")
		require.NoError(t, stop())
	})
}

// TestReplicaRunsAtMostWorkersHandlers: a replica runs at most Workers
// handlers at once, whatever it holds; the claimed objects waiting for a
// handler are its queue depth, and they start in the order they were
// due.
func TestReplicaRunsAtMostWorkersHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const workers, objects = 2, 9
		m := &convergetest.Metrics{}
		var running concurrency
		release := make(chan struct{})
		var mu sync.Mutex
		var order []string
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: converge.NewMemStore(), Owner: "r", Workers: workers, Metrics: m,
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				running.enter()
				defer running.leave()
				mu.Lock()
				order = append(order, o.Key)
				mu.Unlock()
				select {
				case <-release:
				case <-ctx.Done():
				}
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		var want []string
		for i := range objects {
			key := fmt.Sprintf("o%d", i)
			want = append(want, key)
			require.NoError(t, c.Add(ctx, key, "new", nil))
			time.Sleep(time.Millisecond) // due in this order
		}
		stop := startController(t, c)
		synctest.Wait()
		assert.Equal(t, int32(workers), running.now.Load(), "Workers handlers run")
		assert.Equal(t, float64(2*workers-workers), m.Value(controller.MetricQueueDepth.Name, "vm"),
			"the other claimed objects wait for a handler")
		close(release)
		synctest.Wait()
		mu.Lock()
		assert.Equal(t, want, order, "objects start in the order they were due")
		mu.Unlock()
		assert.Equal(t, int32(workers), running.most.Load(), "never more than Workers handlers at once")
		assert.Zero(t, m.Value(controller.MetricQueueDepth.Name, "vm"), "nothing waits at the end")
		require.NoError(t, stop())
	})
}

// TestReplicaStopStartsNoWaitingHandler: once a replica is stopping, an
// object that has returned from its handler and wrote a transition does
// run its handler again: it is handed back, due at once, like an object
// that never started.
func TestReplicaStopStartsNoWaitingHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := newHeldPut("vm/a")
		var mu sync.Mutex
		var runs []string
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Owner: "r", Workers: 1, LeaseTTL: time.Hour, ShutdownTimeout: time.Minute,
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				mu.Lock()
				runs = append(runs, o.Key+":"+string(o.State))
				mu.Unlock()
				if o.Key == "b" {
					<-ctx.Done() // holds the only slot until the shutdown timeout
					return controller.NoChange(), nil
				}
				if o.State == "new" {
					return controller.Transition("done"), nil
				}
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "new", nil))
		time.Sleep(time.Millisecond)
		require.NoError(t, c.Add(ctx, "b", "new", nil))
		store.armed.Store(true)
		stop := startController(t, c)
		<-store.started // a's write waits; b holds the slot
		synctest.Wait()
		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		synctest.Wait()
		close(store.release) // a's write commits while the replica stops
		require.ErrorIs(t, <-stopped, controller.ErrShutdownTimeout, "b ran until the shutdown timeout")
		mu.Lock()
		assert.Equal(t, []string{"a:new", "b:new"}, runs, "a's handler did not run again once stopping")
		mu.Unlock()
		rec, err := store.Get(ctx, "vm/a")
		require.NoError(t, err)
		assert.Contains(t, string(rec.Value), `"done"`, "a's transition was written")
		got, err := store.ClaimDue(ctx, "vm/", "other", time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, got, 1, "a is handed back, due at once")
		assert.Equal(t, "vm/a", got[0].Lease.Key)
	})
}

// TestReplicaRenewsAClaimThatWaitedPastTheRenewDeadline: with one worker
// held past the renew deadline by the first object, the third object
// waited for its turn to start (behind the second, whose lease is renewed
// while it waits for the worker) longer than the renew deadline but not
// the lease's TTL: its lease is renewed before it goes on, so it runs as
// soon as the worker is free and is finished, not left to expire. (Left
// to keep alone, such a claim lost the lease or kept it depending on
// which of keep's timers fired first: the test runs several times.)
func TestReplicaRenewsAClaimThatWaitedPastTheRenewDeadline(t *testing.T) {
	for range 6 {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			const ttl, deadline, held = 30 * time.Second, 20 * time.Second, 25 * time.Second
			store := converge.NewMemStore()
			var mu sync.Mutex
			started := map[string]time.Duration{}
			var begin time.Time
			c, err := controller.New(controller.Config{
				Kind: "vm", Store: store, Owner: "r", Workers: 1, LeaseTTL: ttl, RenewDeadline: deadline,
				Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
					mu.Lock()
					started[o.Key] = time.Since(begin)
					mu.Unlock()
					if o.Key == "a" {
						time.Sleep(held)
					}
					return controller.NoChange().After(time.Hour), nil
				})})
			require.NoError(t, err)
			for _, key := range []string{"a", "b", "c"} {
				require.NoError(t, c.Add(ctx, key, "new", nil))
				time.Sleep(time.Millisecond) // due in this order
			}
			begin = time.Now()
			stop := startController(t, c)
			time.Sleep(held + time.Second)
			synctest.Wait()
			mu.Lock()
			assert.Less(t, started["b"], held+time.Second, "b ran once a returned")
			at, ok := started["c"]
			mu.Unlock()
			require.True(t, ok, "c ran")
			assert.Less(t, at, held+time.Second, "c ran once b returned")
			_, err = store.Claim(ctx, "vm/c", "other", ttl)
			require.NoError(t, err, "c was finished under its renewed lease, which is released")
			require.NoError(t, stop())
		})
	}
}

// TestReplicaClaimsWhileItsObjectsWrite: objects whose handler has
// returned and whose write waits for the store do not hold back the next
// claim (they wait for no worker), up to 4×Workers objects held; then the
// replica claims no more until some finish.
func TestReplicaClaimsWhileItsObjectsWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const workers, objects = 2, 20
		store := newHeldPut("") // every transition waits for the store
		m := &convergetest.Metrics{}
		var started atomic.Int32
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Owner: "r", Workers: workers, Poll: time.Hour, Resync: time.Hour, Metrics: m,
			Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
				if o.State == "new" {
					started.Add(1)
					return controller.Transition("done"), nil
				}
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		for i := range objects {
			require.NoError(t, c.Add(ctx, fmt.Sprintf("o%02d", i), "new", nil))
		}
		store.armed.Store(true)
		stop := startController(t, c)
		synctest.Wait()
		assert.Equal(t, int32(4*workers), started.Load(), "two claims of 2×Workers, all writing at once")
		assert.Equal(t, float64(4*workers), m.Value(controller.MetricQueueAdds.Name, "vm"), "no more than 4×Workers held")
		close(store.release)
		synctest.Wait()
		assert.Equal(t, int32(objects), started.Load(), "the rest once the writes committed")
		require.NoError(t, stop())
	})
}
