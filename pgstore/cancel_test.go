package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// cancelRun is one handler run of TestCancelAcrossThreeReplicas.
type cancelRun struct {
	owner string
	ended time.Time // when its context ended; zero while it runs
	cause error
}

// TestCancelAcrossThreeReplicas runs 3 controller replicas, each on its
// own store (its own pool and LISTEN connection), whose handlers block
// until their context ends, and cancels every object through a fourth
// store, as an operator's tool would: each running handler's context
// ends with ErrCancelled within a second, on whichever replica holds it,
// carried by the store's watch; objects claimed and waiting to start
// never start; every object is halted with a history entry naming who
// asked. It logs the latencies (from the call to Cancel to the end of
// the handler's context).
func TestCancelAcrossThreeReplicas(t *testing.T) {
	t.Parallel()
	const objects, workers = 24, 4
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	admin := open(t, dsn, pgstore.Options{})
	var mu sync.Mutex
	runs := map[string][]*cancelRun{}
	started := make(chan struct{}, objects)
	for i := range 3 {
		owner := fmt.Sprintf("replica-%d", i)
		st := open(t, dsn, pgstore.Options{})
		c, err := controller.New(controller.Config{
			Kind: "host", Store: st, Owner: owner, Workers: workers, Poll: 50 * time.Millisecond,
			Resync: time.Hour, ShutdownTimeout: time.Second,
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				r := &cancelRun{owner: owner}
				mu.Lock()
				runs[o.Key] = append(runs[o.Key], r)
				mu.Unlock()
				started <- struct{}{}
				<-ctx.Done()
				mu.Lock()
				r.ended, r.cause = time.Now(), context.Cause(ctx)
				mu.Unlock()
				return controller.Result{}, ctx.Err()
			}),
		})
		require.NoError(t, err)
		rctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
	}
	objs := make([]controller.NewObject, objects)
	for i := range objs {
		objs[i] = controller.NewObject{Key: fmt.Sprintf("h%02d", i), State: "flashing"}
	}
	require.NoError(t, controller.AddObjects(ctx, admin, "host", objs))
	// 3 replicas of 4 workers run 12 handlers at once; the others wait,
	// claimed or not.
	for range 3 * workers {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the handlers did not start")
		}
	}
	time.Sleep(200 * time.Millisecond) // let the claims settle: no more start
	mu.Lock()
	running := map[string]time.Time{}
	owners := map[string]bool{}
	for key, rs := range runs {
		running[key] = time.Time{}
		owners[rs[0].owner] = true
	}
	mu.Unlock()
	require.Len(t, running, 3*workers)
	require.Len(t, owners, 3, "every replica runs handlers")

	asked := map[string]time.Time{}
	for _, o := range objs {
		asked[o.Key] = time.Now()
		require.NoError(t, controller.Cancel(ctx, admin, "host", o.Key, "ops@example.com"))
	}
	var latencies []time.Duration
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for key := range running {
			if runs[key][0].ended.IsZero() {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "every running handler's context ends")
	mu.Lock()
	for key := range running {
		r := runs[key][0]
		assert.ErrorIs(t, r.cause, controller.ErrCancelled, "%s on %s", key, r.owner)
		latencies = append(latencies, r.ended.Sub(asked[key]))
	}
	mu.Unlock()
	slices.Sort(latencies)
	t.Logf("cancel latency across 3 replicas, %d running handlers: min %s, median %s, max %s",
		len(latencies), latencies[0], latencies[len(latencies)/2], latencies[len(latencies)-1])
	assert.Less(t, latencies[len(latencies)-1], time.Second, "within a second")

	// An object claimed and waiting to start never starts, or (when
	// another object's cancel freed its worker before its own was
	// heard) its context ends as it starts; none runs twice.
	time.Sleep(500 * time.Millisecond)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range runs {
			for _, r := range rs {
				if r.ended.IsZero() {
					return false
				}
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "every handler that started was cancelled")
	mu.Lock()
	for key, rs := range runs {
		assert.Len(t, rs, 1, "%s runs once: cancelled objects are not run again", key)
		for _, r := range rs {
			assert.ErrorIs(t, r.cause, controller.ErrCancelled, key)
		}
	}
	mu.Unlock()
	for _, o := range objs {
		rec, err := admin.Get(ctx, "host/"+o.Key)
		require.NoError(t, err)
		assert.Contains(t, string(rec.Value), `"halted":"cancelled"`, o.Key)
		hist, err := admin.History(ctx, "host/"+o.Key)
		require.NoError(t, err)
		last := hist[len(hist)-1]
		assert.Equal(t, converge.HistoryEntry{At: last.At, From: "flashing", To: "flashing", Reason: controller.ReasonCancelled, By: "ops@example.com"}, last)
	}
}
