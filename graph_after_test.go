package converge_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/internal/errtext"
)

// callLog records, in order, the calls the walk makes to the items of a
// graph, so that a test can tell what ended before what started: an item
// starts at its first call and ends at its last.
type callLog struct {
	mu    sync.Mutex
	calls []converge.ID
}

func (l *callLog) add(id converge.ID) {
	l.mu.Lock()
	l.calls = append(l.calls, id)
	l.mu.Unlock()
}

// first and last return the positions of id's first and last calls, -1
// when it had none.
func (l *callLog) first(id converge.ID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Index(l.calls, id)
}

func (l *callLog) last(id converge.ID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.calls) - 1; i >= 0; i-- {
		if l.calls[i] == id {
			return i
		}
	}
	return -1
}

// logged wraps the Node of a convergetest.Item: it logs every call, and its
// Apply and ApplyDry take hold before they return (on the fake clock of a
// synctest bubble), so that an item not made to wait for it runs in the
// meantime. onApply, when set, runs once the hold is over.
type logged struct {
	converge.Node
	log     *callLog
	hold    time.Duration
	onApply func()
}

func (n *logged) StateCurrent(ctx context.Context, d converge.DepStates) (any, error) {
	n.log.add(n.ID())
	return n.Node.StateCurrent(ctx, d)
}

func (n *logged) StateGoal(ctx context.Context, d converge.DepStates) (any, error) {
	n.log.add(n.ID())
	return n.Node.StateGoal(ctx, d)
}

func (n *logged) StateClean(ctx context.Context, d converge.DepStates) (any, error) {
	n.log.add(n.ID())
	return n.Node.(converge.CleanNode).StateClean(ctx, d)
}

func (n *logged) Check(ctx context.Context, c, t any) (converge.Decision, error) {
	n.log.add(n.ID())
	return n.Node.Check(ctx, c, t)
}

func (n *logged) Apply(ctx context.Context, c, t any) (any, error) {
	return n.run(ctx, func() (any, error) { return n.Node.Apply(ctx, c, t) })
}

func (n *logged) ApplyDry(ctx context.Context, c, t any) (any, error) {
	return n.run(ctx, func() (any, error) { return n.Node.ApplyDry(ctx, c, t) })
}

