package converge_test

import (
	"errors"
	"testing"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fake(id string) converge.Node {
	return (&convergetest.Item{Key: converge.ID(id), Goal: id}).Node()
}

// noClean is a Node without StateClean.
type noClean struct{ converge.Node }

func TestGraphValidate(t *testing.T) {
	type add struct {
		n    converge.Node
		p    converge.Presence
		deps []converge.ID
	}
	tests := []struct {
		name  string
		adds  []add
		want  []error
		check func(t *testing.T, ge []*converge.GraphError)
	}{
		{
			name: "valid",
			adds: []add{{n: fake("a")}, {n: fake("b"), deps: []converge.ID{"a"}}},
		},
		{
			name: "nil item",
			adds: []add{{n: fake("a")}, {n: nil}},
			want: []error{converge.ErrNilItem},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, 1, ge[0].Index)
			},
		},
		{
			name: "empty id",
			adds: []add{{n: fake("")}},
			want: []error{converge.ErrEmptyID},
		},
		{
			name: "duplicate id",
			adds: []add{{n: fake("a")}, {n: fake("b")}, {n: fake("a")}},
			want: []error{converge.ErrDuplicateID},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, converge.ID("a"), ge[0].ID)
				assert.Equal(t, 2, ge[0].Index)
			},
		},
		{
			name: "unknown dependency",
			adds: []add{{n: fake("a"), deps: []converge.ID{"ghost"}}},
			want: []error{converge.ErrUnknownDependency},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, converge.ID("a"), ge[0].ID)
				assert.Equal(t, converge.ID("ghost"), ge[0].Dependency)
				assert.Contains(t, ge[0].Error(), `"ghost"`)
			},
		},
		{
			name: "cycle",
			adds: []add{
				{n: fake("x")},
				{n: fake("a"), deps: []converge.ID{"c", "x"}},
				{n: fake("b"), deps: []converge.ID{"a"}},
				{n: fake("c"), deps: []converge.ID{"b"}},
			},
			want: []error{converge.ErrCycle},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, []converge.ID{"a", "c", "b"}, ge[0].Path)
				assert.Equal(t, `converge: dependency cycle: "a" -> "c" -> "b" -> "a"`, ge[0].Error())
			},
		},
		{
			name: "self dependency",
			adds: []add{{n: fake("a"), deps: []converge.ID{"a"}}},
			want: []error{converge.ErrCycle},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, []converge.ID{"a"}, ge[0].Path)
			},
		},
		{
			name: "present depends on absent",
			adds: []add{{n: fake("db"), p: converge.Absent}, {n: fake("app"), deps: []converge.ID{"db"}}},
			want: []error{converge.ErrPresentDependsOnAbsent},
			check: func(t *testing.T, ge []*converge.GraphError) {
				assert.Equal(t, converge.ID("app"), ge[0].ID)
				assert.Equal(t, converge.ID("db"), ge[0].Dependency)
			},
		},
		{
			name: "absent without clean",
			adds: []add{{n: noClean{fake("a")}, p: converge.Absent}},
			want: []error{converge.ErrNoClean},
		},
		{
			name: "several problems at once",
			adds: []add{{n: fake("a"), deps: []converge.ID{"nope"}}, {n: fake("a")}, {n: nil}},
			want: []error{converge.ErrUnknownDependency, converge.ErrDuplicateID, converge.ErrNilItem},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := converge.NewGraph()
			for _, a := range tt.adds {
				g.Add(a.n, a.p, a.deps...)
			}
			err := g.Validate()
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorIs(t, err, converge.ErrInvalidGraph)
			for _, w := range tt.want {
				require.ErrorIs(t, err, w)
			}
			var ges []*converge.GraphError
			var me interface{ WrappedErrors() []error }
			if errors.As(err, &me) {
				for _, e := range me.WrappedErrors() {
					var ge *converge.GraphError
					require.ErrorAs(t, e, &ge)
					ges = append(ges, ge)
				}
			}
			require.Len(t, ges, len(tt.want))
			if tt.check != nil {
				tt.check(t, ges)
			}
			// A walk refuses the graph with the same error and no report.
			rep, werr := converge.Apply(t.Context(), g)
			assert.Nil(t, rep)
			assert.ErrorIs(t, werr, converge.ErrInvalidGraph)
		})
	}
}

func TestGraphOrderIsDeterministic(t *testing.T) {
	build := func() *converge.Graph {
		g := converge.NewGraph()
		g.Add(fake("app"), converge.Present, "db", "net")
		g.Add(fake("db"), converge.Present, "vol")
		g.Add(fake("net"), converge.Present)
		g.Add(fake("vol"), converge.Present)
		g.Add(fake("solo"), converge.Present)
		return g
	}
	want := []converge.ID{"vol", "db", "net", "app", "solo"}
	for range 20 {
		got, err := build().Order()
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

func TestGraphAccessors(t *testing.T) {
	g := converge.NewGraph()
	a := fake("a")
	g.Add(a, converge.Present)
	g.Add(fake("b"), converge.Absent, "a", "a")
	assert.Equal(t, 2, g.Len())
	n, p, ok := g.Node("b")
	require.True(t, ok)
	assert.Equal(t, converge.Absent, p)
	assert.Equal(t, converge.ID("b"), n.ID())
	_, _, ok = g.Node("zzz")
	assert.False(t, ok)
	assert.Equal(t, []converge.ID{"a", "a"}, g.Dependencies("b"))
	require.NoError(t, g.Validate(), "a dependency listed twice is harmless")
	// Adding invalidates the cached validation.
	g.Add(fake("c"), converge.Present, "missing")
	require.ErrorIs(t, g.Validate(), converge.ErrUnknownDependency)
}

func TestGraphZeroValueIsUsable(t *testing.T) {
	var g converge.Graph
	g.Add(fake("a"), converge.Present)
	rep, err := converge.Apply(t.Context(), &g)
	require.NoError(t, err)
	require.Len(t, rep.Items, 1)
}
