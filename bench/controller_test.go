package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	k8sworkqueue "k8s.io/client-go/util/workqueue"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
)

const fleetSize = 100_000

func fleetKeys() []string {
	keys := make([]string, fleetSize)
	for i := range keys {
		keys[i] = fmt.Sprintf("obj-%06d", i)
	}
	return keys
}

// batchCounter counts reconciles and wakes the benchmark when a batch is
// complete.
type batchCounter struct {
	n      atomic.Int64
	target atomic.Int64
	done   chan struct{}
}

func newBatchCounter() *batchCounter { return &batchCounter{done: make(chan struct{}, 1)} }

// expect sets how many reconciles in total complete the next batch.
func (c *batchCounter) expect(total int64) { c.target.Store(total) }

// reconcile is the no-op reconcile both queues call.
func (c *batchCounter) reconcile() {
	if c.n.Add(1) == c.target.Load() {
		c.done <- struct{}{}
	}
}

// BenchmarkControllerThroughput: 100,000 objects, a no-op handler that
// returns NoChange, 8 workers; each op enqueues every object once and waits
// until all are handled.
func BenchmarkControllerThroughput(b *testing.B) { benchControllerThroughput(b, nil) }

// BenchmarkControllerThroughputDurable is BenchmarkControllerThroughput with
// the objects kept in a boltstore file; compare with the in-memory figure.
func BenchmarkControllerThroughputDurable(b *testing.B) {
	st, err := boltstore.Open(filepath.Join(b.TempDir(), "fleet.db"), boltstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	benchControllerThroughput(b, st)
}

// benchControllerThroughput runs the throughput load on a controller over
// st (nil: its in-memory store). The objects are added by 64 goroutines, so
// that a durable store's writes share commits.
func benchControllerThroughput(b *testing.B, st converge.Store) {
	ctx := context.Background()
	keys := fleetKeys()
	cnt := newBatchCounter()
	cnt.expect(fleetSize) // the first pass of Run
	c, err := controller.New(controller.Config{
		Kind: "obj", Workers: 8, Resync: time.Hour, Store: st,
		Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
			cnt.reconcile()
			return controller.NoChange(), nil
		}),
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := addAll(ctx, c, keys); err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(runCtx) }()
	<-cnt.done

	measureBatches(b, cnt, keys, func(k string) { _ = c.Enqueue(ctx, k) })
	cancel()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
}

// addAll adds every key in state "ready" from 64 goroutines and returns the
// first error.
func addAll(ctx context.Context, c *controller.Controller, keys []string) error {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < int64(len(keys)); k = next.Add(1) - 1 {
				if err := c.Add(ctx, keys[k], "ready", nil); err != nil {
					failed.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// measureBatches enqueues every key once per op through add, waits until all
// were reconciled, and reports the rate.
func measureBatches(b *testing.B, cnt *batchCounter, keys []string, add func(string)) {
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		cnt.expect(cnt.n.Load() + fleetSize)
		for _, k := range keys {
			add(k)
		}
		<-cnt.done
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)*fleetSize/elapsed.Seconds(), "reconciles/s")
}

// BenchmarkWorkqueueBaseline is the same load through client-go's
// rate-limiting workqueue with 8 workers, the way a Kubernetes controller
// drives it (Get, reconcile, Forget, Done).
func BenchmarkWorkqueueBaseline(b *testing.B) {
	keys := fleetKeys()
	cnt := newBatchCounter()
	q := k8sworkqueue.NewTypedRateLimitingQueue(k8sworkqueue.DefaultTypedControllerRateLimiter[string]())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				cnt.reconcile()
				q.Forget(k)
				q.Done(k)
			}
		})
	}
	measureBatches(b, cnt, keys, func(k string) { q.Add(k) })
	q.ShutDown()
	wg.Wait()
}

// BenchmarkControllerIdleMemory measures the heap held per idle object:
// 100,000 objects registered in a running controller with an in-memory
// store (their records, history, cache and periodic-pass schedule).
func BenchmarkControllerIdleMemory(b *testing.B) {
	ctx := context.Background()
	var perObject float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()

		cnt := newBatchCounter()
		cnt.expect(fleetSize)
		c, err := controller.New(controller.Config{
			Kind: "obj", Workers: 8,
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				cnt.reconcile()
				return controller.NoChange(), nil
			}),
		})
		if err != nil {
			b.Fatal(err)
		}
		for k := range fleetSize {
			if err := c.Add(ctx, fmt.Sprintf("obj-%06d", k), "ready", nil); err != nil {
				b.Fatal(err)
			}
		}
		perObject = idleHeapPerObject(ctx, b, c, cnt, &before, fleetSize)
		b.StartTimer()
	}
	b.ReportMetric(perObject, "B/object")
}

// idleHeapPerObject runs c until cnt has seen each of its n objects
// handled once (they are then idle until their periodic pass), stops the
// timer, and returns the heap grown since before, per object. It stops c.
func idleHeapPerObject(ctx context.Context, b *testing.B, c *controller.Controller, cnt *batchCounter, before *runtime.MemStats, n int) float64 {
	b.Helper()
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(runCtx) }()
	<-cnt.done

	b.StopTimer()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perObject := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	if c.Len() != n {
		b.Fatalf("controller holds %d objects", c.Len())
	}
	cancel()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	return perObject
}