func (n *logged) run(ctx context.Context, f func() (any, error)) (any, error) {
	defer n.log.add(n.ID())
	if n.hold > 0 {
		t := time.NewTimer(n.hold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if n.onApply != nil {
		n.onApply()
	}
	return f()
}

// afterSpec is one item of a test graph: a convergetest.Item that has something
// to do (a Present one is missing, an Absent one exists).
type afterSpec struct {
	id   converge.ID
	p    converge.Presence
	deps []converge.ID
	// hold makes its Apply take an hour of the bubble's fake clock.
	hold bool
	// fail makes its Apply (and ApplyDry) fail.
	fail bool
}

// afterGraph builds the items of specs, logging their calls in log, and
// the ordering edges: each edge is x, then the items x comes after. With
// clean every item exists, ready to be removed.
func afterGraph(log *callLog, specs []afterSpec, edges [][]converge.ID, clean bool) (*converge.Graph, map[converge.ID]*convergetest.Item) {
	g := converge.NewGraph()
	items := map[converge.ID]*convergetest.Item{}
	for _, s := range specs {
		it := &convergetest.Item{Key: s.id, Goal: "up"}
		if s.p == converge.Absent || clean {
			it.Value = "old"
		}
		if s.fail {
			it.FailAt(converge.PhaseApply, -1, nil)
		}
		n := &logged{Node: it.Node(), log: log}
		if s.hold {
			n.hold = time.Hour
		}
		items[s.id] = it
		g.Add(n, s.p, s.deps...)
	}
	for _, e := range edges {
		g.After(e[0], e[1:]...)
	}
	return g, items
}

// walkKinds are the walks the tests run, by name.
var walkKinds = map[string]func(*converge.Walker, context.Context, *converge.Graph) (*converge.Report, error){
	"apply":     (*converge.Walker).Apply,
	"apply dry": (*converge.Walker).ApplyDry,
	"clean":     (*converge.Walker).Clean,
	"clean dry": (*converge.Walker).CleanDry,
}

// assertBefore checks that every pair's first item ended before its second
// started.
func assertBefore(t *testing.T, log *callLog, pairs [][2]converge.ID) {
	t.Helper()
	for _, p := range pairs {
		end, start := log.last(p[0]), log.first(p[1])
		require.GreaterOrEqual(t, end, 0, "%s ran", p[0])
		require.GreaterOrEqual(t, start, 0, "%s ran", p[1])
		assert.Less(t, end, start, "%s must end before %s starts", p[0], p[1])
	}
}

// In every walk up an item starts after the items it is ordered after
// reached their presence, whatever the presences. Each graph adds the later
// item first and makes the earlier one slow, so a walk that ignored the
// edge would run the later one first: on one worker by insertion order, on
// several while the earlier one holds.
func TestAfterOrdersTheWalkUp(t *testing.T) {
	P, A := converge.Present, converge.Absent
	tests := []struct {
		name  string
		specs []afterSpec
		edges [][]converge.ID
		// before lists pairs: the first ends before the second starts.
		before [][2]converge.ID
	}{
		{name: "present after present",
			specs: []afterSpec{{id: "x", p: P}, {id: "y", p: P, hold: true}}, edges: [][]converge.ID{{"x", "y"}},
			before: [][2]converge.ID{{"y", "x"}}},
		{name: "present after absent: remove the old bridge, then create the new one",
			specs: []afterSpec{{id: "br-new", p: P}, {id: "br-old", p: A, hold: true}}, edges: [][]converge.ID{{"br-new", "br-old"}},
			before: [][2]converge.ID{{"br-old", "br-new"}}},
		{name: "absent after present: download, then kill",
			specs: []afterSpec{{id: "old", p: A}, {id: "image", p: P, hold: true}}, edges: [][]converge.ID{{"old", "image"}},
			before: [][2]converge.ID{{"image", "old"}}},
		{name: "absent after absent, not reversed as a dependency would be",
			specs: []afterSpec{{id: "x", p: A}, {id: "y", p: A, hold: true}}, edges: [][]converge.ID{{"x", "y"}},
			before: [][2]converge.ID{{"y", "x"}}},
		{name: "after several",
			specs:  []afterSpec{{id: "x", p: P}, {id: "y1", p: A, hold: true}, {id: "y2", p: P, hold: true}},
			edges:  [][]converge.ID{{"x", "y1"}, {"x", "y2"}},
			before: [][2]converge.ID{{"y1", "x"}, {"y2", "x"}}},
		{name: "with dependents: the new bridge's port joins it after the old bridge is gone",
			specs: []afterSpec{
				{id: "port:eth0", p: P, deps: []converge.ID{"bridge:br-new"}},
				{id: "bridge:br-new", p: P},
				{id: "bridge:br-old", p: A, hold: true},
			},
			edges:  [][]converge.ID{{"bridge:br-new", "bridge:br-old"}},
			before: [][2]converge.ID{{"bridge:br-old", "bridge:br-new"}, {"bridge:br-new", "port:eth0"}, {"bridge:br-old", "port:eth0"}}},
		{name: "beside a dependency that says the same",
			specs: []afterSpec{{id: "x", p: P, deps: []converge.ID{"y"}}, {id: "y", p: P, hold: true}}, edges: [][]converge.ID{{"x", "y", "y"}},
			before: [][2]converge.ID{{"y", "x"}}},
		{name: "an absent dependency removed after its dependent, and an edge before both",
			specs:  []afterSpec{{id: "db", p: A}, {id: "app", p: A, deps: []converge.ID{"db"}}, {id: "gate", p: P, hold: true}},
			edges:  [][]converge.ID{{"app", "gate"}},
			before: [][2]converge.ID{{"gate", "app"}, {"app", "db"}}},
	}
	for _, tt := range tests {
		for _, walk := range []string{"apply", "apply dry"} {
			for _, par := range []int{1, 4} {
				t.Run(fmt.Sprintf("%s/%s/parallelism %d", tt.name, walk, par), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						log := &callLog{}
						g, _ := afterGraph(log, tt.specs, tt.edges, false)
						w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: par})
						require.NoError(t, err)
						rep, err := walkKinds[walk](w, t.Context(), g)
						require.NoError(t, err)
						want := converge.OutcomeChanged
						if walk == "apply dry" {
							want = converge.OutcomeWouldChange
						}
						assert.Equal(t, len(tt.specs), rep.Count(want), rep.Summary())
						assertBefore(t, log, tt.before)
					})
				})
			}
		}
	}
}

