package converge

import (
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/go-multierror"
)

// Graph is a set of items with their dependencies, ordering edges and
// presence. Items are kept in insertion order, which makes Order and every
// report deterministic.
//
// Two relations are kept apart. A dependency (Add) says an item needs
// another: it reads its state, waits for it and is removed before it. An
// ordering edge (After) only says when an item starts: after another
// reached its presence, between any presences ("remove the old bridge,
// then create the new one"). A failure holds back the items after it by
// either relation, which report OutcomeWaiting. Clean reverses the
// dependencies and the ordering edges between two Present items, and
// ignores the ordering edges with an Absent end (see After).
//
// The zero value is an empty graph ready to use. Add and After record
// without failing; Validate (which every walk calls first) reports every
// problem at once. A Graph may be walked by several walks concurrently, but
// Add and After must not run concurrently with anything else on the same
// Graph.
type Graph struct {
	mu      sync.Mutex
	entries []entry
	afters  []afterEdge // in the order After was called
	plan    *compiled   // cached result of compile; nil after Add or After
	planErr error
}

// afterEdge is one call of After: x starts after each of ys.
type afterEdge struct {
	x  ID
	ys []ID
}

type entry struct {
	node     Node
	id       ID
	presence Presence
	deps     []ID
}

// NewGraph returns an empty graph.
func NewGraph() *Graph { return &Graph{} }

// Add adds node with its presence and the IDs of the items it depends on.
// Problems (nil node, empty or duplicate ID, unknown dependency, cycle, a
// Present item depending on an Absent one, an Absent item without
// StateClean) are reported by Validate, not here.
func (g *Graph) Add(n Node, p Presence, deps ...ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var id ID
	if n != nil {
		id = n.ID()
	}
	g.entries = append(g.entries, entry{node: n, id: id, presence: p, deps: append([]ID(nil), deps...)})
	g.plan, g.planErr = nil, nil
}

// After adds ordering edges: item x starts only once each of ys has reached
// its presence (a Present y converged, an Absent y is gone). Unlike a
// dependency it is allowed between any presences, x does not read the
// states of ys (DepStates does not show them), and Dependencies does not
// list them. Items may be added before or after the edge.
//
// In Apply and ApplyDry x waits for each y to succeed (simulated, in a dry
// run). When a y fails, waits or does not run, x does not run either: it
// is reported as OutcomeWaiting for y, and the items after x wait in turn,
// as for a failed dependency; fail-fast and cancellation treat it alike.
//
// Clean reverses an edge between two Present items (x is removed before
// y, as systemd stops units in the reverse of their start order) and
// ignores an edge with an Absent end: that edge orders a replacement (old
// bridge out, new one in; kill, then download), which a Clean, removing
// both, does not make, as Terraform's destroy and balena's removal of an
// app order by dependencies alone. Reversed, such an edge could contradict
// a dependency; this way Clean never waits in a cycle.
//
// Validate refuses an edge naming an item not in the graph
// (ErrUnknownAfter), an item after itself, and a cycle of ordering edges
// and dependencies in the order Apply waits in (ErrCycle, with the path).
func (g *Graph) After(x ID, ys ...ID) {
	if len(ys) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.afters = append(g.afters, afterEdge{x: x, ys: append([]ID(nil), ys...)})
	g.plan, g.planErr = nil, nil
}

// Afters returns the IDs that item id is ordered after (After), as given,
// in the order given; nil when there are none.
func (g *Graph) Afters(id ID) []ID {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []ID
	for _, a := range g.afters {
		if a.x == id {
			out = append(out, a.ys...)
		}
	}
	return out
}

// Len returns the number of items added, including invalid ones.
func (g *Graph) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.entries)
}

// Validate checks the graph and returns nil or an error aggregating one
// *GraphError per problem, each naming its culprits. The error matches
// ErrInvalidGraph and the sentinel of every problem it holds.
func (g *Graph) Validate() error {
	_, err := g.compile()
	return err
}

// Order returns the item IDs in a deterministic dependency order: every item
// comes after its dependencies, and otherwise items keep insertion order as
// far as possible. Ordering edges (After) do not change it. It fails as
// Validate does.
func (g *Graph) Order() ([]ID, error) {
	c, err := g.compile()
	if err != nil {
		return nil, err
	}
	out := make([]ID, len(c.order))
	for i, idx := range c.order {
		out[i] = c.items[idx].id
	}
	return out, nil
}

