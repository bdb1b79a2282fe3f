package controller_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// TestMetricsOfRunningHandlers runs two handlers that take 10 s and one
// that returns at once, and reads the gauges of the running handlers
// (active workers, unfinished work, longest running) while they run and
// after: each is what the handlers' start times make it, as of the last
// update, and zero once Run returns.
func TestMetricsOfRunningHandlers(t *testing.T) {
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		m := newCtrlMetrics()
		store := converge.NewMemStore()
		c, err := controller.New(controller.Config{Kind: "vm", Store: store, Owner: owner, Metrics: m, Workers: 4,
			Resync: time.Hour, LeaseTTL: time.Hour,
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				if o.Key == "slow-2" {
					time.Sleep(time.Second) // starts a second after slow-1
				}
				if o.Key != "quick" {
					time.Sleep(10 * time.Second)
				}
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.AddMany(ctx, []controller.NewObject{{Key: "slow-1", State: "new"}, {Key: "slow-2", State: "new"}, {Key: "quick", State: "new"}}))
		stop := startController(t, c)
		// The gauges were last updated at 3 s: slow-1 had run 3 s,
		// slow-2 3 s (it counts from its handler's start, before its
		// own second of sleep).
		time.Sleep(3*time.Second + controller.MetricsInterval/2)
		synctest.Wait()
		assert.Equal(t, 2, m.value(controller.MetricActiveWorkers, "vm"))
		assert.InDelta(t, 6.0, m.Value(controller.MetricUnfinishedWork.Name, "vm"), 0.01)
		assert.InDelta(t, 3.0, m.Value(controller.MetricLongestRunning.Name, "vm"), 0.01)

		time.Sleep(20 * time.Second)
		synctest.Wait()
		assert.Equal(t, 0, m.value(controller.MetricActiveWorkers, "vm"), "all returned")
		assert.Zero(t, m.Value(controller.MetricUnfinishedWork.Name, "vm"))
		require.NoError(t, stop())
		assert.Zero(t, m.Value(controller.MetricLongestRunning.Name, "vm"))
	})
}

// TestMetricsQueueDuration runs three objects due at once on one worker,
// each handler taking 5 s: they wait 0, 5 and 10 s for it, alone and as
// a replica (from the due time the store returns with the claim).
func TestMetricsQueueDuration(t *testing.T) {
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		m := newCtrlMetrics()
		c, err := controller.New(controller.Config{Kind: "vm", Store: converge.NewMemStore(), Owner: owner, Metrics: m, Workers: 1,
			Resync: time.Hour, LeaseTTL: time.Hour, RenewDeadline: 50 * time.Minute,
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				time.Sleep(5 * time.Second)
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.AddMany(ctx, []controller.NewObject{{Key: "a", State: "new"}, {Key: "b", State: "new"}, {Key: "c", State: "new"}}))
		stop := startController(t, c)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		require.NoError(t, stop())
		got := m.observed(controller.MetricQueueDuration, "vm")
		require.Len(t, got, 3)
		slices.Sort(got)
		for i, want := range []float64{0, 5, 10} {
			assert.InDelta(t, want, got[i], 0.001, "object %d", i)
		}
	})
}