// An item after one that failed, waits or did not reach its presence does
// not run: it waits for it, as for a failed dependency, and its own
// dependents wait for it in turn.
func TestAfterAFailureMakesTheItemsAfterItWait(t *testing.T) {
	P, A := converge.Present, converge.Absent
	tests := []struct {
		name  string
		walk  string
		specs []afterSpec
		edges [][]converge.ID
		// waiting maps the items that wait to what they wait for; every
		// other item but those in failed changed.
		waiting map[converge.ID][]converge.ID
		failed  []converge.ID
	}{
		{name: "present after a failed present", walk: "apply",
			specs: []afterSpec{{id: "x", p: P}, {id: "y", p: P, fail: true}, {id: "w", p: P, deps: []converge.ID{"x"}}, {id: "z", p: P}},
			edges: [][]converge.ID{{"x", "y"}}, failed: []converge.ID{"y"},
			waiting: map[converge.ID][]converge.ID{"x": {"y"}, "w": {"x"}}},
		{name: "present after a waiting item", walk: "apply",
			specs: []afterSpec{{id: "x", p: P}, {id: "y", p: P, deps: []converge.ID{"v"}}, {id: "v", p: P, fail: true}},
			edges: [][]converge.ID{{"x", "y"}}, failed: []converge.ID{"v"},
			waiting: map[converge.ID][]converge.ID{"y": {"v"}, "x": {"y"}}},
		{name: "present after an absent item that could not be removed", walk: "apply",
			specs: []afterSpec{{id: "br-new", p: P}, {id: "br-old", p: A, fail: true}, {id: "port", p: P, deps: []converge.ID{"br-new"}}},
			edges: [][]converge.ID{{"br-new", "br-old"}}, failed: []converge.ID{"br-old"},
			waiting: map[converge.ID][]converge.ID{"br-new": {"br-old"}, "port": {"br-new"}}},
		{name: "absent after a failed present", walk: "apply",
			specs: []afterSpec{{id: "old", p: A}, {id: "image", p: P, fail: true}},
			edges: [][]converge.ID{{"old", "image"}}, failed: []converge.ID{"image"},
			waiting: map[converge.ID][]converge.ID{"old": {"image"}}},
		{name: "dry run: after an item whose simulation failed", walk: "apply dry",
			specs: []afterSpec{{id: "x", p: P}, {id: "y", p: A, fail: true}, {id: "z", p: P}},
			edges: [][]converge.ID{{"x", "y"}}, failed: []converge.ID{"y"},
			waiting: map[converge.ID][]converge.ID{"x": {"y"}}},
		{name: "an edge beside a dependency names it once", walk: "apply",
			specs: []afterSpec{{id: "x", p: P, deps: []converge.ID{"y"}}, {id: "y", p: P, fail: true}},
			edges: [][]converge.ID{{"x", "y"}}, failed: []converge.ID{"y"},
			waiting: map[converge.ID][]converge.ID{"x": {"y"}}},
		{name: "after two failures, waits for both", walk: "apply",
			specs: []afterSpec{{id: "x", p: P}, {id: "y1", p: P, fail: true}, {id: "y2", p: A, fail: true}},
			edges: [][]converge.ID{{"x", "y1", "y2"}}, failed: []converge.ID{"y1", "y2"},
			waiting: map[converge.ID][]converge.ID{"x": {"y1", "y2"}}},
		{name: "clean: the item removed first fails, the one removed after it waits", walk: "clean",
			specs: []afterSpec{{id: "x", p: P, fail: true}, {id: "y", p: P}, {id: "z", p: P}},
			edges: [][]converge.ID{{"x", "y"}}, failed: []converge.ID{"x"},
			waiting: map[converge.ID][]converge.ID{"y": {"x"}}},
	}
	for _, tt := range tests {
		for _, par := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/parallelism %d", tt.name, par), func(t *testing.T) {
				log := &callLog{}
				g, items := afterGraph(log, tt.specs, tt.edges, tt.walk == "clean")
				w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: par})
				require.NoError(t, err)
				rep, err := walkKinds[tt.walk](w, t.Context(), g)
				require.ErrorIs(t, err, convergetest.ErrInjected)
				for _, it := range rep.Items {
					switch {
					case tt.waiting[it.ID] != nil:
						assert.Equal(t, converge.OutcomeWaiting, it.Outcome, it.ID)
						assert.ElementsMatch(t, tt.waiting[it.ID], it.WaitingFor, it.ID)
						assert.Zero(t, items[it.ID].Calls("StateCurrent"), "%s did not run", it.ID)
					case slices.Contains(tt.failed, it.ID):
						assert.Equal(t, converge.OutcomeFailed, it.Outcome, it.ID)
					case tt.walk == "apply dry":
						assert.Equal(t, converge.OutcomeWouldChange, it.Outcome, it.ID)
					default:
						assert.Equal(t, converge.OutcomeChanged, it.Outcome, it.ID)
					}
				}
			})
		}
	}
}

