package docker_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
)

// TestLogLinesUseNames: every state, plan, event and enum of the package
// logs as names and words, never as a Go struct or a number, in text and
// in JSON; the item states logged are those a walk reports.
func TestLogLinesUseNames(t *testing.T) {
	f := newFake()
	rep := apply(t, f, load(t, threeServices))
	state := func(id converge.ID) any {
		r, ok := rep.Item(id)
		require.True(t, ok, id)
		return r.After
	}
	tests := []struct {
		name  string
		value any
		want  []string
	}{
		{"container", state(docker.ContainerID("shop", "db")), []string{"v.name=shop-db", "v.exists=true", "v.status=running", "v.health=healthy", "v.image=app:1"}},
		{"image", state(docker.ImageID("app:1")), []string{"v.ref=app:1", "v.present=true"}},
		{"network", state(docker.NetworkID("shop_back")), []string{"v.name=shop_back", "v.exists=true", "v.owned=true"}},
		{"volume", state(docker.VolumeID("shop_data")), []string{"v.name=shop_data", "v.exists=true"}},
		{"project", docker.ProjectState{Project: "shop", Containers: []string{"shop-db", "shop-web"}}, []string{"v.project=shop", "v.containers=shop-db,shop-web"}},
		{"plan", docker.Plan{Container: "shop-web", Action: docker.ActionRecreate, Fields: []string{"image"}}, []string{`v="shop-web: recreate (image)"`}},
		{"event", docker.Event{Action: "die", Container: "shop-web", Service: "web"}, []string{"v.action=die", "v.container=shop-web", "v.service=web"}},
		{"run mode", docker.Once, []string{"v=once"}},
		{"condition", docker.ServiceHealthy, []string{"v=service_healthy"}},
		{"pull policy", docker.PullNever, []string{"v=never"}},
		{"update strategy", docker.KillThenDownload, []string{"v=kill-then-download"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var text, js bytes.Buffer
			slog.New(slog.NewTextHandler(&text, nil)).LogAttrs(context.Background(), slog.LevelInfo, "m", slog.Any("v", tt.value))
			slog.New(slog.NewJSONHandler(&js, nil)).LogAttrs(context.Background(), slog.LevelInfo, "m", slog.Any("v", tt.value))
			for _, w := range tt.want {
				assert.Contains(t, text.String(), w)
			}
			assert.NotContains(t, text.String(), "{", "no Go struct in a text line")
			assert.NotContains(t, js.String(), `"v":{}`)
			assert.NotContains(t, js.String(), `"Name"`, "no Go field names in a JSON line")
		})
	}
}
