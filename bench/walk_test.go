package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/heimdalr/dag"
)

// noopItem is already converged: the walk discovers, computes the goal and
// checks, and finds nothing to do.
type noopItem struct{ id converge.ID }

func (n *noopItem) ID() converge.ID                                               { return n.id }
func (n *noopItem) StateCurrent(context.Context, converge.DepStates) (int, error) { return 1, nil }
func (n *noopItem) StateGoal(context.Context, converge.DepStates) (int, error)    { return 1, nil }
func (n *noopItem) Check(_ context.Context, c, t int) (converge.Decision, error) {
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (n *noopItem) Apply(_ context.Context, _, t int) (int, error)    { return t, nil }
func (n *noopItem) ApplyDry(_ context.Context, _, t int) (int, error) { return t, nil }

// work is the per-node work of the no-op walk, done the same way by every
// executor compared here.
func (n *noopItem) work(ctx context.Context) error {
	c, err := n.StateCurrent(ctx, nil)
	if err != nil {
		return err
	}
	t, err := n.StateGoal(ctx, nil)
	if err != nil {
		return err
	}
	_, err = n.Check(ctx, c, t)
	return err
}

// randomDAG returns, for n nodes, the dependencies of each node: about
// avgDeps earlier nodes chosen at random with a fixed seed.
func randomDAG(n, avgDeps int, seed uint64) [][]int {
	r := rand.New(rand.NewPCG(seed, seed))
	deps := make([][]int, n)
	for k := 1; k < n; k++ {
		want := min(k, r.IntN(2*avgDeps+1))
		seen := make(map[int]bool, want)
		for len(seen) < want {
			d := r.IntN(k)
			if !seen[d] {
				seen[d] = true
				deps[k] = append(deps[k], d)
			}
		}
	}
	return deps
}

func nodeID(k int) converge.ID { return converge.ID(fmt.Sprintf("item-%05d", k)) }

const (
	noopItems = 10_000
	noopDeps  = 3
	noopSeed  = 2026
	noopPar   = converge.DefaultParallelism
)

// BenchmarkWalkNoop10k: a full converge.Apply over 10,000 converged items
// at the default parallelism; compare ns/item with BenchmarkWalkFloor10k.
func BenchmarkWalkNoop10k(b *testing.B) { benchNoopWalk(b, noopPar) }

// BenchmarkPeerNoop10k runs the same graph through github.com/heimdalr/dag's
// flow execution and through the executor most teams write by hand.
func BenchmarkPeerNoop10k(b *testing.B) {
	deps := randomDAG(noopItems, noopDeps, noopSeed)
	items := make([]*noopItem, noopItems)
	for k := range items {
		items[k] = &noopItem{id: nodeID(k)}
	}
	ctx := context.Background()

	b.Run("heimdalr-dag", func(b *testing.B) {
		d := dag.NewDAG()
		const root = "root"
		if err := d.AddVertexByID(root, root); err != nil {
			b.Fatal(err)
		}
		for k := range items {
			if err := d.AddVertexByID(string(items[k].id), k); err != nil {
				b.Fatal(err)
			}
		}
		for k, ds := range deps {
			if len(ds) == 0 {
				if err := d.AddEdge(root, string(items[k].id)); err != nil {
					b.Fatal(err)
				}
			}
			for _, p := range ds {
				if err := d.AddEdge(string(items[p].id), string(items[k].id)); err != nil {
					b.Fatal(err)
				}
			}
		}
		// The flow runs a goroutine per vertex; bound the work itself the
		// way converge does, with a semaphore of the same size.
		sem := make(chan struct{}, noopPar)
		var ran atomic.Int64
		cb := func(d *dag.DAG, id string, _ []dag.FlowResult) (any, error) {
			if id == root {
				return nil, nil
			}
			v, err := d.GetVertex(id)
			if err != nil {
				return nil, err
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			ran.Add(1)
			return nil, items[v.(int)].work(ctx)
		}
		if _, err := d.DescendantsFlow(root, nil, cb); err != nil { // warm the descendants cache
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			ran.Store(0)
			if _, err := d.DescendantsFlow(root, nil, cb); err != nil {
				b.Fatal(err)
			}
			if ran.Load() != noopItems {
				b.Fatalf("ran %d nodes", ran.Load())
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/noopItems, "ns/item")
	})

	b.Run("hand-rolled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := handRolled(ctx, items, deps, noopPar); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/noopItems, "ns/item")
	})
}

// handRolled is the executor most teams write: a goroutine per node that
// waits on its dependencies' done channels, bounded by a semaphore.
func handRolled(ctx context.Context, items []*noopItem, deps [][]int, par int) error {
	return handRolledFunc(len(items), deps, par, func(k int) error { return items[k].work(ctx) })
}

// sleepItem's Apply takes about a millisecond; it records how long its
// work really took so the ideal time is computed from real durations.
type sleepItem struct {
	id      converge.ID
	applied atomic.Bool
	took    atomic.Int64
}

func (s *sleepItem) ID() converge.ID { return s.id }
func (s *sleepItem) StateCurrent(context.Context, converge.DepStates) (bool, error) {
	return s.applied.Load(), nil
}
func (s *sleepItem) StateGoal(context.Context, converge.DepStates) (bool, error) { return true, nil }
func (s *sleepItem) Check(_ context.Context, c, t bool) (converge.Decision, error) {
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (s *sleepItem) Apply(_ context.Context, _, t bool) (bool, error) {
	start := time.Now()
	time.Sleep(time.Millisecond)
	s.took.Store(int64(time.Since(start)))
	s.applied.Store(t)
	return t, nil
}
func (s *sleepItem) ApplyDry(_ context.Context, _, t bool) (bool, error) { return t, nil }

// idealTime is the larger of the critical path and the total work divided
// by the parallelism, from the durations the items really slept; finish is
// scratch space of len(items).
func idealTime(items []*sleepItem, deps [][]int, par int, finish []time.Duration) time.Duration {
	var total, critical time.Duration
	for k, it := range items {
		took := time.Duration(it.took.Load())
		total += took
		var ready time.Duration
		for _, d := range deps[k] {
			ready = max(ready, finish[d])
		}
		finish[k] = ready + took
		critical = max(critical, finish[k])
	}
	return max(critical, total/time.Duration(par))
}

// BenchmarkWalkCriticalPath: 2,000 items whose Apply takes 1 ms, at
// parallelism 64. Its goal is schedule-efficiency ≥ 0.97:
// schedule-efficiency = floor / measured, where floor is the walk's own
// schedule at zero dispatch cost over the same real durations
// (scheduleMakespan), so what it misses is lost to the walk's overhead.
// It also reports efficiency = ideal / measured, where ideal is the larger
// of the critical path and total work / parallelism, both computed from the
// durations the items really slept; no executor reaches 1 on this graph
// (TestCriticalPathBound: 0.95 at most), so efficiency has no goal.
func BenchmarkWalkCriticalPath(b *testing.B) {
	const n, par = 2000, 64
	deps := randomDAG(n, 3, 7)
	items := make([]*sleepItem, n)
	g := converge.NewGraph()
	for k := range items {
		items[k] = &sleepItem{id: nodeID(k)}
		ids := make([]converge.ID, len(deps[k]))
		for i, d := range deps[k] {
			ids[i] = nodeID(d)
		}
		g.Add(converge.Wrap[bool](items[k]), converge.Present, ids...)
	}
	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: par})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var sumEff, sumSched float64
	finish := make([]time.Duration, n)
	took := make([]time.Duration, n)
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		for _, it := range items {
			it.applied.Store(false)
		}
		b.StartTimer()
		start := time.Now()
		rep, err := w.Apply(ctx, g)
		measured := time.Since(start)
		if err != nil || rep.Count(converge.OutcomeChanged) != n {
			b.Fatalf("walk: %v", err)
		}
		sumEff += float64(idealTime(items, deps, par, finish)) / float64(measured)
		sumSched += float64(scheduleMakespan(tookOf(items, took), deps, par)) / float64(measured)
	}
	b.ReportMetric(sumEff/float64(b.N), "efficiency")
	b.ReportMetric(sumSched/float64(b.N), "schedule-efficiency")
}