// Node returns the node with the given ID and its presence.
func (g *Graph) Node(id ID) (Node, Presence, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.entries {
		if e.id == id && e.node != nil {
			return e.node, e.presence, true
		}
	}
	return nil, Present, false
}

// Dependencies returns the IDs that item id depends on, as added.
func (g *Graph) Dependencies(id ID) []ID {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.entries {
		if e.id == id && e.node != nil {
			return append([]ID(nil), e.deps...)
		}
	}
	return nil
}

// GraphError is one problem found by Validate. Err is the sentinel naming
// the kind of problem (ErrNilItem, ErrEmptyID, ErrDuplicateID,
// ErrUnknownDependency, ErrUnknownAfter, ErrCycle,
// ErrPresentDependsOnAbsent, ErrNoClean); the other fields name the
// culprits.
type GraphError struct {
	Err error
	// Index is the insertion index of the offending Add call (for an
	// ordering edge, of its item x; -1 when x was never added).
	Index int
	// ID is the offending item (for an ordering edge, its item x).
	ID ID
	// Dependency is the dependency at fault, for ErrUnknownDependency and
	// ErrPresentDependsOnAbsent.
	Dependency ID
	// After is the item ID is ordered after, for ErrUnknownAfter.
	After ID
	// Path is the cycle, for ErrCycle: each item depends on the next, and
	// the last depends on the first. In a cycle through ordering edges,
	// each item waits for the next in Apply: a Present item for its
	// dependencies, an Absent one for its Absent dependents, and every
	// item for the items it is ordered after.
	Path []ID

	unknown ID   // for ErrUnknownAfter: which of ID and After is unknown
	ordered bool // for ErrCycle: the cycle runs through ordering edges
}

// Error describes the problem, naming its culprit.
func (e *GraphError) Error() string {
	switch e.Err {
	case ErrNilItem:
		return fmt.Sprintf("converge: item #%d is nil", e.Index)
	case ErrEmptyID:
		return fmt.Sprintf("converge: item #%d has an empty ID", e.Index)
	case ErrDuplicateID:
		return fmt.Sprintf("converge: item #%d: duplicate ID %q", e.Index, e.ID)
	case ErrUnknownDependency:
		return fmt.Sprintf("converge: item %q depends on unknown item %q", e.ID, e.Dependency)
	case ErrUnknownAfter:
		switch e.unknown {
		case e.After:
			return fmt.Sprintf("converge: item %q is ordered after unknown item %q", e.ID, e.After)
		case e.ID:
			return fmt.Sprintf("converge: unknown item %q is ordered after %q", e.ID, e.After)
		}
		return fmt.Sprintf("converge: ordering edge %q after %q names an unknown item", e.ID, e.After)
	case ErrCycle:
		parts := make([]string, 0, len(e.Path)+1)
		for _, id := range e.Path {
			parts = append(parts, fmt.Sprintf("%q", id))
		}
		if len(e.Path) > 0 {
			parts = append(parts, fmt.Sprintf("%q", e.Path[0]))
		}
		if e.ordered {
			return "converge: order cycle (each item waits for the next): " + strings.Join(parts, " -> ")
		}
		return "converge: dependency cycle: " + strings.Join(parts, " -> ")
	case ErrPresentDependsOnAbsent:
		return fmt.Sprintf("converge: present item %q depends on absent item %q", e.ID, e.Dependency)
	case ErrNoClean:
		return fmt.Sprintf("converge: item %q is marked absent but has no StateClean", e.ID)
	}
	return fmt.Sprintf("converge: item %q: %v", e.ID, e.Err)
}

// Is matches ErrInvalidGraph and the problem's own sentinel.
func (e *GraphError) Is(target error) bool { return target == ErrInvalidGraph || target == e.Err }

// compiled is the validated, index-based form of a graph used by walks.
type compiled struct {
	items      []centry
	index      map[ID]int
	order      []int // topological order (dependencies first)
	hasAbsent  bool
	dependents [][]int

	schedOnce [2]sync.Once
	sched     [2]*schedule

	kindOnce  sync.Once
	itemKinds *itemKinds // see kinds

	spanOnce  [2]sync.Once
	spanAttrs [2][]SpanAttr // see itemSpanAttrs

	refresh *compiledRefresh // nil when no item is a Refresher
}