// Fail-fast and cancellation treat an ordering edge as they treat a
// dependency: the same graph with one or the other reports the same
// outcomes, item by item.
func TestAfterStopsAsADependencyDoes(t *testing.T) {
	tests := []struct {
		name string
		// failFast sets WalkerConfig.FailFast and makes b fail; otherwise
		// b's Apply cancels the walk. b is slow, so a and e are done by
		// then, whatever the parallelism.
		failFast bool
	}{
		{name: "fail-fast", failFast: true},
		{name: "cancel"},
	}
	for _, tt := range tests {
		for _, par := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/parallelism %d", tt.name, par), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					// a; b slow; c after b; d after c; e alone.
					run := func(ordered bool) *converge.Report {
						ctx, cancel := context.WithCancel(t.Context())
						defer cancel()
						g := converge.NewGraph()
						add := func(id converge.ID, hold bool, fail bool, onApply func(), before ...converge.ID) {
							it := &convergetest.Item{Key: id, Goal: "up"}
							if fail {
								it.FailAt(converge.PhaseApply, -1, nil)
							}
							n := &logged{Node: it.Node(), log: &callLog{}, onApply: onApply}
							if hold {
								n.hold = time.Hour
							}
							if ordered {
								g.Add(n, converge.Present)
								g.After(id, before...)
							} else {
								g.Add(n, converge.Present, before...)
							}
						}
						var onB func()
						if !tt.failFast {
							onB = cancel
						}
						add("a", false, false, nil)
						add("b", true, tt.failFast, onB)
						add("c", false, false, nil, "b")
						add("d", false, false, nil, "c")
						add("e", false, false, nil)
						w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: par, FailFast: tt.failFast})
						require.NoError(t, err)
						rep, err := w.Apply(ctx, g)
						require.Error(t, err)
						return rep
					}
					byDep, byAfter := run(false), run(true)
					for i, it := range byAfter.Items {
						dep := byDep.Items[i]
						assert.Equal(t, dep.Outcome, it.Outcome, it.ID)
						assert.Equal(t, dep.WaitingFor, it.WaitingFor, it.ID)
						assert.Equal(t, errors.Is(dep.Err, converge.ErrNotRun), errors.Is(it.Err, converge.ErrNotRun), it.ID)
					}
					c, _ := byAfter.Item("c")
					assert.NotEqual(t, converge.OutcomeChanged, c.Outcome, "c did not run after b")
				})
			})
		}
	}
}

// Clean reverses an ordering edge between two Present items and ignores one
// with an Absent end; either way it never waits in a cycle.
func TestAfterInClean(t *testing.T) {
	P, A := converge.Present, converge.Absent
	tests := []struct {
		name   string
		specs  []afterSpec
		edges  [][]converge.ID
		before [][2]converge.ID
		// together lists pairs that run at once: each starts before the
		// other ends (both hold).
		together [][2]converge.ID
	}{
		{name: "present pair reversed: the later one on the way up is removed first",
			specs: []afterSpec{{id: "y", p: P}, {id: "x", p: P, hold: true}}, edges: [][]converge.ID{{"x", "y"}},
			before: [][2]converge.ID{{"x", "y"}}},
		{name: "reversed with dependencies",
			specs: []afterSpec{
				{id: "vol", p: P}, {id: "db", p: P, hold: true},
				{id: "app", p: P, deps: []converge.ID{"db"}, hold: true},
			},
			edges:  [][]converge.ID{{"db", "vol"}},
			before: [][2]converge.ID{{"app", "db"}, {"db", "vol"}, {"app", "vol"}}},
		{name: "absent end ignored: the bridges of a replacement go at once",
			specs:    []afterSpec{{id: "br-old", p: A, hold: true}, {id: "br-new", p: P, hold: true}},
			edges:    [][]converge.ID{{"br-new", "br-old"}},
			together: [][2]converge.ID{{"br-old", "br-new"}}},
		{name: "absent end ignored where reversing would contradict a dependency",
			// The old container, attached to the network, goes before the
			// network changes; Clean removes it first, as its dependency
			// says, where the reversed edge would say the opposite.
			specs:  []afterSpec{{id: "net", p: P}, {id: "old", p: A, deps: []converge.ID{"net"}, hold: true}},
			edges:  [][]converge.ID{{"net", "old"}},
			before: [][2]converge.ID{{"old", "net"}}},
	}
	for _, tt := range tests {
		for _, walk := range []string{"clean", "clean dry"} {
			for _, par := range []int{1, 4} {
				if len(tt.together) > 0 && par == 1 {
					continue // one worker runs nothing at once
				}
				t.Run(fmt.Sprintf("%s/%s/parallelism %d", tt.name, walk, par), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						log := &callLog{}
						g, _ := afterGraph(log, tt.specs, tt.edges, true)
						w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: par})
						require.NoError(t, err)
						rep, err := walkKinds[walk](w, t.Context(), g)
						require.NoError(t, err)
						assert.Equal(t, converge.ModeClean, rep.Mode)
						assertBefore(t, log, tt.before)
						for _, p := range tt.together {
							assert.Less(t, log.first(p[0]), log.last(p[1]), "%s started before %s ended", p[0], p[1])
							assert.Less(t, log.first(p[1]), log.last(p[0]), "%s started before %s ended", p[1], p[0])
						}
					})
				})
			}
		}
	}
}

