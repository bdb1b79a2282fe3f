package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/docker"
)

// TestLoadComposeHash: the loader gives a service compose's configuration
// hash only where compose's up would find the same container: not for a
// service with a field it skipped, nor for one with a secret value, which
// compose's unkeyed hash would let anyone test.
func TestLoadComposeHash(t *testing.T) {
	tests := []struct {
		name    string
		service string
		opts    docker.LoadOptions
		want    bool
	}{
		{name: "carried out in full", service: "    image: app:1\n    environment: {GREETING: hello}\n", want: true},
		{name: "a secret value", service: "    image: app:1\n    environment: {DB_PASSWORD: s3cret}\n"},
		{name: "a password in a URL", service: "    image: app:1\n    command: [\"/app\", \"postgres://u:pw@db/x\"]\n"},
		{name: "a skipped field", service: "    image: app:1\n    cpu_count: 2\n", opts: docker.LoadOptions{IgnoreUnsupported: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := docker.LoadCompose(t.Context(), []byte("name: h\nservices:\n  web:\n"+tt.service), tt.opts)
			require.NoError(t, err)
			require.Len(t, p.Containers, 1)
			if tt.want {
				assert.Regexp(t, "^[0-9a-f]{64}$", p.Containers[0].ComposeHash)
			} else {
				assert.Empty(t, p.Containers[0].ComposeHash)
			}
		})
	}

	// An env_file, which compose hashes and the loader merges, gives none.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "app.env"), []byte("GREETING=hello\n"), 0o600))
	withFile, err := docker.LoadCompose(t.Context(), []byte("name: h\nservices:\n  web: {image: app:1, env_file: app.env}\n"),
		docker.LoadOptions{WorkingDir: dir})
	require.NoError(t, err)
	assert.Equal(t, "hello", withFile.Containers[0].Env["GREETING"])
	assert.Empty(t, withFile.Containers[0].ComposeHash, "env_file")

	// The hash follows the service's configuration.
	a := load(t, "name: h\nservices:\n  web: {image: app:1, environment: {GREETING: hello}}\n")
	b := load(t, "name: h\nservices:\n  web: {image: app:1, environment: {GREETING: hi}}\n")
	assert.NotEqual(t, a.Containers[0].ComposeHash, b.Containers[0].ComposeHash)
}