type centry struct {
	node     Node
	id       ID
	presence Presence
	deps     []int
	after    []int     // the items it is ordered after (After), without repeats
	clean    CleanNode // nil when the node cannot be cleaned
}

func (g *Graph) compile() (*compiled, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.plan != nil || g.planErr != nil {
		return g.plan, g.planErr
	}
	g.plan, g.planErr = compileEntries(g.entries, g.afters)
	return g.plan, g.planErr
}

func compileEntries(entries []entry, afters []afterEdge) (*compiled, error) {
	var errs []error
	add := func(e *GraphError) { errs = append(errs, e) }

	c := &compiled{index: make(map[ID]int, len(entries)), items: make([]centry, 0, len(entries))}
	src := make([]int, 0, len(entries)) // entry index of each compiled item
	for i, e := range entries {
		switch {
		case e.node == nil:
			add(&GraphError{Err: ErrNilItem, Index: i})
			continue
		case e.id == "":
			add(&GraphError{Err: ErrEmptyID, Index: i})
			continue
		}
		if _, dup := c.index[e.id]; dup {
			add(&GraphError{Err: ErrDuplicateID, Index: i, ID: e.id})
			continue
		}
		ce := centry{node: e.node, id: e.id, presence: e.presence}
		ce.clean, _ = e.node.(CleanNode)
		if e.presence == Absent {
			c.hasAbsent = true
			if ce.clean == nil {
				add(&GraphError{Err: ErrNoClean, Index: i, ID: e.id})
			}
		}
		c.index[e.id] = len(c.items)
		c.items = append(c.items, ce)
		src = append(src, i)
	}
	c.dependents = make([][]int, len(c.items))
	for k := range c.items {
		e := entries[src[k]]
		seen := make(map[int]bool, len(e.deps))
		for _, d := range e.deps {
			j, ok := c.index[d]
			if !ok {
				add(&GraphError{Err: ErrUnknownDependency, Index: src[k], ID: e.id, Dependency: d})
				continue
			}
			if seen[j] {
				continue // the same dependency listed twice is harmless
			}
			seen[j] = true
			if e.presence == Present && c.items[j].presence == Absent {
				add(&GraphError{Err: ErrPresentDependsOnAbsent, Index: src[k], ID: e.id, Dependency: d})
			}
			c.items[k].deps = append(c.items[k].deps, j)
			c.dependents[j] = append(c.dependents[j], k)
		}
	}
	compileAfters(c, afters, src, add)
	order, cycles := topoOrder(c.items)
	ordered := orderCycles(c.items)
	for i, cyc := range append(cycles, ordered...) {
		path := make([]ID, len(cyc))
		for i, k := range cyc {
			path[i] = c.items[k].id
		}
		add(&GraphError{Err: ErrCycle, Index: src[cyc[0]], ID: path[0], Path: path, ordered: i >= len(cycles)})
	}
	if err := joinGraphErrors(errs); err != nil {
		return nil, err
	}
	c.order = order
	c.refresh = compileRefresh(c)
	return c, nil
}

// compileAfters resolves the ordering edges into c.items[x].after,
// dropping repeats, and reports each unknown item once per edge that names
// it (an unknown x once). A self edge is kept: orderCycles reports it as a
// cycle, as topoOrder does a self dependency.
func compileAfters(c *compiled, afters []afterEdge, src []int, add func(*GraphError)) {
	if len(afters) == 0 {
		return
	}
	var seen map[[2]int]bool
	reported := map[[2]ID]bool{}
	unknown := func(x ID, xi int, y, which ID) {
		key := [2]ID{x, y}
		if which == x {
			key = [2]ID{x}
		}
		if !reported[key] {
			reported[key] = true
			add(&GraphError{Err: ErrUnknownAfter, Index: xi, ID: x, After: y, unknown: which})
		}
	}
	for _, a := range afters {
		x, xok := c.index[a.x]
		xi := -1
		if xok {
			xi = src[x]
		} else {
			unknown(a.x, xi, a.ys[0], a.x)
		}
		for _, y := range a.ys {
			j, yok := c.index[y]
			if !yok {
				unknown(a.x, xi, y, y)
				continue
			}
			if !xok || seen[[2]int{x, j}] {
				continue
			}
			if seen == nil {
				seen = map[[2]int]bool{}
			}
			seen[[2]int{x, j}] = true
			c.items[x].after = append(c.items[x].after, j)
		}
	}
}

