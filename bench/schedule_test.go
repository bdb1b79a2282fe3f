package bench

import (
	"container/heap"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chainRanks returns, for every node of deps (whose dependencies are all
// earlier nodes), the number of nodes on the longest chain that starts
// with it, and the successors of every node: the priority the walk gives
// ready items (longest chain first).
func chainRanks(deps [][]int) (rank []int, succs [][]int) {
	n := len(deps)
	succs = make([][]int, n)
	for k, ds := range deps {
		for _, d := range ds {
			succs[d] = append(succs[d], k)
		}
	}
	rank = make([]int, n)
	for k := n - 1; k >= 0; k-- {
		m := 0
		for _, s := range succs[k] {
			m = max(m, rank[s])
		}
		rank[k] = m + 1
	}
	return rank, succs
}

// readyHeap orders ready nodes by rank, highest first, then by the order
// they became ready.
type readyHeap struct {
	rank  []int
	nodes []int
	seq   []int
	next  int
}

func (h *readyHeap) Len() int { return len(h.nodes) }
func (h *readyHeap) Less(i, j int) bool {
	a, b := h.nodes[i], h.nodes[j]
	if h.rank[a] != h.rank[b] {
		return h.rank[a] > h.rank[b]
	}
	return h.seq[a] < h.seq[b]
}
func (h *readyHeap) Swap(i, j int) { h.nodes[i], h.nodes[j] = h.nodes[j], h.nodes[i] }
func (h *readyHeap) Push(x any) {
	k := x.(int)
	h.seq[k] = h.next
	h.next++
	h.nodes = append(h.nodes, k)
}
func (h *readyHeap) Pop() any {
	k := h.nodes[len(h.nodes)-1]
	h.nodes = h.nodes[:len(h.nodes)-1]
	return k
}

// finishHeap holds running nodes by finish time.
type finishHeap []struct {
	at time.Duration
	k  int
}

func (h finishHeap) Len() int           { return len(h) }
func (h finishHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h finishHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *finishHeap) Push(x any) {
	*h = append(*h, x.(struct {
		at time.Duration
		k  int
	}))
}
func (h *finishHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// scheduleMakespan is the floor of a walk over deps with the given
// durations and parallelism: the time the walk's own scheduling policy
// (start a ready node whenever a worker is free, longest chain first)
// takes when dispatching costs nothing. No executor that starts work as
// soon as it can, in this order, finishes sooner.
func scheduleMakespan(dur []time.Duration, deps [][]int, par int) time.Duration {
	n := len(deps)
	rank, succs := chainRanks(deps)
	wait := make([]int, n)
	ready := &readyHeap{rank: rank, seq: make([]int, n)}
	for k, ds := range deps {
		wait[k] = len(ds)
		if wait[k] == 0 {
			heap.Push(ready, k)
		}
	}
	var running finishHeap
	var now time.Duration
	for done := 0; done < n; {
		for running.Len() < par && ready.Len() > 0 {
			k := heap.Pop(ready).(int)
			heap.Push(&running, struct {
				at time.Duration
				k  int
			}{now + dur[k], k})
		}
		// Finish everything that ends at the next finish time.
		next := running[0].at
		for running.Len() > 0 && running[0].at == next {
			f := heap.Pop(&running).(struct {
				at time.Duration
				k  int
			})
			done++
			for _, s := range succs[f.k] {
				if wait[s]--; wait[s] == 0 {
					heap.Push(ready, s)
				}
			}
		}
		now = next
	}
	return now
}

// windowBound is a lower bound on the makespan of any schedule of unit
// nodes over deps on par workers: the smallest m for which no time window
// must hold more nodes than par workers can run in it. A node at depth d
// (longest chain ending with it) cannot start before step d-1; one with
// rank r must start by step m-r.
func windowBound(deps [][]int, par int) int {
	n := len(deps)
	rank, _ := chainRanks(deps)
	depth := make([]int, n)
	crit := 0
	for k, ds := range deps {
		m := 0
		for _, d := range ds {
			m = max(m, depth[d])
		}
		depth[k] = m + 1
		crit = max(crit, rank[k])
	}
	for m := crit; ; m++ {
		feasible := true
		for a := 0; a < m && feasible; a++ {
			for b := a; b < m; b++ {
				forced := 0
				for k := range n {
					if depth[k]-1 >= a && m-rank[k] <= b {
						forced++
					}
				}
				if forced > par*(b-a+1) {
					feasible = false
					break
				}
			}
		}
		if feasible {
			return m
		}
	}
}

// TestCriticalPathBound shows what the critical-path benchmark can reach
// at best: with items of equal length, no schedule of its graph takes
// fewer than 40 item lengths (windowBound), the walk's policy takes
// exactly 40 (scheduleMakespan), and the simple bound the benchmark's
// "efficiency" divides by — the larger of the critical path (38) and the
// total work over the parallelism (31.25) — is 38. So "efficiency" cannot
// pass 38/40 = 0.95 on this graph for any executor, and
// "schedule-efficiency", against the policy's own zero-cost schedule, is
// the figure that measures the walk's overhead.
func TestCriticalPathBound(t *testing.T) {
	const n, par = 2000, 64
	deps := randomDAG(n, 3, 7)
	rank, _ := chainRanks(deps)
	crit := 0
	for _, r := range rank {
		crit = max(crit, r)
	}
	require.Equal(t, 38, crit)
	dur := make([]time.Duration, n)
	for k := range dur {
		dur[k] = time.Millisecond
	}
	assert.Equal(t, 40, windowBound(deps, par), "no schedule is shorter")
	assert.Equal(t, 40*time.Millisecond, scheduleMakespan(dur, deps, par), "the walk's policy is optimal here")
}

// TestScheduleMakespan checks the simulated schedule on small graphs whose
// best schedule is known.
func TestScheduleMakespan(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		deps [][]int
		dur  []time.Duration
		par  int
		want time.Duration
	}{
		{"chain", [][]int{nil, {0}, {1}}, []time.Duration{ms, 2 * ms, 3 * ms}, 4, 6 * ms},
		{"independent, enough workers", [][]int{nil, nil, nil}, []time.Duration{ms, 2 * ms, 3 * ms}, 3, 3 * ms},
		{"independent, one worker", [][]int{nil, nil, nil}, []time.Duration{ms, 2 * ms, 3 * ms}, 1, 6 * ms},
		// Node 0 heads the longer chain: the policy starts it first even
		// though node 1 became ready at the same time.
		{"longest chain first", [][]int{nil, nil, {0}, {2}}, []time.Duration{ms, ms, ms, ms}, 1, 4 * ms},
		{"diamond", [][]int{nil, {0}, {0}, {1, 2}}, []time.Duration{ms, 2 * ms, ms, ms}, 2, 4 * ms},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, scheduleMakespan(tc.dur, tc.deps, tc.par))
		})
	}
}