// The walk up and Clean of the network example both run: the edge that
// Clean could not honour without contradicting a dependency does not make
// the graph invalid.
func TestAfterNetworkChangeAppliesAndCleans(t *testing.T) {
	log := &callLog{}
	specs := []afterSpec{{id: "net", p: converge.Present}, {id: "old", p: converge.Absent, deps: []converge.ID{"net"}}}
	g, items := afterGraph(log, specs, [][]converge.ID{{"net", "old"}}, false)
	_, err := converge.Apply(t.Context(), g)
	require.NoError(t, err)
	assertBefore(t, log, [][2]converge.ID{{"old", "net"}})
	assert.Equal(t, "up", items["net"].Current())
	assert.Equal(t, "", items["old"].Current())
	_, err = converge.Clean(t.Context(), g)
	require.NoError(t, err)
	assert.Equal(t, "", items["net"].Current())
}

// graphErrors returns the *GraphError values of a validation error.
func graphErrors(t *testing.T, err error) []*converge.GraphError {
	t.Helper()
	var me interface{ WrappedErrors() []error }
	require.ErrorAs(t, err, &me)
	var out []*converge.GraphError
	for _, e := range me.WrappedErrors() {
		var ge *converge.GraphError
		require.ErrorAs(t, e, &ge)
		out = append(out, ge)
	}
	return out
}

