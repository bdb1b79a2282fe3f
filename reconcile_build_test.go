package converge_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

type twoParts struct {
	Host []string
	Apps []string
}

// stagesOf is a build over a part: one stage per name, empty graphs.
func stagesOf(prefix string, fail error) converge.TargetBuildFunc[[]string] {
	return func(ctx context.Context, names []string) ([]converge.TargetStage, error) {
		if fail != nil {
			return nil, fail
		}
		out := make([]converge.TargetStage, 0, len(names))
		for _, n := range names {
			out = append(out, converge.TargetStage{Name: prefix + n, Graph: converge.NewGraph()})
		}
		return out, nil
	}
}

func TestJoinBuilds(t *testing.T) {
	host := func(p twoParts) []string { return p.Host }
	apps := func(p twoParts) []string { return p.Apps }
	boom := errors.New("engine unreachable")
	target := twoParts{Host: []string{"files", "boot"}, Apps: []string{"web"}}
	for _, tc := range []struct {
		name    string
		builds  []converge.TargetBuildFunc[twoParts]
		want    []string
		wantErr error
	}{
		{name: "in order", builds: []converge.TargetBuildFunc[twoParts]{
			converge.BuildPart(host, stagesOf("host:", nil)), converge.BuildPart(apps, stagesOf("app:", nil))},
			want: []string{"host:files", "host:boot", "app:web"}},
		{name: "other order", builds: []converge.TargetBuildFunc[twoParts]{
			converge.BuildPart(apps, stagesOf("app:", nil)), converge.BuildPart(host, stagesOf("host:", nil))},
			want: []string{"app:web", "host:files", "host:boot"}},
		{name: "none", want: nil},
		{name: "a failing build fails the whole", builds: []converge.TargetBuildFunc[twoParts]{
			converge.BuildPart(host, stagesOf("host:", nil)), converge.BuildPart(apps, stagesOf("app:", boom))},
			wantErr: boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stages, err := converge.JoinBuilds(tc.builds...)(context.Background(), target)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				assert.Nil(t, stages)
				return
			}
			require.NoError(t, err)
			var names []string
			for _, st := range stages {
				names = append(names, st.Name)
			}
			assert.Equal(t, tc.want, names)
		})
	}
}

func TestJoinBuildsRefusesNil(t *testing.T) {
	assert.PanicsWithValue(t, "converge: JoinBuilds: nil build", func() { converge.JoinBuilds[twoParts](nil) })
	assert.PanicsWithValue(t, "converge: BuildPart: nil part or build", func() {
		converge.BuildPart[twoParts, []string](nil, stagesOf("", nil))
	})
	assert.PanicsWithValue(t, "converge: BuildPart: nil part or build", func() {
		converge.BuildPart[twoParts, []string](func(p twoParts) []string { return p.Host }, nil)
	})
}

// TestJoinBuildsInAReconciler runs a joined build: the stages of both
// parts are walked, in order, and a new target reaches both parts.
func TestJoinBuildsInAReconciler(t *testing.T) {
	ctx := context.Background()
	d := newDevice()
	hostBuild := func(_ context.Context, host string) ([]converge.TargetStage, error) {
		d.host.Goal = host
		g := converge.NewGraph()
		g.Add(d.host.Node(), converge.Present)
		return []converge.TargetStage{{Name: "host", Graph: g}}, nil
	}
	appBuild := func(_ context.Context, app string) ([]converge.TargetStage, error) {
		d.app.setGoal(app)
		g := converge.NewGraph()
		g.Add(converge.Wrap[string](d.app), converge.Present)
		return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
	}
	build := converge.JoinBuilds(
		converge.BuildPart(func(s spec) string { return s.Host }, hostBuild),
		converge.BuildPart(func(s spec) string { return s.App }, appBuild),
	)
	r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: build})
	done := make(chan struct{}, 4)
	r.Subscribe(func(e converge.TargetEvent) {
		if e.Kind == converge.TargetPassFinished {
			done <- struct{}{}
		}
	})
	require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: "v1"}))
	stop := runReconciler(t, r)
	<-done
	require.NoError(t, stop())
	var stages []string
	for _, e := range ev.of(converge.TargetStateChanged) {
		stages = append(stages, e.Stage)
	}
	assert.Equal(t, []string{"host", "apps"}, stages)
	assert.Equal(t, "on", d.host.Value)
	v, _ := d.app.get()
	assert.Equal(t, "v1", v)
}
