package convergetest_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

func TestConformPassesForARefreshingFake(t *testing.T) {
	it := &convergetest.RefreshItem{Item: convergetest.Item{Key: "service:web", Goal: "running", Value: "stopped"}}
	type snap struct {
		Value     string
		Refreshes int
	}
	err := convergetest.Conform[string](t.Context(), it, convergetest.ConformOptions{
		// The restarts are part of the real system: a dry run must not
		// add one.
		Snapshot: func(context.Context) (any, error) {
			return snap{it.Current(), it.Refreshes()}, nil
		},
	})
	require.NoError(t, err)
	assert.Equal(t, "running", it.Current())
	trigger := convergetest.RefreshTrigger("service:web")
	assert.Equal(t, converge.ID("service:web#conform-trigger"), trigger)
	assert.Equal(t, [][]converge.ID{{trigger}, {trigger}, {trigger}}, it.RefreshedFor(),
		"two direct refreshes and one walk's; none in the dry run nor in the walk that changed nothing")

	it2 := &convergetest.RefreshItem{Item: convergetest.Item{Key: "s2", Goal: "up"}}
	require.NoError(t, convergetest.Conform[string](t.Context(), it2, convergetest.ConformOptions{RefreshFor: []converge.ID{"file:a", "file:b"}}))
	assert.Equal(t, []converge.ID{"file:a", "file:b"}, it2.RefreshedFor()[0])
}

// stopsOnRefresh breaks the contract: its restart leaves it stopped, and
// says so.
type stopsOnRefresh struct{ convergetest.RefreshItem }

func (s *stopsOnRefresh) Refresh(ctx context.Context, c string, changed []converge.ID) (string, error) {
	s.SetCurrent("stopped")
	return "stopped", nil
}

// liesOnRefresh breaks the contract: its restart leaves it stopped, and
// it claims it runs.
type liesOnRefresh struct{ convergetest.RefreshItem }

func (s *liesOnRefresh) Refresh(ctx context.Context, c string, changed []converge.ID) (string, error) {
	s.SetCurrent("stopped")
	return c, nil
}

// restartsOnce breaks the contract: a second restart fails.
type restartsOnce struct {
	convergetest.RefreshItem
	mu    sync.Mutex
	times int
}

func (s *restartsOnce) Refresh(ctx context.Context, c string, changed []converge.ID) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.times++; s.times > 1 {
		return c, errors.New("already restarting")
	}
	return c, nil
}

// walkOnlyBreak breaks the contract where only a walk shows it: a restart
// that a walk asks for leaves it crashed.
type walkOnlyBreak struct {
	convergetest.RefreshItem
}

func (s *walkOnlyBreak) Refresh(ctx context.Context, c string, changed []converge.ID) (string, error) {
	if _, walked := converge.CurrentWalk(ctx); walked {
		s.SetCurrent("crashed")
	}
	return c, nil
}

func TestConformFindsBrokenRefreshers(t *testing.T) {
	svc := func(key converge.ID) convergetest.RefreshItem {
		return convergetest.RefreshItem{Item: convergetest.Item{Key: key, Goal: "running"}}
	}
	tests := []struct {
		name string
		item converge.Item[string]
		step string
		msg  string
	}{
		{"refresh stops the item", &stopsOnRefresh{svc("stops")}, "Refresh on a converged item", "not converged"},
		{"refresh claims what it did not do", &liesOnRefresh{svc("lies")}, "Refresh on a converged item", "still requires work"},
		{"refresh fails", func() converge.Item[string] {
			it := &convergetest.RefreshItem{Item: convergetest.Item{Key: "fails", Goal: "running"}}
			it.FailAt(converge.PhaseRefresh, -1, nil)
			return it
		}(), "Refresh on a converged item", "injected"},
		{"a second refresh fails", &restartsOnce{RefreshItem: svc("once")}, "Refresh again", "already restarting"},
		{"a refresh in a walk breaks it", &walkOnlyBreak{svc("walk")}, "walk with a changed dependency", "still requires work"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := convergetest.Conform(t.Context(), tt.item, convergetest.ConformOptions{})
			require.ErrorIs(t, err, convergetest.ErrNonConformant)
			var ce *convergetest.ConformanceError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.item.ID(), ce.ID)
			assert.Equal(t, tt.step, ce.Step)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestRefreshItemInAGraph(t *testing.T) {
	rec := &convergetest.Recorder{}
	conf := &convergetest.Item{Key: "file:conf", Goal: "v2", Value: "v1", Recorder: rec}
	svc := &convergetest.RefreshItem{Item: convergetest.Item{Key: "service:web", Goal: "running", Value: "running", Recorder: rec}}
	g := converge.NewGraph()
	g.Add(conf.Node(), converge.Present)
	g.Add(svc.Node(), converge.Present, conf.Key)
	w, err := converge.NewWalker(converge.WalkerConfig{})
	require.NoError(t, err)
	for range 2 {
		_, err := w.Apply(t.Context(), g)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, svc.Refreshes())
	assert.Equal(t, 1, svc.Calls("Refresh"))
	assert.Equal(t, [][]converge.ID{{"file:conf"}}, svc.RefreshedFor())
	assert.Equal(t, []convergetest.Record{{ID: "file:conf", What: "apply-start"}, {ID: "file:conf", What: "apply-end"}, {ID: "service:web", What: "refresh"}}, rec.Records())
}
