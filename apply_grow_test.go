package converge_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pacedItem is converged unless change is set, and runs discover (if
// set) in its StateCurrent, after noting when it started.
type pacedItem struct {
	id       converge.ID
	discover func(ctx context.Context) error
	change   bool
	apply    func(ctx context.Context) error

	mu      sync.Mutex
	started time.Time
}

func (p *pacedItem) ID() converge.ID { return p.id }
func (p *pacedItem) StateCurrent(ctx context.Context, _ converge.DepStates) (bool, error) {
	p.mu.Lock()
	p.started = time.Now()
	p.mu.Unlock()
	if p.discover != nil {
		if err := p.discover(ctx); err != nil {
			return false, err
		}
	}
	return !p.change, nil
}
func (p *pacedItem) StateGoal(context.Context, converge.DepStates) (bool, error) { return true, nil }
func (p *pacedItem) Check(_ context.Context, c, t bool) (converge.Decision, error) {
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (p *pacedItem) Apply(ctx context.Context, _, t bool) (bool, error) {
	if p.apply != nil {
		if err := p.apply(ctx); err != nil {
			return false, err
		}
	}
	p.change = false
	return t, nil
}
func (p *pacedItem) ApplyDry(_ context.Context, _, t bool) (bool, error) { return t, nil }

// startedAt returns how long after t0 the item's last StateCurrent began.
func (p *pacedItem) startedAt(t0 time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started.Sub(t0)
}

// pacedGraph returns a graph of n independent pacedItems, and the items.
func pacedGraph(n int) (*converge.Graph, []*pacedItem) {
	return pacedGraphWith(n, nil)
}

// pacedGraphWith is pacedGraph with dependencies: deps[k] lists the items
// item k depends on.
func pacedGraphWith(n int, deps map[int][]int) (*converge.Graph, []*pacedItem) {
	g := converge.NewGraph()
	items := make([]*pacedItem, n)
	for k := range items {
		items[k] = &pacedItem{id: converge.ID(fmt.Sprintf("item-%02d", k))}
		var ids []converge.ID
		for _, d := range deps[k] {
			ids = append(ids, items[d].id)
		}
		g.Add(converge.Wrap[bool](items[k]), converge.Present, ids...)
	}
	return g, items
}

// meet returns a discover function that waits until done is closed (by
// the item it waits for), failing after an hour of the bubble's clock.
func meet(done <-chan struct{}) func(context.Context) error {
	return func(context.Context) error {
		select {
		case <-done:
			return nil
		case <-time.After(time.Hour):
			return errors.New("the item waited for never ran")
		}
	}
}

// TestWalkerStartsOnOneWorkerAfterAQuickWalk checks what
// WalkerConfig.Parallelism says of a walker whose last walk was quick:
// its next walk starts on one worker, in the order items were added, and
// grows to its parallelism once an item is about to Apply, once items
// that took 20µs or more took a millisecond together, or once its worker
// spent one to two milliseconds in one item (the walk's watch ticks every
// millisecond and grows the walk when it sees the same item twice). Each case's first walk is quick
// (its items take no time on the bubble's clock); the figures are read on
// that clock, t0 being the start of the second walk.
func TestWalkerStartsOnOneWorkerAfterAQuickWalk(t *testing.T) {
	for _, tc := range []struct {
		name string
		// second sets up the items for the second walk; its checks run
		// after it, with t0.
		second func(items []*pacedItem)
		check  func(t *testing.T, items []*pacedItem, t0 time.Time, rep *converge.Report)
	}{
		{
			name: "one worker, in the order items were added",
			second: func(items []*pacedItem) {
				items[0].discover = func(context.Context) error { time.Sleep(300 * time.Microsecond); return nil }
			},
			check: func(t *testing.T, items []*pacedItem, t0 time.Time, _ *converge.Report) {
				for k, it := range items[1:] {
					assert.Equal(t, 300*time.Microsecond, it.startedAt(t0), "item %d starts after item 0, on the same worker", k+1)
				}
			},
		},
		{
			name: "grows when an item is about to Apply",
			second: func(items []*pacedItem) {
				ran := make(chan struct{})
				items[0].change, items[0].apply = true, meet(ran)
				items[1].discover = func(context.Context) error { close(ran); return nil }
			},
			check: func(t *testing.T, items []*pacedItem, t0 time.Time, rep *converge.Report) {
				assert.Equal(t, 1, rep.Count(converge.OutcomeChanged))
				assert.Equal(t, time.Duration(0), items[1].startedAt(t0), "item 1 ran during item 0's Apply, at once")
			},
		},
		{
			name: "grows once slow items took a millisecond",
			second: func(items []*pacedItem) {
				for _, it := range items[:4] {
					it.discover = func(context.Context) error { time.Sleep(300 * time.Microsecond); return nil }
				}
				met := make(chan struct{})
				items[4].discover = meet(met)
				items[5].discover = func(context.Context) error { close(met); return nil }
			},
			check: func(t *testing.T, items []*pacedItem, t0 time.Time, _ *converge.Report) {
				assert.Equal(t, 1200*time.Microsecond, items[5].startedAt(t0), "item 5 ran while item 4 waited for it, once the walk grew after item 3")
			},
		},
		{
			name: "grows while its worker is in one item",
			second: func(items []*pacedItem) {
				met := make(chan struct{})
				items[0].discover = meet(met)
				items[1].discover = func(context.Context) error { close(met); return nil }
			},
			check: func(t *testing.T, items []*pacedItem, t0 time.Time, _ *converge.Report) {
				assert.Equal(t, 2*time.Millisecond, items[1].startedAt(t0), "the watch's second tick saw the worker in item 0")
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				g, items := pacedGraph(8)
				w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 4})
				require.NoError(t, err)
				_, err = w.Apply(ctx, g)
				require.NoError(t, err)
				tc.second(items)
				t0 := time.Now()
				rep, err := w.Apply(ctx, g)
				require.NoError(t, err)
				tc.check(t, items, t0, rep)
			})
		})
	}
}