func TestAfterValidate(t *testing.T) {
	P, A := converge.Present, converge.Absent
	type add struct {
		id   converge.ID
		p    converge.Presence
		deps []converge.ID
	}
	tests := []struct {
		name  string
		adds  []add
		edges [][]converge.ID
		// edgesFirst gives the edges before adding the items.
		edgesFirst bool
		// want are the sentinels of the problems, in order; none: valid.
		want  []error
		check func(t *testing.T, ge []*converge.GraphError)
	}{
		{name: "present after absent is allowed",
			adds: []add{{id: "br-old", p: A}, {id: "br-new", p: P}}, edges: [][]converge.ID{{"br-new", "br-old"}}},
		{name: "an edge given before its items are added", edgesFirst: true,
			edges: [][]converge.ID{{"b", "a"}}, adds: []add{{id: "a", p: P}, {id: "b", p: P}}},
		{name: "a present item depending on an absent one is still refused",
			adds: []add{{id: "br-old", p: A}, {id: "br-new", p: P, deps: []converge.ID{"br-old"}}},
			want: []error{converge.ErrPresentDependsOnAbsent}},
		{name: "an edge that repeats the order of an absent dependency",
			adds: []add{{id: "a", p: A}, {id: "b", p: A, deps: []converge.ID{"a"}}}, edges: [][]converge.ID{{"a", "b"}}},
		{name: "an edge that Clean ignores and would contradict a dependency",
			adds: []add{{id: "net", p: P}, {id: "old", p: A, deps: []converge.ID{"net"}}}, edges: [][]converge.ID{{"net", "old"}}},
		{name: "after an unknown item",
			adds: []add{{id: "a", p: P}, {id: "x", p: P}}, edges: [][]converge.ID{{"x", "ghost", "a", "ghost"}},
			want: []error{converge.ErrUnknownAfter},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, converge.ID("x"), ge[0].ID)
				assert.Equal(t, converge.ID("ghost"), ge[0].After)
				assert.Equal(t, 1, ge[0].Index)
				assert.Equal(t, `converge: item "x" is ordered after unknown item "ghost"`, ge[0].Error())
			}},
		{name: "an unknown item after a known one",
			adds: []add{{id: "a", p: P}}, edges: [][]converge.ID{{"ghost", "a"}, {"ghost", "a"}},
			want: []error{converge.ErrUnknownAfter},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, converge.ID("ghost"), ge[0].ID)
				assert.Equal(t, converge.ID("a"), ge[0].After)
				assert.Equal(t, -1, ge[0].Index)
				assert.Equal(t, `converge: unknown item "ghost" is ordered after "a"`, ge[0].Error())
			}},
		{name: "both ends unknown: each named once",
			edges: [][]converge.ID{{"x", "y"}},
			want:  []error{converge.ErrUnknownAfter, converge.ErrUnknownAfter},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Contains(t, ge[0].Error(), `unknown item "x"`)
				assert.Contains(t, ge[1].Error(), `unknown item "y"`)
			}},
		{name: "an item after itself",
			adds: []add{{id: "a", p: P}}, edges: [][]converge.ID{{"a", "a"}},
			want: []error{converge.ErrCycle},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, []converge.ID{"a"}, ge[0].Path)
				assert.Equal(t, `converge: order cycle (each item waits for the next): "a" -> "a"`, ge[0].Error())
			}},
		{name: "a cycle of dependencies and an ordering edge",
			adds: []add{{id: "a", p: P}, {id: "b", p: P, deps: []converge.ID{"a"}}, {id: "c", p: P, deps: []converge.ID{"b"}}},
			// a after c closes a -> c -> b -> a: a waits for c, c for b, b for a.
			edges: [][]converge.ID{{"a", "c"}},
			want:  []error{converge.ErrCycle},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, []converge.ID{"a", "c", "b"}, ge[0].Path)
				assert.Equal(t, converge.ID("a"), ge[0].ID)
				assert.Equal(t, `converge: order cycle (each item waits for the next): "a" -> "c" -> "b" -> "a"`, ge[0].Error())
			}},
		{name: "a cycle through an absent dependency, which Apply removes after its dependent",
			// b depends on a, so Apply removes b, then a; b after a says
			// the opposite.
			adds: []add{{id: "a", p: A}, {id: "b", p: A, deps: []converge.ID{"a"}}}, edges: [][]converge.ID{{"b", "a"}},
			want: []error{converge.ErrCycle},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, []converge.ID{"a", "b"}, ge[0].Path)
			}},
		{name: "a cycle of ordering edges alone, across presences",
			adds:  []add{{id: "a", p: P}, {id: "b", p: A}, {id: "c", p: P}},
			edges: [][]converge.ID{{"a", "b"}, {"b", "c"}, {"c", "a"}},
			want:  []error{converge.ErrCycle},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, []converge.ID{"a", "b", "c"}, ge[0].Path)
			}},
		{name: "a dependency cycle is reported once, as a dependency cycle",
			adds:  []add{{id: "p", p: P, deps: []converge.ID{"q"}}, {id: "q", p: P, deps: []converge.ID{"p"}}, {id: "r", p: P}},
			edges: [][]converge.ID{{"r", "p"}},
			want:  []error{converge.ErrCycle},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, `converge: dependency cycle: "p" -> "q" -> "p"`, ge[0].Error())
			}},
		{name: "a dependency cycle and an order cycle",
			adds: []add{
				{id: "p", p: P, deps: []converge.ID{"q"}}, {id: "q", p: P, deps: []converge.ID{"p"}},
				{id: "r", p: P}, {id: "s", p: P, deps: []converge.ID{"r"}},
			},
			edges: [][]converge.ID{{"r", "s"}},
			want:  []error{converge.ErrCycle, converge.ErrCycle},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, []converge.ID{"p", "q"}, ge[0].Path)
				assert.Equal(t, []converge.ID{"r", "s"}, ge[1].Path)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := converge.NewGraph()
			edges := func() {
				for _, e := range tt.edges {
					g.After(e[0], e[1:]...)
				}
			}
			if tt.edgesFirst {
				edges()
			}
			for _, a := range tt.adds {
				g.Add(fake(string(a.id)), a.p, a.deps...)
			}
			if !tt.edgesFirst {
				edges()
			}
			err := g.Validate()
			if len(tt.want) == 0 {
				require.NoError(t, err)
				_, err = converge.Apply(t.Context(), g)
				require.NoError(t, err)
				_, err = converge.Clean(t.Context(), g)
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, converge.ErrInvalidGraph)
			ge := graphErrors(t, err)
			require.Len(t, ge, len(tt.want), err.Error())
			for i, w := range tt.want {
				require.ErrorIs(t, ge[i], w)
				assert.Empty(t, errtext.Problems("converge", ge[i].Error(), []string{"converge: "}), ge[i].Error())
			}
			if tt.check != nil {
				tt.check(t, ge)
			}
			for _, walk := range []string{"apply", "clean"} {
				rep, werr := walkKinds[walk](mustWalker(t), t.Context(), g)
				assert.Nil(t, rep, walk)
				assert.ErrorIs(t, werr, converge.ErrInvalidGraph, walk)
			}
		})
	}
}

