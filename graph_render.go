package converge

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// outcomeColors are the fill colors of items by their last outcome, shared
// by WriteDOT and WriteMermaid so that both pictures read the same.
var outcomeColors = map[Outcome]string{
	OutcomeUnchanged:   "#d9f2d9", // green: converged, nothing done
	OutcomeChanged:     "#cce0ff", // blue: changed and verified
	OutcomeWouldChange: "#fff2b3", // yellow: a dry run would change it
	OutcomeFailed:      "#ffc2c2", // red
	OutcomeWaiting:     "#e6e6e6", // grey: waited for a failed item
	OutcomeNotRun:      "#f2f2f2", // light grey: cancelled before it ran
}

// WriteDOT writes the graph in Graphviz DOT: one node per item, labelled by
// its ID, in the order the items were added, one edge from every
// dependency to its dependent (the order a Present walk follows), and then
// one dashed edge from every item to each item ordered after it
// (Graph.After), in the order the edges were given. Absent items are
// dashed. When rep is not nil, each item it reports is filled with the
// color of its outcome and its label says the outcome. The output
// is the same for the same graph and report, so it can be compared and
// committed. The graph need not be valid: unknown dependencies are drawn
// as plain nodes.
//
// Render it with, for example, `dot -Tsvg`.
func (g *Graph) WriteDOT(w io.Writer, rep *Report) error {
	entries, afters := g.snapshot()
	bw := bufio.NewWriter(w)
	bw.WriteString("digraph converge {\n\trankdir=LR;\n\tnode [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", fontname=\"Helvetica\"];\n")
	for _, e := range entries {
		label := string(e.id)
		attrs := []string{}
		if r, ok := reportItem(rep, e.id); ok {
			label += "\n" + r.Outcome.String()
			attrs = append(attrs, "fillcolor="+dotQuote(outcomeColors[r.Outcome]))
		}
		if e.presence == Absent {
			attrs = append(attrs, `style="rounded,filled,dashed"`)
		}
		attrs = append([]string{"label=" + dotQuote(label)}, attrs...)
		fmt.Fprintf(bw, "\t%s [%s];\n", dotQuote(string(e.id)), strings.Join(attrs, ", "))
	}
	for _, e := range entries {
		for _, d := range e.deps {
			fmt.Fprintf(bw, "\t%s -> %s;\n", dotQuote(string(d)), dotQuote(string(e.id)))
		}
	}
	for _, a := range afters {
		for _, y := range a.ys {
			fmt.Fprintf(bw, "\t%s -> %s [style=dashed];\n", dotQuote(string(y)), dotQuote(string(a.x)))
		}
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

// WriteMermaid writes the graph as a Mermaid flowchart (left to right),
// with the same nodes, edges, order and colors as WriteDOT; ordering edges
// are dashed arrows (-.->). Items are named n0, n1, ... in the order they
// were added and labelled by their ID, so any ID is safe in the output. Paste it into a Markdown file where Mermaid is
// rendered (GitHub, GitLab) to see it.
func (g *Graph) WriteMermaid(w io.Writer, rep *Report) error {
	entries, afters := g.snapshot()
	bw := bufio.NewWriter(w)
	bw.WriteString("flowchart LR\n")
	names := make(map[ID]string, len(entries))
	name := func(id ID) string {
		if n, ok := names[id]; ok {
			return n
		}
		n := fmt.Sprintf("n%d", len(names))
		names[id] = n
		return n
	}
	var styles []string
	for _, e := range entries {
		n := name(e.id)
		label := mermaidText(string(e.id))
		var style []string
		if r, ok := reportItem(rep, e.id); ok {
			label += "<br/>" + r.Outcome.String()
			style = append(style, "fill:"+outcomeColors[r.Outcome])
		}
		if e.presence == Absent {
			style = append(style, "stroke-dasharray:4 3")
		}
		fmt.Fprintf(bw, "\t%s[\"%s\"]\n", n, label)
		if len(style) > 0 {
			styles = append(styles, fmt.Sprintf("\tstyle %s %s\n", n, strings.Join(style, ",")))
		}
	}
	for _, e := range entries {
		for _, d := range e.deps {
			if _, known := names[d]; !known {
				fmt.Fprintf(bw, "\t%s[\"%s\"]\n", name(d), mermaidText(string(d)))
			}
			fmt.Fprintf(bw, "\t%s --> %s\n", names[d], names[e.id])
		}
	}
	for _, a := range afters {
		for _, y := range a.ys {
			for _, id := range [2]ID{y, a.x} {
				if _, known := names[id]; !known {
					fmt.Fprintf(bw, "\t%s[\"%s\"]\n", name(id), mermaidText(string(id)))
				}
			}
			fmt.Fprintf(bw, "\t%s -.-> %s\n", names[y], names[a.x])
		}
	}
	for _, s := range styles {
		bw.WriteString(s)
	}
	return bw.Flush()
}

// snapshot copies the graph's entries and ordering edges under its lock.
func (g *Graph) snapshot() ([]entry, []afterEdge) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]entry, len(g.entries))
	copy(out, g.entries)
	return out, append([]afterEdge(nil), g.afters...)
}

// reportItem looks id up in rep, which may be nil.
func reportItem(rep *Report, id ID) (ItemResult, bool) {
	if rep == nil {
		return ItemResult{}, false
	}
	return rep.Item(id)
}

// dotQuote quotes s as a DOT string: backslashes and double quotes are
// escaped and a newline becomes a centred line break.
func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// mermaidText escapes s for a quoted Mermaid label: characters Mermaid
// would read as syntax become HTML entities.
func mermaidText(s string) string {
	r := strings.NewReplacer(`"`, "#quot;", "<", "#lt;", ">", "#gt;", "&", "#amp;", "\n", " ")
	return r.Replace(s)
}