// TestWalkAfterAnApplyStartsOnEveryWorker checks that a walk after one in
// which an item applied starts on every worker: its first two items wait
// for each other, which they can do at once only on two workers (on one,
// the walk's watch would grow it after two milliseconds).
func TestWalkAfterAnApplyStartsOnEveryWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		g, items := pacedGraph(8)
		w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 4})
		require.NoError(t, err)
		_, err = w.Apply(ctx, g) // quick
		require.NoError(t, err)
		items[3].change = true
		rep, err := w.Apply(ctx, g) // starts on one worker, applies
		require.NoError(t, err)
		require.Equal(t, 1, rep.Count(converge.OutcomeChanged))

		a, b := make(chan struct{}), make(chan struct{})
		items[0].discover = func(context.Context) error { close(a); return meet(b)(ctx) }
		items[1].discover = func(context.Context) error { close(b); return meet(a)(ctx) }
		t0 := time.Now()
		_, err = w.Apply(ctx, g)
		require.NoError(t, err)
		assert.Equal(t, time.Duration(0), items[0].startedAt(t0))
		assert.Equal(t, time.Duration(0), items[1].startedAt(t0))
	})
}

// TestWalkerRemembersWhetherItsItemsWereQuick checks which walks make the
// next one start on one worker: a walk in which slow items took a
// millisecond together, and were at least one in 64, does not; one in
// which a single item of many held its worker up, for however long (as
// the garbage collector or the operating system may), does. The third
// walk tells: its item 0 takes 300µs, and item 1 starts after it on one
// worker, at once on several.
func TestWalkerRemembersWhetherItsItemsWereQuick(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		second func(items []*pacedItem)
		onOne  bool // the third walk starts on one worker
	}{
		{
			name: "slow items",
			n:    8,
			second: func(items []*pacedItem) {
				for _, it := range items {
					it.discover = func(context.Context) error { time.Sleep(300 * time.Microsecond); return nil }
				}
			},
		},
		{
			name: "one item of many held up",
			n:    100,
			second: func(items []*pacedItem) {
				items[0].discover = func(context.Context) error { time.Sleep(5 * time.Millisecond); return nil }
			},
			onOne: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				g, items := pacedGraph(tc.n)
				w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 4})
				require.NoError(t, err)
				_, err = w.Apply(ctx, g) // quick
				require.NoError(t, err)
				tc.second(items)
				_, err = w.Apply(ctx, g)
				require.NoError(t, err)

				for _, it := range items {
					it.discover = nil
				}
				items[0].discover = func(context.Context) error { time.Sleep(300 * time.Microsecond); return nil }
				t0 := time.Now()
				_, err = w.Apply(ctx, g)
				require.NoError(t, err)
				want := time.Duration(0)
				if tc.onOne {
					want = 300 * time.Microsecond
				}
				assert.Equal(t, want, items[1].startedAt(t0))
			})
		})
	}
}

// TestGrownWalkRunsItemsThatWaitedForItemsRunBefore checks that a walk
// that started on one worker and grew runs the items whose wait ended
// before it grew, at once: items 5 to 7 wait for items 0 to 3, which the
// one worker ran before it came to item 4, and item 5 must run while item
// 4 waits for it, whichever way the walk grows at item 4.
func TestGrownWalkRunsItemsThatWaitedForItemsRunBefore(t *testing.T) {
	deps := map[int][]int{5: {0, 1, 2, 3}, 6: {1, 5}, 7: {2, 3}}
	for _, tc := range []struct {
		name string
		at4  func(items []*pacedItem, met <-chan struct{})
	}{
		{
			name: "item 4 is about to Apply",
			at4: func(items []*pacedItem, met <-chan struct{}) {
				items[4].change, items[4].apply = true, meet(met)
			},
		},
		{
			name: "items 0 to 3 took a millisecond",
			at4: func(items []*pacedItem, met <-chan struct{}) {
				for _, it := range items[:4] {
					it.discover = func(context.Context) error { time.Sleep(300 * time.Microsecond); return nil }
				}
				items[4].discover = meet(met)
			},
		},
		{
			name: "the worker stays in item 4",
			at4: func(items []*pacedItem, met <-chan struct{}) {
				items[4].discover = meet(met)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				g, items := pacedGraphWith(8, deps)
				w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 4})
				require.NoError(t, err)
				_, err = w.Apply(ctx, g) // quick
				require.NoError(t, err)
				met := make(chan struct{})
				tc.at4(items, met)
				items[5].discover = func(context.Context) error { close(met); return nil }
				rep, err := w.Apply(ctx, g)
				require.NoError(t, err, "item 5 ran while item 4 waited for it")
				assert.Equal(t, 8, rep.Count(converge.OutcomeUnchanged)+rep.Count(converge.OutcomeChanged))
			})
		})
	}
}