func mustWalker(t *testing.T) *converge.Walker {
	t.Helper()
	w, err := converge.NewWalker(converge.WalkerConfig{})
	require.NoError(t, err)
	return w
}

func TestAfterSentinelReadsOnce(t *testing.T) {
	assert.Empty(t, errtext.Problems("converge", converge.ErrUnknownAfter.Error(), []string{"converge: "}))
	ge := &converge.GraphError{Err: converge.ErrUnknownAfter, ID: "x", After: "y"}
	assert.Equal(t, `converge: ordering edge "x" after "y" names an unknown item`, ge.Error())
	assert.ErrorIs(t, ge, converge.ErrInvalidGraph)
}

// An ordering edge is not a dependency: x cannot read y's state, and the
// accessors keep the two apart.
func TestAfterIsNotADependency(t *testing.T) {
	var saw struct {
		ok  bool
		err error
	}
	y := &convergetest.Item{Key: "y", Goal: "up"}
	x := &convergetest.Item{Key: "x", GoalFunc: func(d converge.DepStates) (string, error) {
		_, saw.ok = d.State("y")
		_, saw.err = converge.DepState[string](d, "y")
		return "up", nil
	}}
	g := converge.NewGraph()
	g.Add(x.Node(), converge.Present)
	g.Add(y.Node(), converge.Present)
	g.After("x", "y")
	g.After("x", "y", "ghost-free")
	g.After("x") // no edge
	g.Add(fake("ghost-free"), converge.Present)

	assert.Nil(t, g.Dependencies("x"))
	assert.Equal(t, []converge.ID{"y", "y", "ghost-free"}, g.Afters("x"), "as given")
	assert.Nil(t, g.Afters("y"))
	order, err := g.Order()
	require.NoError(t, err)
	assert.Equal(t, []converge.ID{"x", "y", "ghost-free"}, order, "Order is the dependency order")

	_, err = converge.Apply(t.Context(), g)
	require.NoError(t, err)
	assert.False(t, saw.ok, "y's state is not shown to x")
	assert.ErrorIs(t, saw.err, converge.ErrUnknownDependency)
	assert.Equal(t, "up", x.Current())
}

func TestAfterRenders(t *testing.T) {
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "bridge:br-old", Value: "up"}).Node(), converge.Absent)
	g.Add((&convergetest.Item{Key: "bridge:br-new", Goal: "up"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "port:eth0", Goal: "up"}).Node(), converge.Present, "bridge:br-new")
	g.After("bridge:br-new", "bridge:br-old")
	g.After("port:eth0", "ghost")

	var dot, mermaid strings.Builder
	require.NoError(t, g.WriteDOT(&dot, nil))
	require.NoError(t, g.WriteMermaid(&mermaid, nil))
	assert.Equal(t, `digraph converge {
	rankdir=LR;
	node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];
	"bridge:br-old" [label="bridge:br-old", style="rounded,filled,dashed"];
	"bridge:br-new" [label="bridge:br-new"];
	"port:eth0" [label="port:eth0"];
	"bridge:br-new" -> "port:eth0";
	"bridge:br-old" -> "bridge:br-new" [style=dashed];
	"ghost" -> "port:eth0" [style=dashed];
}
`, dot.String())
	assert.Equal(t, `flowchart LR
	n0["bridge:br-old"]
	n1["bridge:br-new"]
	n2["port:eth0"]
	n1 --> n2
	n0 -.-> n1
	n3["ghost"]
	n3 -.-> n2
	style n0 stroke-dasharray:4 3
`, mermaid.String())
}

// afterModel is a random graph with ordering edges and the order its walks
// must keep, computed here from the definitions and not from the walk.
type afterModel struct {
	specs []afterSpec
	edges [][]converge.ID
	// up and clean list, per item, the items it waits for in a walk up
	// and in Clean.
	up, clean [][]int
}

