package docker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// TestPullRefresh: under PullRefresh (Compose's pull_policy daily, weekly,
// every_<duration>) an image is pulled when no pull is recorded, or when
// the last recorded one is older than PullEvery, and not in between; the
// time of each pull is recorded in Project.PullRecords under
// PullRecordKey; a pull that brings the same image recreates nothing, one
// that brings a new image recreates the container on it.
func TestPullRefresh(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	f.Pullable("app:1")
	store := converge.NewMemStore()
	now := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
	p := &docker.Project{Name: "pr", PullRecords: store, Now: func() time.Time { return now },
		Containers: []docker.ContainerSpec{{Service: "web", Image: "app:1", Pull: docker.PullRefresh, PullEvery: 24 * time.Hour}}}
	pulls := func() int { return f.Calls()[dockertest.ImagePull] }
	recorded := func() time.Time {
		rec, err := store.Get(ctx, docker.PullRecordKey("pr", "app:1"))
		require.NoError(t, err)
		var doc struct{ Pulled time.Time }
		require.NoError(t, json.Unmarshal(rec.Value, &doc))
		return doc.Pulled
	}

	apply(t, f, p)
	require.Equal(t, 1, pulls(), "missing: pulled")
	assert.True(t, recorded().Equal(now))
	first, ok := f.Container("pr-web")
	require.True(t, ok)

	tests := []struct {
		name      string
		after     time.Duration
		publish   bool // the registry serves a new image under the tag
		wantPull  bool
		recreated bool
	}{
		{name: "within the interval", after: 23 * time.Hour},
		{name: "the interval passed, the same image", after: 24 * time.Hour, wantPull: true},
		{name: "right after", after: time.Minute},
		{name: "the interval passed, a new image", after: 25 * time.Hour, publish: true, wantPull: true, recreated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.publish {
				f.Pullable("app:1")
			}
			now = now.Add(tt.after)
			before := pulls()
			rep := apply(t, f, p)
			if tt.wantPull {
				assert.Equal(t, before+1, pulls())
				assert.True(t, recorded().Equal(now), "the pull's time is recorded")
			} else {
				assert.Equal(t, before, pulls())
				assert.Empty(t, rep.IDs(converge.OutcomeChanged))
			}
			c, ok := f.Container(first.Name)
			require.True(t, ok)
			assert.Equal(t, tt.recreated, c.ID != first.ID, "recreated")
			first = c
		})
	}
}

// TestPullRefreshNeedsRecords: PullRefresh with no Project.PullRecords, or
// with an update strategy whose container pulls itself, or without an
// interval, is a *SpecError naming the field; a damaged record is an error
// naming it, and nothing is pulled on its account.
func TestPullRefreshNeedsRecords(t *testing.T) {
	spec := docker.ContainerSpec{Service: "web", Image: "app:1", Pull: docker.PullRefresh, PullEvery: time.Hour}
	tests := []struct {
		name   string
		change func(p *docker.Project)
		field  string
	}{
		{name: "no store", change: func(p *docker.Project) { p.PullRecords = nil }, field: "Pull"},
		{name: "kill-then-download", change: func(p *docker.Project) { p.Containers[0].Update = docker.KillThenDownload }, field: "Pull"},
		{name: "no interval", change: func(p *docker.Project) { p.Containers[0].PullEvery = 0 }, field: "PullEvery"},
		{name: "an interval under another policy", change: func(p *docker.Project) { p.Containers[0].Pull = docker.PullAlways }, field: "PullEvery"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &docker.Project{Name: "pr", PullRecords: converge.NewMemStore(), Containers: []docker.ContainerSpec{spec}}
			tt.change(p)
			_, err := p.Graph(newFake())
			var se *docker.SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tt.field, se.Field)
		})
	}

	ctx := context.Background()
	f := newFake()
	f.AddImage("app:1")
	f.Pullable("app:1")
	store := converge.NewMemStore()
	_, err := store.Put(ctx, converge.StoreRecord{Key: docker.PullRecordKey("pr", "app:1"), Value: []byte(`{"pulled":"yesterday"}`)})
	require.NoError(t, err)
	g, err := (&docker.Project{Name: "pr", PullRecords: store, Containers: []docker.ContainerSpec{spec}}).Graph(f)
	require.NoError(t, err)
	_, err = converge.Apply(ctx, g)
	require.ErrorIs(t, err, docker.ErrBadPullRecord)
	assert.Contains(t, err.Error(), docker.PullRecordKey("pr", "app:1"))
	assert.Zero(t, f.Calls()[dockertest.ImagePull])
}

// TestLoadComposePullRefresh: pull_policy daily, weekly and
// every_<duration> load as PullRefresh with their interval; refresh alone
// (no interval) stays refused by name.
func TestLoadComposePullRefresh(t *testing.T) {
	tests := []struct {
		policy string
		every  time.Duration
	}{
		{"daily", 24 * time.Hour},
		{"weekly", 7 * 24 * time.Hour},
		{"every_12h", 12 * time.Hour},
		{"every_2d", 48 * time.Hour},
		{"refresh", 0},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			p, err := docker.LoadCompose(context.Background(), []byte("name: pr\nservices:\n  web:\n    image: app:1\n    pull_policy: "+tt.policy+"\n"),
				docker.LoadOptions{WorkingDir: t.TempDir()})
			if tt.every == 0 {
				var ue *docker.UnsupportedError
				require.ErrorAs(t, err, &ue)
				assert.Equal(t, []string{"services.web.pull_policy(" + tt.policy + ")"}, ue.Fields)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, docker.PullRefresh, p.Containers[0].Pull)
			assert.Equal(t, tt.every, p.Containers[0].PullEvery)
		})
	}
}
