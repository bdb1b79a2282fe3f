package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

func TestLimitsConfigValidate(t *testing.T) {
	h := controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
		return controller.NoChange(), nil
	})
	tests := []struct {
		name string
		lim  controller.Limit
		ok   bool
	}{
		{"concurrent", controller.Limit{Concurrent: 2}, true},
		{"rate", controller.Limit{Every: time.Second, Burst: 3}, true},
		{"both", controller.Limit{Concurrent: 1, Every: time.Second}, true},
		{"nothing", controller.Limit{}, false},
		{"negative concurrent", controller.Limit{Concurrent: -1}, false},
		{"negative every", controller.Limit{Every: -time.Second}, false},
		{"negative burst", controller.Limit{Every: time.Second, Burst: -1}, false},
		{"burst without every", controller.Limit{Concurrent: 1, Burst: 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := controller.New(controller.Config{Kind: "k", Handler: h, Limits: map[controller.State]controller.Limit{"x": tt.lim}})
			if tt.ok {
				require.NoError(t, err)
				return
			}
			var ce *converge.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "Limits", ce.Field)
			assert.Contains(t, ce.Reason, `state "x"`)
		})
	}
}

// inState counts, per state, the handlers running at once and the most
// seen.
type inState struct {
	mu        sync.Mutex
	now, most map[controller.State]int
}

func newInState() *inState {
	return &inState{now: map[controller.State]int{}, most: map[controller.State]int{}}
}

func (s *inState) enter(st controller.State) func() {
	s.mu.Lock()
	s.now[st]++
	s.most[st] = max(s.most[st], s.now[st])
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.now[st]--
		s.mu.Unlock()
	}
}

func (s *inState) mostIn(st controller.State) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most[st]
}

// allIn reports whether every stored object of kind is in state.
func allIn(t *testing.T, store converge.Store, kind string, state controller.State) bool {
	t.Helper()
	recs, err := store.List(context.Background(), kind+"/")
	require.NoError(t, err)
	for _, r := range recs {
		var o struct{ State controller.State }
		require.NoError(t, json.Unmarshal(r.Value, &o))
		if o.State != state {
			return false
		}
	}
	return len(recs) > 0
}

// TestLimitConcurrentAcrossReplicas: three replicas of 4 workers on one
// store run at most Limit.Concurrent handlers at once for objects in the
// limited state, reach that limit, and take every object through it; the
// objects put off are counted in MetricLimited, not as failures.
func TestLimitConcurrentAcrossReplicas(t *testing.T) {
	for _, owners := range []int{1, 3} {
		t.Run(fmt.Sprintf("replicas=%d", owners), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				const limit, objects = 3, 24
				store := converge.NewMemStore()
				running := newInState()
				m := &convergetest.Metrics{}
				var ctrls []*controller.Controller
				for r := range owners {
					c, err := controller.New(controller.Config{
						Kind: "fw", Store: store, Owner: fmt.Sprintf("r%d", r), Workers: 4, Metrics: m,
						Limits: map[controller.State]controller.Limit{"updating": {Concurrent: limit}},
						Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
							defer running.enter(o.State)()
							switch o.State {
							case "new":
								time.Sleep(100 * time.Millisecond)
								return controller.Transition("updating"), nil
							case "updating":
								select {
								case <-time.After(time.Second):
								case <-ctx.Done():
									return controller.Result{}, ctx.Err()
								}
								return controller.Transition("done"), nil
							}
							return controller.NoChange().After(time.Hour), nil
						})})
					require.NoError(t, err)
					ctrls = append(ctrls, c)
				}
				for i := range objects {
					require.NoError(t, ctrls[0].Add(ctx, fmt.Sprintf("m%02d", i), "new", nil))
				}
				for _, c := range ctrls {
					startController(t, c)
				}
				deadline := time.Now().Add(time.Minute)
				for !allIn(t, store, "fw", "done") && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
				}
				require.True(t, allIn(t, store, "fw", "done"), "every object went through the limited state")
				assert.Equal(t, limit, running.mostIn("updating"), "the limit is reached, never exceeded")
				assert.Greater(t, running.mostIn("new"), limit, "other states are not limited")
				assert.Positive(t, m.Value(controller.MetricLimited.Name, "fw", "updating", controller.LimitConcurrent))
				assert.Zero(t, m.Value(controller.MetricErrors.Name, "fw", "updating"), "put off is no failure")
			})
		})
	}
}