func newAfterModel(r *rand.Rand, n int, failRate float64) *afterModel {
	m := &afterModel{up: make([][]int, n), clean: make([][]int, n)}
	present := make([]bool, n)
	deps := make([][]int, n)
	id := func(k int) converge.ID { return converge.ID(fmt.Sprintf("n%02d", k)) }
	for k := range n {
		present[k] = r.IntN(3) > 0
		s := afterSpec{id: id(k), p: converge.Present, fail: r.Float64() < failRate}
		if !present[k] {
			s.p = converge.Absent
		}
		for range r.IntN(3) {
			if k == 0 {
				break
			}
			d := r.IntN(k)
			if (present[k] && !present[d]) || slices.Contains(deps[k], d) {
				continue
			}
			deps[k] = append(deps[k], d)
			s.deps = append(s.deps, id(d))
		}
		m.specs = append(m.specs, s)
	}
	wait := func(w [][]int, k, j int) {
		if !slices.Contains(w[k], j) {
			w[k] = append(w[k], j)
		}
	}
	for k := range n {
		for _, d := range deps[k] {
			switch {
			case present[k]:
				wait(m.up, k, d)
			case !present[d]:
				wait(m.up, d, k)
			}
			wait(m.clean, d, k)
		}
	}
	// Ordering edges between any two items, in either direction: some
	// make cycles.
	for range r.IntN(n/2 + 1) {
		x, y := r.IntN(n), r.IntN(n)
		if x == y {
			continue
		}
		m.edges = append(m.edges, []converge.ID{id(x), id(y)})
		wait(m.up, x, y)
		if present[x] && present[y] {
			wait(m.clean, y, x)
		}
	}
	return m
}

// acyclic tells, by Kahn's algorithm, whether the waits have no cycle.
func acyclic(waits [][]int) bool {
	n := len(waits)
	indeg := make([]int, n)
	next := make([][]int, n)
	for k, ws := range waits {
		indeg[k] = len(ws)
		for _, j := range ws {
			next[j] = append(next[j], k)
		}
	}
	var queue []int
	for k := range n {
		if indeg[k] == 0 {
			queue = append(queue, k)
		}
	}
	seen := 0
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		seen++
		for _, s := range next[k] {
			if indeg[s]--; indeg[s] == 0 {
				queue = append(queue, s)
			}
		}
	}
	return seen == n
}

// On random graphs with random ordering edges: Validate refuses exactly the
// graphs whose walk up would wait in a cycle, naming a real cycle; Clean of
// every valid graph is acyclic; and every walk keeps its order, fails as it
// should and loses nothing.
func TestAfterPropertiesOnRandomGraphs(t *testing.T) {
	valid := 0
	for seed := range 300 {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		n := 2 + r.IntN(20)
		m := newAfterModel(r, n, []float64{0, 0.1}[seed%2])
		index := map[converge.ID]int{}
		for k, s := range m.specs {
			index[s.id] = k
		}
		g, _ := afterGraph(&callLog{}, m.specs, m.edges, false)
		err := g.Validate()
		if !acyclic(m.up) {
			require.ErrorIs(t, err, converge.ErrCycle, "seed %d", seed)
			for _, ge := range graphErrors(t, err) {
				for i, id := range ge.Path {
					next := index[ge.Path[(i+1)%len(ge.Path)]]
					require.Contains(t, m.up[index[id]], next, "seed %d: %s", seed, ge)
				}
			}
			continue
		}
		require.NoError(t, err, "seed %d", seed)
		require.True(t, acyclic(m.clean), "seed %d: Clean of a valid graph waits in a cycle", seed)
		valid++
		for _, walk := range []string{"apply", "clean"} {
			waits := m.up
			if walk == "clean" {
				waits = m.clean
			}
			log := &callLog{}
			g, items := afterGraph(log, m.specs, m.edges, walk == "clean")
			w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 1 + r.IntN(6)})
			require.NoError(t, err)
			rep, _ := walkKinds[walk](w, t.Context(), g)
			require.NotNil(t, rep)
			for k, it := range rep.Items {
				var blockers []converge.ID
				for _, j := range waits[k] {
					if o := rep.Items[j].Outcome; o == converge.OutcomeFailed || o == converge.OutcomeWaiting {
						blockers = append(blockers, rep.Items[j].ID)
					}
				}
				if len(blockers) > 0 {
					require.Equal(t, converge.OutcomeWaiting, it.Outcome, "seed %d %s %s", seed, walk, it.ID)
					require.ElementsMatch(t, blockers, it.WaitingFor, "seed %d %s %s", seed, walk, it.ID)
					require.Zero(t, items[it.ID].Calls("StateCurrent"))
					continue
				}
				if m.specs[k].fail {
					require.Equal(t, converge.OutcomeFailed, it.Outcome, "seed %d %s %s", seed, walk, it.ID)
				} else {
					require.Equal(t, converge.OutcomeChanged, it.Outcome, "seed %d %s %s: %v", seed, walk, it.ID, it.Err)
				}
				for _, j := range waits[k] {
					require.Less(t, log.last(rep.Items[j].ID), log.first(it.ID), "seed %d %s: %s started before %s ended", seed, walk, it.ID, rep.Items[j].ID)
				}
			}
		}
	}
	assert.Greater(t, valid, 100, "enough valid graphs to walk")
}