// tookOf fills took with how long each item's Apply really took.
func tookOf(items []*sleepItem, took []time.Duration) []time.Duration {
	for k, it := range items {
		took[k] = time.Duration(it.took.Load())
	}
	return took
}

// BenchmarkPeerCriticalPath runs the critical-path load through the
// hand-rolled executor, for comparison with BenchmarkWalkCriticalPath.
func BenchmarkPeerCriticalPath(b *testing.B) {
	const n, par = 2000, 64
	deps := randomDAG(n, 3, 7)
	items := make([]*sleepItem, n)
	for k := range items {
		items[k] = &sleepItem{id: nodeID(k)}
	}
	ctx := context.Background()
	var sumEff, sumSched float64
	finish := make([]time.Duration, n)
	took := make([]time.Duration, n)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		err := handRolledFunc(n, deps, par, func(k int) error {
			_, err := items[k].Apply(ctx, false, true)
			return err
		})
		measured := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		sumEff += float64(idealTime(items, deps, par, finish)) / float64(measured)
		sumSched += float64(scheduleMakespan(tookOf(items, took), deps, par)) / float64(measured)
	}
	b.ReportMetric(sumEff/float64(b.N), "efficiency")
	b.ReportMetric(sumSched/float64(b.N), "schedule-efficiency")
}

// handRolledFunc is handRolled with any work per node.
func handRolledFunc(n int, deps [][]int, par int, work func(k int) error) error {
	done := make([]chan struct{}, n)
	for k := range done {
		done[k] = make(chan struct{})
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for k := range n {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			defer close(done[k])
			for _, d := range deps[k] {
				<-done[d]
			}
			sem <- struct{}{}
			err := work(k)
			<-sem
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(k)
	}
	wg.Wait()
	return first
}
