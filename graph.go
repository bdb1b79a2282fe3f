package converge

import (
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/go-multierror"
)

// Graph is a set of items with their dependencies and presence. Items are
// kept in insertion order, which makes Order and every report deterministic.
//
// The zero value is an empty graph ready to use. Add records items without
// failing; Validate (which every walk calls first) reports every problem at
// once. A Graph may be walked by several walks concurrently, but Add must not
// run concurrently with anything else on the same Graph.
type Graph struct {
	mu      sync.Mutex
	entries []entry
	plan    *compiled // cached result of compile; nil after Add
	planErr error
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
// far as possible. It fails as Validate does.
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
// ErrUnknownDependency, ErrCycle, ErrPresentDependsOnAbsent, ErrNoClean);
// the other fields name the culprits.
type GraphError struct {
	Err error
	// Index is the insertion index of the offending Add call.
	Index int
	// ID is the offending item.
	ID ID
	// Dependency is the dependency at fault, for ErrUnknownDependency and
	// ErrPresentDependsOnAbsent.
	Dependency ID
	// Path is the cycle, for ErrCycle: each item depends on the next, and
	// the last depends on the first.
	Path []ID
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
	case ErrCycle:
		parts := make([]string, 0, len(e.Path)+1)
		for _, id := range e.Path {
			parts = append(parts, fmt.Sprintf("%q", id))
		}
		if len(e.Path) > 0 {
			parts = append(parts, fmt.Sprintf("%q", e.Path[0]))
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
}

type centry struct {
	node     Node
	id       ID
	presence Presence
	deps     []int
	clean    CleanNode // nil when the node cannot be cleaned
}

func (g *Graph) compile() (*compiled, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.plan != nil || g.planErr != nil {
		return g.plan, g.planErr
	}
	g.plan, g.planErr = compileEntries(g.entries)
	return g.plan, g.planErr
}

func compileEntries(entries []entry) (*compiled, error) {
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
	order, cycles := topoOrder(c.items)
	for _, cyc := range cycles {
		path := make([]ID, len(cyc))
		for i, k := range cyc {
			path[i] = c.items[k].id
		}
		add(&GraphError{Err: ErrCycle, Index: src[cyc[0]], ID: path[0], Path: path})
	}
	if err := joinGraphErrors(errs); err != nil {
		return nil, err
	}
	c.order = order
	return c, nil
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
