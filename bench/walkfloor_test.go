package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/convergekit/converge"
)

// noopGraph builds the no-op graph of BenchmarkWalkNoop10k.
func noopGraph(deps [][]int) *converge.Graph {
	g := converge.NewGraph()
	for k, ds := range deps {
		ids := make([]converge.ID, len(ds))
		for i, d := range ds {
			ids[i] = nodeID(d)
		}
		g.Add(converge.Wrap[int](&noopItem{id: nodeID(k)}), converge.Present, ids...)
	}
	return g
}

// benchNoopWalk walks the no-op graph at the given parallelism and reports
// ns/item and allocs/item.
func benchNoopWalk(b *testing.B, par int) {
	benchNoopWalkWith(b, converge.WalkerConfig{Parallelism: par})
}

// benchNoopWalkWith is benchNoopWalk with the walker's whole Config.
func benchNoopWalkWith(b *testing.B, cfg converge.WalkerConfig) {
	g := noopGraph(randomDAG(noopItems, noopDeps, noopSeed))
	w, err := converge.NewWalker(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// The first walk validates and caches the graph, and shows every item
	// is already converged.
	if rep, err := w.Apply(ctx, g); err != nil || rep.Count(converge.OutcomeUnchanged) != noopItems {
		b.Fatalf("walk: %v", err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	before := mallocs()
	for b.Loop() {
		if _, err := w.Apply(ctx, g); err != nil {
			b.Fatalf("walk: %v", err)
		}
	}
	reportPerItem(b, noopItems, before)
}

// counters are the process's heap allocations and CPU time at one moment.
type counters struct {
	mallocs uint64
	cpu     int64
	cpuOK   bool
}

// mallocs returns the number of heap allocations the process made so far
// and the CPU time it used.
func mallocs() counters {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	cpu, ok := cpuTime()
	return counters{mallocs: m.Mallocs, cpu: cpu, cpuOK: ok}
}

// reportPerItem reports the time and the heap allocations of one op divided
// by the n items it handled; before is mallocs() taken just before the
// measured loop. It also reports cpu-ns/item, the CPU time of the whole
// process (every thread, the garbage collector included) per item: on a
// shared machine, where other processes take the cores for a while, it
// varies far less than the elapsed ns/item, which counts the waits too.
func reportPerItem(b *testing.B, n int, before counters) {
	after := mallocs()
	per := float64(b.N) * float64(n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/item")
	b.ReportMetric(float64(after.mallocs-before.mallocs)/per, "allocs/item")
	if before.cpuOK && after.cpuOK {
		b.ReportMetric(float64(after.cpu-before.cpu)/per, "cpu-ns/item")
	}
}

// BenchmarkWalkNoop10kPar1 is BenchmarkWalkNoop10k with parallelism 1: the
// walk's own overhead against BenchmarkWalkFloor10k, with no concurrency
// to hide or add cost.
func BenchmarkWalkNoop10kPar1(b *testing.B) { benchNoopWalk(b, 1) }

// BenchmarkWalkFloor10k is the floor of the no-op walk: one goroutine
// visits the same 10,000 items in topological order and does the same
// per-item work (StateCurrent, StateGoal, Check), through the Item
// interface as any executor of user items must — no scheduling, no events,
// no report. Nothing can do the walk's work for less.
func BenchmarkWalkFloor10k(b *testing.B) {
	deps := randomDAG(noopItems, noopDeps, noopSeed)
	items := make([]converge.Item[int], noopItems)
	for k := range items {
		items[k] = &noopItem{id: nodeID(k)}
	}
	// randomDAG gives every node only earlier nodes as dependencies, so
	// index order is a topological order; check it rather than trust it.
	for k, ds := range deps {
		for _, d := range ds {
			if d >= k {
				b.Fatalf("node %d depends on later node %d", k, d)
			}
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	before := mallocs()
	for b.Loop() {
		for _, it := range items {
			if err := floorWork(ctx, it); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportPerItem(b, noopItems, before)
}

// floorWork is the walk's discover-and-check of one converged item, with
// nothing around it.
func floorWork(ctx context.Context, it converge.Item[int]) error {
	c, err := it.StateCurrent(ctx, nil)
	if err != nil {
		return err
	}
	t, err := it.StateGoal(ctx, nil)
	if err != nil {
		return err
	}
	d, err := it.Check(ctx, c, t)
	if err != nil {
		return err
	}
	if d.Change != converge.ChangeNotRequired {
		return fmt.Errorf("item %s is not converged", it.ID())
	}
	return nil
}

// BenchmarkWalkFloorRecorded10k is BenchmarkWalkFloor10k plus what a walk
// must keep of every item for its Report, done the cheapest way: one
// converge.ItemResult per item in a slice made per walk, holding the
// states, the decision, the outcome, when the item started and how long
// it took, from one reading of the monotonic clock per item. It is the
// floor of a walk that reports timed results, still with no scheduling and
// no events.
func BenchmarkWalkFloorRecorded10k(b *testing.B) {
	items := make([]converge.Item[int], noopItems)
	for k := range items {
		items[k] = &noopItem{id: nodeID(k)}
	}
	ctx := context.Background()
	b.ReportAllocs()
	before := mallocs()
	for b.Loop() {
		results := make([]converge.ItemResult, len(items))
		base := time.Now()
		last := base
		for k, it := range items {
			r := &results[k]
			r.ID, r.Presence, r.Started = it.ID(), converge.Present, last
			c, err := it.StateCurrent(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			t, err := it.StateGoal(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if r.Decision, err = it.Check(ctx, c, t); err != nil {
				b.Fatal(err)
			}
			if r.Decision.Change != converge.ChangeNotRequired {
				b.Fatalf("item %s is not converged", r.ID)
			}
			r.Before, r.Target, r.After, r.Outcome = c, t, c, converge.OutcomeUnchanged
			last = base.Add(time.Since(base))
			r.Duration = last.Sub(r.Started)
		}
		recordedSink = results
	}
	reportPerItem(b, noopItems, before)
}

// recordedSink keeps the floor's results alive, as a Report keeps a walk's.
var recordedSink []converge.ItemResult

// BenchmarkWalkFloorClock10k reads the monotonic clock once per item, as
// BenchmarkWalkFloorRecorded10k and the walk do to time their items, and
// does nothing else: what timing each item costs by itself on this
// machine. Against BenchmarkWalkFloor10k it bounds the ratio any walk that
// reports per-item times can reach.
func BenchmarkWalkFloorClock10k(b *testing.B) {
	b.ReportAllocs()
	before := mallocs()
	var d time.Duration
	for b.Loop() {
		base := time.Now()
		for range noopItems {
			d += time.Since(base)
		}
	}
	clockSink = d
	reportPerItem(b, noopItems, before)
}

// clockSink keeps the clock readings of BenchmarkWalkFloorClock10k used.
var clockSink time.Duration
