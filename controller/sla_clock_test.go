package controller_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// TestControllerSLAIgnoresWallClockSteps steps the wall clock forward and
// back by hours while an object waits in a state with an SLA of 90 s: the
// breach is reported when 90 s have passed on the monotonic clock, not
// before and not hours later, with that time in state; Since stays a wall
// time, for people.
func TestControllerSLAIgnoresWallClockSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		base := time.Now()
		var offset atomic.Int64 // the wall clock's step, in nanoseconds
		wall := func() time.Time { return time.Now().Round(0).Add(time.Duration(offset.Load())) }
		var mu sync.Mutex
		var events []controller.SLAEvent
		m := newCtrlMetrics()
		c, err := controller.New(controller.Config{
			Kind: "vm", Metrics: m, Now: wall,
			Monotonic: func() time.Duration { return time.Since(base) },
			SLA:       map[controller.State]time.Duration{"provisioning": 90 * time.Second},
			OnSLA: func(e controller.SLAEvent) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			},
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				return controller.Wait("no capacity"), nil
			})})
		require.NoError(t, err)
		added := wall()
		require.NoError(t, c.Add(ctx, "a", "provisioning", nil))
		stop := startController(t, c)
		above := func() int { return m.value(controller.MetricAboveSLA, "vm", "provisioning") }

		for _, step := range []time.Duration{2 * time.Hour, -5 * time.Hour, 30 * 24 * time.Hour} {
			time.Sleep(29 * time.Second)
			offset.Add(int64(step))
			require.NoError(t, c.Enqueue(ctx, "a"))
			synctest.Wait()
			require.Empty(t, c.AboveSLA(), "reported early after a wall step of %s", step)
			require.Equal(t, 0, above())
		}
		time.Sleep(3 * time.Second) // 90 s: not above it yet
		synctest.Wait()
		assert.Empty(t, c.AboveSLA())
		time.Sleep(time.Millisecond)
		synctest.Wait()
		got := c.AboveSLA()
		require.Len(t, got, 1, "reported when the SLA runs out on the monotonic clock")
		assert.Equal(t, 1, above())
		assert.True(t, got[0].Since.Equal(added), "Since is the wall time of the Add")
		mu.Lock()
		require.Len(t, events, 1)
		assert.True(t, events[0].Breached)
		assert.InDelta(t, float64(90*time.Second+time.Millisecond), float64(events[0].TimeInState), float64(time.Millisecond))
		mu.Unlock()
		require.NoError(t, stop())
	})
}

// TestControllerSLACountsTimeBeforeARestart stores an object that entered
// its state 80 s ago (by the wall clock) and starts a controller on it:
// the time before counts once, so the breach comes 10 s later, and a wall
// step after that changes nothing.
func TestControllerSLACountsTimeBeforeARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		handler := controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
			return controller.Wait("no capacity"), nil
		})
		sla := map[controller.State]time.Duration{"provisioning": 90 * time.Second}
		first, err := controller.New(controller.Config{Kind: "vm", Store: store, Handler: handler, SLA: sla})
		require.NoError(t, err)
		require.NoError(t, first.Add(ctx, "a", "provisioning", nil))
		time.Sleep(80 * time.Second) // the first controller never ran

		base := time.Now()
		var offset atomic.Int64
		c, err := controller.New(controller.Config{Kind: "vm", Store: store, Handler: handler, SLA: sla,
			Now:       func() time.Time { return time.Now().Round(0).Add(time.Duration(offset.Load())) },
			Monotonic: func() time.Duration { return time.Since(base) }})
		require.NoError(t, err)
		stop := startController(t, c)
		synctest.Wait()
		offset.Store(int64(-time.Hour)) // after it saw the object
		time.Sleep(10 * time.Second)
		require.NoError(t, c.Enqueue(ctx, "a"))
		synctest.Wait()
		assert.Empty(t, c.AboveSLA())
		time.Sleep(time.Millisecond)
		synctest.Wait()
		assert.Len(t, c.AboveSLA(), 1)
		require.NoError(t, stop())
	})
}
