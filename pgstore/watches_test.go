package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestRackTransitionRunsItsMachinesOnEveryReplica runs three replicas of
// machines, each on a pool of its own (as processes), and a controller
// of racks on another: the machines watching rack r1 run again when r1
// is added and when its handler moves it to "ready", on whichever replica
// holds them; the machine watching nothing does not. The replicas poll
// once an hour and resync once an hour, so only the store's watch (the
// due update and the notification that the transition's transaction
// makes) can wake them in time. It logs the latency from the rack's
// transition to its watchers' runs.
func TestRackTransitionRunsItsMachinesOnEveryReplica(t *testing.T) {
	t.Parallel()
	const machines = 9
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	admin := open(t, dsn, pgstore.Options{})
	type run struct {
		owner string
		at    time.Time
	}
	var mu sync.Mutex
	runs := map[string][]run{}
	start := func(kind, owner string, h controller.Handler) {
		st := open(t, dsn, pgstore.Options{})
		c, err := controller.New(controller.Config{Kind: kind, Store: st, Owner: owner, Workers: 2,
			Poll: time.Hour, Resync: time.Hour, ShutdownTimeout: time.Second, Handler: h})
		require.NoError(t, err)
		rctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
	}
	for i := range 3 {
		owner := fmt.Sprintf("replica-%d", i)
		start("machine", owner, controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			runs[o.Key] = append(runs[o.Key], run{owner: owner, at: time.Now()})
			return controller.NoChange(), nil
		}))
	}
	var moved time.Time
	start("rack", "racks", controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
		if o.State != "new" {
			return controller.NoChange(), nil
		}
		mu.Lock()
		moved = time.Now()
		mu.Unlock()
		return controller.Transition("ready"), nil
	}))

	objs := make([]controller.NewObject, machines+1)
	for i := range objs {
		objs[i] = controller.NewObject{Key: fmt.Sprintf("m%d", i), State: "up"}
	}
	require.NoError(t, controller.AddObjects(ctx, admin, "machine", objs))
	rack := controller.Ref{Kind: "rack", Key: "r1"}
	for i := range machines { // m9 watches nothing
		require.NoError(t, controller.SetWatches(ctx, admin, "machine", fmt.Sprintf("m%d", i), []controller.Ref{rack}))
	}
	count := func(min int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for i := range machines {
				if len(runs[fmt.Sprintf("m%d", i)]) < min {
					return false
				}
			}
			return len(runs[fmt.Sprintf("m%d", machines)]) >= 1
		}
	}
	require.Eventually(t, count(1), 10*time.Second, 10*time.Millisecond, "every machine runs once")

	// The rack's addition and its transition to ready: both transitions
	// of r1, which its watchers follow (twice, or once when the two came
	// before a watcher's run).
	require.NoError(t, controller.AddObject(ctx, admin, "rack", "r1", "new", nil))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if moved.IsZero() {
			return false
		}
		for i := range machines {
			rs := runs[fmt.Sprintf("m%d", i)]
			if !rs[len(rs)-1].at.After(moved) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every watcher runs after the rack's transition")
	time.Sleep(200 * time.Millisecond) // nothing else comes

	mu.Lock()
	defer mu.Unlock()
	owners := map[string]int{}
	var slowest time.Duration
	for i := range machines {
		rs := runs[fmt.Sprintf("m%d", i)]
		last := rs[len(rs)-1]
		owners[last.owner]++
		slowest = max(slowest, last.at.Sub(moved))
	}
	assert.Len(t, runs[fmt.Sprintf("m%d", machines)], 1, "the machine watching nothing ran once")
	t.Logf("the rack's transition ran its %d watchers on replicas %v; the last %s after it", machines, owners, slowest)
}