// orderCycles returns the cycles of the order Apply waits in that run
// through at least one ordering edge (cycles of dependencies alone are
// topoOrder's), each as a path in which every item waits for the next: a
// Present item for its dependencies, an Absent item for its Absent
// dependents, every item for the items it is ordered after. (Clean waits
// in no other cycle: see Graph.After.)
func orderCycles(items []centry) [][]int {
	hasAfter := false
	for k := range items {
		if len(items[k].after) > 0 {
			hasAfter = true
			break
		}
	}
	if !hasAfter {
		return nil
	}
	type edge struct {
		to      int
		ordered bool
	}
	waits := make([][]edge, len(items))
	for k, it := range items {
		for _, d := range it.deps {
			switch {
			case it.presence == Present:
				waits[k] = append(waits[k], edge{d, false})
			case items[d].presence == Absent:
				waits[d] = append(waits[d], edge{k, false})
			}
		}
	}
	for k, it := range items {
		for _, y := range it.after {
			waits[k] = append(waits[k], edge{y, true})
		}
	}
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(items))
	// frame.next-1 is the edge the walk follows from k to the frame above.
	type frame struct{ k, next int }
	var stack []frame
	var cycles [][]int
	for root := range items {
		if color[root] != white {
			continue
		}
		stack = append(stack[:0], frame{k: root})
		color[root] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.next == len(waits[top.k]) {
				color[top.k] = black
				stack = stack[:len(stack)-1]
				continue
			}
			e := waits[top.k][top.next]
			top.next++
			switch color[e.to] {
			case white:
				color[e.to] = grey
				stack = append(stack, frame{k: e.to})
			case grey:
				// e.to is on the stack: the cycle is e.to ... top, e.
				i := len(stack) - 1
				for stack[i].k != e.to {
					i--
				}
				ordered := e.ordered
				var cyc []int
				for _, f := range stack[i:] {
					cyc = append(cyc, f.k)
				}
				for _, f := range stack[i : len(stack)-1] {
					ordered = ordered || waits[f.k][f.next-1].ordered
				}
				if ordered {
					cycles = append(cycles, cyc)
				}
			}
		}
	}
	return cycles
}

// topoOrder returns a depth-first post-order over items in insertion order
// (dependencies first) and every distinct cycle met on the way.
func topoOrder(items []centry) (order []int, cycles [][]int) {
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(items))
	order = make([]int, 0, len(items))
	// Iterative DFS so that long chains do not grow the stack without bound.
	type frame struct{ k, next int }
	var stack []frame
	for root := range items {
		if color[root] != white {
			continue
		}
		stack = append(stack[:0], frame{k: root})
		color[root] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			deps := items[top.k].deps
			if top.next < len(deps) {
				d := deps[top.next]
				top.next++
				switch color[d] {
				case white:
					color[d] = grey
					stack = append(stack, frame{k: d})
				case grey:
					// d is on the stack: the cycle is d ... top.
					var cyc []int
					for i := len(stack) - 1; i >= 0; i-- {
						cyc = append(cyc, stack[i].k)
						if stack[i].k == d {
							break
						}
					}
					// cyc is top ... d in reverse dependency direction; flip
					// so each element depends on the next.
					for i, j := 0, len(cyc)-1; i < j; i, j = i+1, j-1 {
						cyc[i], cyc[j] = cyc[j], cyc[i]
					}
					cycles = append(cycles, cyc)
				}
				continue
			}
			color[top.k] = black
			order = append(order, top.k)
			stack = stack[:len(stack)-1]
		}
	}
	return order, cycles
}

// joinGraphErrors aggregates validation problems into one error that
// matches ErrInvalidGraph and every problem's sentinel; nil for none.
func joinGraphErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return &multierror.Error{Errors: errs, ErrorFormat: listFormat("invalid graph")}
}

// listFormat renders an aggregated error as a headline and one problem a line.
func listFormat(headline string) multierror.ErrorFormatFunc {
	return func(errs []error) string {
		if len(errs) == 1 {
			return errs[0].Error()
		}
		var b strings.Builder
		fmt.Fprintf(&b, "converge: %s: %d problems:", headline, len(errs))
		for _, e := range errs {
			b.WriteString("\n\t* ")
			b.WriteString(causeText(e))
		}
		return b.String()
	}
}