// TestComposeLabelsWritten: the package's containers, networks and volumes
// carry compose's labels.
func TestComposeLabelsWritten(t *testing.T) {
	f := newFake()
	p := load(t, "name: lbl\nservices:\n  db: {image: app:1, volumes: [\"data:/data\"]}\n"+
		"  web: {image: app:1, depends_on: [db]}\nvolumes:\n  data: {}\n")
	apply(t, f, p)
	web, ok := f.Container("lbl-web")
	require.True(t, ok)
	l := web.Config.Labels
	assert.Equal(t, "lbl", l[docker.LabelComposeProject])
	assert.Equal(t, "web", l[docker.LabelComposeService])
	assert.Equal(t, "1", l[docker.LabelComposeContainerNumber])
	assert.Equal(t, "False", l[docker.LabelComposeOneoff])
	assert.Equal(t, docker.ComposeVersion, l[docker.LabelComposeVersion])
	assert.Equal(t, p.Containers[1].ComposeHash, l[docker.LabelComposeConfigHash])
	assert.Equal(t, web.ImageID, l[docker.LabelComposeImage])
	assert.Equal(t, "db:service_started:false", l[docker.LabelComposeDependsOn])
	nets, err := f.NetworkList(t.Context(), network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", "lbl_default"))})
	require.NoError(t, err)
	require.Len(t, nets, 1)
	assert.Equal(t, "default", nets[0].Labels[docker.LabelComposeNetwork])
	assert.Equal(t, "lbl", nets[0].Labels[docker.LabelComposeProject])
	vols, err := f.VolumeList(t.Context(), volume.ListOptions{})
	require.NoError(t, err)
	require.Len(t, vols.Volumes, 1)
	assert.Equal(t, "data", vols.Volumes[0].Labels[docker.LabelComposeVolume])
	assert.Equal(t, "lbl", vols.Volumes[0].Labels[docker.LabelComposeProject])
}

// TestComposeStartedContainers: containers compose started for the
// project are the project's: one with the service's hash is adopted
// (renamed, not recreated), another replaced, one of a service the project
// does not name removed, and a one-off container of "docker compose run"
// left alone.
func TestComposeStartedContainers(t *testing.T) {
	const project = "cmp"
	p := load(t, "name: cmp\nservices:\n  web: {image: app:1, command: [\"/app\", \"serve\"]}\n")
	hash := p.Containers[0].ComposeHash
	require.NotEmpty(t, hash)
	tests := []struct {
		name      string
		container string
		labels    map[string]string
		action    docker.Action
		kept      bool // the compose container is still there, under its ID
		removed   bool // the compose container is gone
		stopped   bool // compose's container exited ("docker compose stop")
	}{
		{name: "matching, stopped: adopted and started", container: "cmp-web-1", action: docker.ActionRename, kept: true, stopped: true,
			labels: map[string]string{docker.LabelComposeService: "web", docker.LabelComposeConfigHash: hash}},
		{name: "matching: adopted", container: "cmp-web-1", action: docker.ActionRename, kept: true,
			labels: map[string]string{docker.LabelComposeService: "web", docker.LabelComposeConfigHash: hash}},
		{name: "another hash: replaced", container: "cmp-web-1", action: docker.ActionRecreate, removed: true,
			labels: map[string]string{docker.LabelComposeService: "web", docker.LabelComposeConfigHash: "0123"}},
		{name: "no hash: replaced", container: "cmp-web-1", action: docker.ActionRecreate, removed: true,
			labels: map[string]string{docker.LabelComposeService: "web"}},
		{name: "another service: orphan", container: "cmp-old-1", action: docker.ActionCreate, removed: true,
			labels: map[string]string{docker.LabelComposeService: "old", docker.LabelComposeConfigHash: hash}},
		{name: "one-off: left alone", container: "cmp-web-run-1", action: docker.ActionCreate, kept: true,
			labels: map[string]string{docker.LabelComposeService: "web", docker.LabelComposeConfigHash: hash, docker.LabelComposeOneoff: "True"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			labels := map[string]string{docker.LabelComposeProject: project, docker.LabelComposeContainerNumber: "1"}
			for k, v := range tt.labels {
				labels[k] = v
			}
			ctx := context.Background()
			_, err := f.NetworkCreate(ctx, "cmp_default", network.CreateOptions{Labels: map[string]string{
				docker.LabelComposeProject: project, docker.LabelComposeNetwork: "default"}})
			require.NoError(t, err)
			created, err := f.ContainerCreate(ctx, &container.Config{Image: "app:1", Cmd: []string{"/app", "serve"}, Labels: labels},
				&container.HostConfig{NetworkMode: "cmp_default"},
				&network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{"cmp_default": {}}}, nil, tt.container)
			require.NoError(t, err)
			require.NoError(t, f.ContainerStart(ctx, created.ID, container.StartOptions{}))
			if tt.stopped {
				f.Exit(tt.container, 0)
			}

			var plan docker.Plan
			for _, pl := range docker.Plans(dry(t, f, p)) {
				if pl.Container == "cmp-web" {
					plan = pl
				}
			}
			assert.Equal(t, tt.action, plan.Action, "%s", plan)
			rep := apply(t, f, p)
			require.True(t, rep.Converged(), "%+v", rep)

			web, ok := f.Container("cmp-web")
			require.True(t, ok, "the service's container")
			assert.Equal(t, "running", web.Status)
			_, still := f.Container(created.ID)
			assert.Equal(t, tt.kept, still, "compose's container kept")
			assert.Equal(t, tt.removed, !still, "compose's container removed")
			if tt.action == docker.ActionRename {
				assert.Equal(t, created.ID, web.ID, "adopted, not recreated")
			} else {
				assert.NotEqual(t, created.ID, web.ID)
			}
			for _, pl := range docker.Plans(dry(t, f, p)) {
				assert.Equal(t, docker.ActionNone, pl.Action, "converged: %s", pl)
			}
		})
	}
}
