package converge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// renderGraph is a small graph with an Absent item, an ID that needs
// escaping and a failing item with a dependent.
func renderGraph() *converge.Graph {
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "dir:/etc/app", Goal: "d"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: `file:/etc/app/"quoted" <x>`, Goal: "f"}).Node(), converge.Present, "dir:/etc/app")
	g.Add((&convergetest.Item{Key: "file:/etc/old", Value: "o"}).Node(), converge.Absent)
	bad := (&convergetest.Item{Key: "svc:app", Goal: "s"}).FailAt(converge.PhaseApply, -1, errors.New("boom"))
	g.Add(bad.Node(), converge.Present, "dir:/etc/app")
	g.Add((&convergetest.Item{Key: "check:app", Goal: "c"}).Node(), converge.Present, "svc:app")
	return g
}

func TestGraphRendersAreStableAndEscaped(t *testing.T) {
	ctx := context.Background()
	g := renderGraph()
	rep, err := converge.Apply(ctx, g)
	require.Error(t, err)

	tests := []struct {
		name  string
		write func(*bytes.Buffer, *converge.Report) error
		want  []string
		not   []string
	}{
		{"dot without report", func(b *bytes.Buffer, _ *converge.Report) error { return g.WriteDOT(b, nil) },
			[]string{"digraph converge {", `"dir:/etc/app" -> "file:/etc/app/\"quoted\" <x>";`, `"svc:app" -> "check:app";`,
				`"file:/etc/old" [label="file:/etc/old", style="rounded,filled,dashed"];`},
			[]string{"unchanged", "#ffc2c2"}},
		{"dot with report", func(b *bytes.Buffer, r *converge.Report) error { return g.WriteDOT(b, r) },
			[]string{`"svc:app" [label="svc:app\nfailed", fillcolor="#ffc2c2"];`, `"check:app" [label="check:app\nwaiting", fillcolor="#e6e6e6"];`,
				`"dir:/etc/app" [label="dir:/etc/app\nchanged", fillcolor="#cce0ff"];`},
			nil},
		{"mermaid without report", func(b *bytes.Buffer, _ *converge.Report) error { return g.WriteMermaid(b, nil) },
			[]string{"flowchart LR\n", "\tn0[\"dir:/etc/app\"]\n", "\tn1[\"file:/etc/app/#quot;quoted#quot; #lt;x#gt;\"]\n", "\tn0 --> n1\n", "\tn3 --> n4\n",
				"\tstyle n2 stroke-dasharray:4 3\n"},
			[]string{"fill:", `"quoted"`}},
		{"mermaid with report", func(b *bytes.Buffer, r *converge.Report) error { return g.WriteMermaid(b, r) },
			[]string{"\tn3[\"svc:app<br/>failed\"]\n", "\tstyle n3 fill:#ffc2c2\n", "\tstyle n4 fill:#e6e6e6\n"},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var first, second bytes.Buffer
			require.NoError(t, tt.write(&first, rep))
			require.NoError(t, tt.write(&second, rep))
			assert.Equal(t, first.String(), second.String(), "the same graph renders the same bytes")
			for _, w := range tt.want {
				assert.Contains(t, first.String(), w)
			}
			for _, n := range tt.not {
				assert.NotContains(t, first.String(), n)
			}
		})
	}
}

func TestGraphRenderOfUnknownDependencyIsANode(t *testing.T) {
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "a", Goal: "x"}).Node(), converge.Present, "missing")
	var b bytes.Buffer
	require.NoError(t, g.WriteMermaid(&b, nil))
	assert.Equal(t, "flowchart LR\n\tn0[\"a\"]\n\tn1[\"missing\"]\n\tn1 --> n0\n", b.String())
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

func TestGraphRenderReportsWriteErrors(t *testing.T) {
	g := renderGraph()
	assert.ErrorIs(t, g.WriteDOT(failingWriter{}, nil), os.ErrClosed)
	assert.ErrorIs(t, g.WriteMermaid(failingWriter{}, nil), os.ErrClosed)
}

// A graph drawn in Mermaid, colored by the outcome of a walk: paste the
// text into Markdown where Mermaid is rendered.
func ExampleGraph_WriteMermaid() {
	dir := &convergetest.Item{Key: "dir:/etc/app", Goal: "d"}
	conf := &convergetest.Item{Key: "file:/etc/app/app.conf", Goal: "listen=:80"}
	g := converge.NewGraph()
	g.Add(dir.Node(), converge.Present)
	g.Add(conf.Node(), converge.Present, dir.ID())
	rep, err := converge.Apply(context.Background(), g)
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	if err := g.WriteMermaid(&b, rep); err != nil {
		panic(err)
	}
	fmt.Print(b.String())
	// Output:
	// flowchart LR
	// 	n0["dir:/etc/app<br/>changed"]
	// 	n1["file:/etc/app/app.conf<br/>changed"]
	// 	n0 --> n1
	// 	style n0 fill:#cce0ff
	// 	style n1 fill:#cce0ff
}

// TestGraphDOTIsReadByGraphviz renders the DOT text with Graphviz when it
// is installed: the syntax, escapes included, is what dot reads.
func TestGraphDOTIsReadByGraphviz(t *testing.T) {
	dot, err := exec.LookPath("dot")
	if err != nil {
		t.Skip("Graphviz (dot) is not installed; the DOT text is checked by TestGraphRendersAreStableAndEscaped")
	}
	g := renderGraph()
	rep, _ := converge.Apply(context.Background(), g)
	var in bytes.Buffer
	require.NoError(t, g.WriteDOT(&in, rep))
	cmd := exec.Command(dot, "-Tsvg")
	cmd.Stdin = &in
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "svc:app")
	assert.Contains(t, string(out), "&quot;quoted&quot; &lt;x&gt;", "the escaped ID comes out whole")
}