// TestLimitConcurrentOnItsOwn: a controller on its own (no Owner) keeps
// the limit among its workers, and wakes an object put off as soon as a
// slot frees.
func TestLimitConcurrentOnItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const limit, objects = 2, 10
		store := converge.NewMemStore()
		running := newInState()
		c, err := controller.New(controller.Config{
			Kind: "fw", Store: store, Workers: 8, Poll: time.Hour,
			Limits: map[controller.State]controller.Limit{"updating": {Concurrent: limit}},
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				defer running.enter(o.State)()
				if o.State == "updating" {
					time.Sleep(time.Second)
					return controller.Transition("done"), nil
				}
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		for i := range objects {
			require.NoError(t, c.Add(ctx, fmt.Sprintf("m%02d", i), "updating", nil))
		}
		start := time.Now()
		startController(t, c)
		for !allIn(t, store, "fw", "done") && time.Since(start) < time.Minute {
			time.Sleep(10 * time.Millisecond)
		}
		require.True(t, allIn(t, store, "fw", "done"))
		assert.Equal(t, limit, running.mostIn("updating"))
		// objects/limit rounds of one second each: a freed slot wakes the
		// next object at once, not after Poll (an hour).
		assert.Less(t, time.Since(start), time.Duration(objects/limit+1)*time.Second)
	})
}

// TestLimitRate: transitions into a state with an entry rate are
// deferred beyond Burst in any span of Burst×Every, stay in their state
// with the limit's reason and one history entry each wait, and all
// happen in the end.
func TestLimitRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const objects, burst, every = 12, 2, time.Second
		store := converge.NewMemStore()
		m := &convergetest.Metrics{}
		var ctrls []*controller.Controller
		for r := range 2 {
			c, err := controller.New(controller.Config{
				Kind: "fw", Store: store, Owner: fmt.Sprintf("r%d", r), Workers: 4, Metrics: m,
				Limits: map[controller.State]controller.Limit{"updating": {Every: every, Burst: burst}},
				Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
					if o.State == "new" {
						return controller.Transition("updating"), nil
					}
					return controller.NoChange().After(time.Hour), nil
				})})
			require.NoError(t, err)
			ctrls = append(ctrls, c)
		}
		for i := range objects {
			require.NoError(t, ctrls[0].Add(ctx, fmt.Sprintf("m%02d", i), "new", nil))
		}
		start := time.Now()
		for _, c := range ctrls {
			startController(t, c)
		}
		for !allIn(t, store, "fw", "updating") && time.Since(start) < time.Minute {
			time.Sleep(100 * time.Millisecond)
		}
		require.True(t, allIn(t, store, "fw", "updating"), "every object entered in the end")

		var entries []time.Time
		waited := 0
		for i := range objects {
			h, err := store.History(ctx, fmt.Sprintf("fw/m%02d", i))
			require.NoError(t, err)
			for _, e := range h {
				switch {
				case e.To == "updating" && e.From == "new":
					entries = append(entries, e.At)
				case strings.HasPrefix(e.Reason, controller.ReasonLimited):
					assert.Equal(t, "new", e.From)
					assert.Equal(t, "new", e.To)
					waited++
				}
			}
		}
		require.Len(t, entries, objects)
		// At most burst entries in any span of burst×every.
		for _, a := range entries {
			n := 0
			for _, b := range entries {
				if !b.Before(a) && b.Sub(a) < burst*every {
					n++
				}
			}
			assert.LessOrEqual(t, n, burst, "entries in the %s from %s", burst*every, a)
		}
		assert.Positive(t, waited, "deferred transitions are in the history")
		assert.Positive(t, m.Value(controller.MetricLimited.Name, "fw", "updating", controller.LimitRate))
		// 12 objects at 2 per 2 s: about 10 s, not all at once.
		assert.GreaterOrEqual(t, time.Since(start), time.Duration(objects/burst-1)*burst*every)
	})
}

// TestLimitDoesNotStarveOtherStates: objects in a state limited to one
// handler at a time, with handlers that take long, do not hold back the
// objects of other states: those are handled as fast as without the
// limit.
func TestLimitDoesNotStarveOtherStates(t *testing.T) {
	for _, owner := range []string{"", "r"} {
		t.Run("owner="+owner, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				store := converge.NewMemStore()
				running := newInState()
				c, err := controller.New(controller.Config{
					Kind: "fw", Store: store, Owner: owner, Workers: 2,
					Limits: map[controller.State]controller.Limit{"slow": {Concurrent: 1}},
					Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
						defer running.enter(o.State)()
						switch o.State {
						case "slow":
							time.Sleep(10 * time.Second)
							return controller.Transition("done"), nil
						case "fast":
							time.Sleep(100 * time.Millisecond)
							return controller.Transition("done"), nil
						}
						return controller.NoChange().After(time.Hour), nil
					})})
				require.NoError(t, err)
				for i := range 20 {
					require.NoError(t, c.Add(ctx, fmt.Sprintf("s%02d", i), "slow", nil))
				}
				startController(t, c)
				time.Sleep(2 * time.Second) // the slow ones hold their slot and wait for it
				require.Equal(t, 1, running.mostIn("slow"))
				for i := range 20 {
					require.NoError(t, c.Add(ctx, fmt.Sprintf("f%02d", i), "fast", nil))
				}
				start := time.Now()
				fastDone := func() bool {
					for i := range 20 {
						o, ok := c.Get(fmt.Sprintf("f%02d", i))
						if !ok || o.State != "done" {
							return false
						}
					}
					return true
				}
				for !fastDone() && time.Since(start) < time.Minute {
					time.Sleep(100 * time.Millisecond)
				}
				require.True(t, fastDone())
				// 20 objects of 100 ms on the one worker the slow state leaves
				// free: about 2 s, while the slow ones take 200 s.
				assert.Less(t, time.Since(start), 5*time.Second)
				assert.Equal(t, 1, running.mostIn("slow"))
			})
		})
	}
}

