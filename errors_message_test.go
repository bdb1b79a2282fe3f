package converge_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// assertReadsOnce checks that msg starts with the package prefix, has it
// once, and names each culprit (quoted) exactly once.
func assertReadsOnce(t *testing.T, msg string, culprits ...string) {
	t.Helper()
	assert.True(t, strings.HasPrefix(msg, "converge: "), "one package prefix first: %s", msg)
	assert.Equal(t, 1, strings.Count(msg, "converge: "), "doubled prefix: %s", msg)
	for _, c := range culprits {
		assert.Equal(t, 1, strings.Count(msg, c), "%s named %d times: %s", c, strings.Count(msg, c), msg)
	}
}

// walkErr applies a graph of the given items and returns the walk's error.
func walkErr(t *testing.T, add func(g *converge.Graph)) error {
	t.Helper()
	g := converge.NewGraph()
	add(g)
	_, err := converge.Apply(context.Background(), g)
	require.Error(t, err)
	return err
}

// TestErrorMessagesNameTheCulpritOnce checks the messages of nested
// failures: every layer (item, walk, reconciler pass, store) adds
// what it knows, the item is named once, and the message has one
// "converge: " prefix.
func TestErrorMessagesNameTheCulpritOnce(t *testing.T) {
	stuck := func(g *converge.Graph) {
		g.Add((&convergetest.Item{Key: "svc", Goal: "on", Stuck: true}).Node(), converge.Present)
	}
	tests := []struct {
		name     string
		err      func(t *testing.T) error
		is       error
		culprits []string
	}{
		{name: "item that did not converge", is: converge.ErrNotConverged, culprits: []string{`"svc"`},
			err: func(t *testing.T) error { return walkErr(t, stuck) }},
		{name: "item reading an unknown dependency", is: converge.ErrUnknownDependency, culprits: []string{`"app"`, `"db"`},
			err: func(t *testing.T) error {
				return walkErr(t, func(g *converge.Graph) {
					g.Add((&convergetest.Item{Key: "app", GoalFunc: func(d converge.DepStates) (string, error) {
						return converge.DepState[string](d, "db")
					}}).Node(), converge.Present)
				})
			}},
		{name: "item with a state of the wrong type", is: converge.ErrStateType, culprits: []string{`"typed"`},
			err: func(t *testing.T) error {
				return walkErr(t, func(g *converge.Graph) { g.Add(wrongState{}, converge.Present) })
			}},
		{name: "two failed items", is: converge.ErrNotConverged, culprits: []string{`"svc"`, `"web"`},
			err: func(t *testing.T) error {
				return walkErr(t, func(g *converge.Graph) {
					stuck(g)
					g.Add((&convergetest.Item{Key: "web", Goal: "on", Stuck: true}).Node(), converge.Present)
				})
			}},
		{name: "walk stopped by fail-fast", is: converge.ErrNotRun, culprits: []string{`"svc"`},
			err: func(t *testing.T) error {
				w, err := converge.NewWalker(converge.WalkerConfig{FailFast: true, Parallelism: 1})
				require.NoError(t, err)
				g := converge.NewGraph()
				stuck(g)
				g.Add((&convergetest.Item{Key: "web", Goal: "on"}).Node(), converge.Present)
				_, err = w.Apply(context.Background(), g)
				require.ErrorIs(t, err, converge.ErrNotConverged)
				return err
			}},
		{name: "reconciler pass", is: converge.ErrNotConverged, culprits: []string{`"svc"`, `"apps"`, "attempt 1:"},
			err: func(t *testing.T) error {
				r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
					Build: func(context.Context, string) ([]converge.TargetStage, error) {
						g := converge.NewGraph()
						stuck(g)
						return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
					},
				})
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- r.Run(ctx) }()
				err = r.ApplyIntermediate(ctx, "x")
				cancel()
				require.NoError(t, <-done)
				var se *converge.TargetStageError
				require.ErrorAs(t, err, &se)
				assert.NotContains(t, err.Error(), "(walk ", "the attempt is not a walk ID")
				return err
			}},
		{name: "reconciler build", is: converge.ErrInvalidGraph, culprits: []string{`"build"`},
			err: func(t *testing.T) error {
				r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
					Build: func(context.Context, string) ([]converge.TargetStage, error) {
						return nil, converge.ErrInvalidGraph
					},
				})
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- r.Run(ctx) }()
				err = r.ApplyIntermediate(ctx, "x")
				cancel()
				require.NoError(t, <-done)
				assert.NotContains(t, err.Error(), "walk 0")
				return err
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err(t)
			require.ErrorIs(t, err, tc.is)
			assertReadsOnce(t, err.Error(), tc.culprits...)
		})
	}
}

// wrongState is a Node whose current state is not the type its Check
// expects, so the walk fails with a *StateTypeError about the item itself.
type wrongState struct{}

func (wrongState) ID() converge.ID { return "typed" }
func (wrongState) StateCurrent(context.Context, converge.DepStates) (any, error) {
	return 42, nil
}
func (wrongState) StateGoal(context.Context, converge.DepStates) (any, error) { return "on", nil }
func (w wrongState) Check(_ context.Context, current, _ any) (converge.Decision, error) {
	if _, ok := current.(string); !ok {
		return converge.Decision{}, &converge.StateTypeError{ID: w.ID(), Want: "string", Got: "int"}
	}
	return converge.NotRequired(), nil
}
func (wrongState) Apply(context.Context, any, any) (any, error)    { return nil, errors.New("unused") }
func (wrongState) ApplyDry(context.Context, any, any) (any, error) { return nil, errors.New("unused") }