// TestNoLimitsUnchanged: without Limits, handlers in every state run up
// to Workers at once, as before, and no limit is counted.
func TestNoLimitsUnchanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		running := newInState()
		m := &convergetest.Metrics{}
		c, err := controller.New(controller.Config{
			Kind: "fw", Store: store, Owner: "r", Workers: 4, Metrics: m,
			// A limit of another state changes nothing for this one.
			Limits: map[controller.State]controller.Limit{"other": {Concurrent: 1, Every: time.Hour}},
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				defer running.enter(o.State)()
				if o.State == "updating" {
					time.Sleep(time.Second)
					return controller.Transition("done"), nil
				}
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		for i := range 8 {
			require.NoError(t, c.Add(ctx, fmt.Sprintf("m%d", i), "updating", nil))
		}
		start := time.Now()
		startController(t, c)
		for !allIn(t, store, "fw", "done") && time.Since(start) < time.Minute {
			time.Sleep(100 * time.Millisecond)
		}
		require.True(t, allIn(t, store, "fw", "done"))
		assert.Equal(t, 4, running.mostIn("updating"))
		assert.False(t, m.Has(controller.MetricLimited.Name, "fw", "updating", controller.LimitConcurrent))
	})
}

// slotCut is a MemStore whose claims of limit slots fail while cut is
// set: the replica cannot renew a slot, while the object's lease renews.
type slotCut struct {
	*converge.MemStore
	cut atomic.Bool
}

var errSlotCut = errors.New("slot claims cut off")

func (s *slotCut) Claim(ctx context.Context, key, owner string, ttl time.Duration) (converge.Lease, error) {
	if s.cut.Load() && strings.Contains(key, ".limit/") {
		return converge.Lease{}, errSlotCut
	}
	return s.MemStore.Claim(ctx, key, owner, ttl)
}

// TestLimitSlotLostCancelsTheHandler: a replica that cannot renew the
// slot its handler holds cancels the handler's context at the renew
// deadline, as for the object's lease, before the slot can expire in the
// store; the run is put off, not failed, and runs again once slots can
// be claimed.
func TestLimitSlotLostCancelsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &slotCut{MemStore: converge.NewMemStore()}
		m := &convergetest.Metrics{}
		var (
			mu        sync.Mutex
			cancelled time.Duration
			cause     error
			runs      int
		)
		c, err := controller.New(controller.Config{
			Kind: "fw", Store: store, Owner: "r", LeaseTTL: 3 * time.Second, Metrics: m,
			Limits: map[controller.State]controller.Limit{"updating": {Concurrent: 1}},
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				if o.State != "updating" {
					return controller.NoChange().After(time.Hour), nil
				}
				mu.Lock()
				runs++
				first := runs == 1
				mu.Unlock()
				if !first {
					return controller.Transition("done"), nil
				}
				start := time.Now()
				store.cut.Store(true)
				<-ctx.Done()
				mu.Lock()
				cancelled, cause = time.Since(start), context.Cause(ctx)
				mu.Unlock()
				store.cut.Store(false)
				return controller.Result{}, ctx.Err()
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "m", "updating", nil))
		startController(t, c)
		time.Sleep(10 * time.Second)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, 2*time.Second, cancelled, "cancelled at the renew deadline (two thirds of LeaseTTL)")
		assert.ErrorIs(t, cause, converge.ErrLeaseLost)
		assert.Equal(t, 2, runs, "ran again once slots could be claimed")
		o, ok := c.Get("m")
		require.True(t, ok)
		assert.Equal(t, controller.State("done"), o.State)
		assert.Zero(t, o.Failures, "a lost slot is not the handler's failure")
		assert.Zero(t, m.Value(controller.MetricErrors.Name, "fw", "updating"))
	})
}
