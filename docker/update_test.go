package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// keyCalls are the engine calls balena's app.spec.ts asserts steps of:
// fetch (pull), kill (stop, remove), remove image, start (create, start),
// and our rename.
var keyCalls = map[string]bool{dockertest.ImagePull: true, dockertest.ImageRemove: true, dockertest.ContainerCreate: true,
	dockertest.ContainerStart: true, dockertest.ContainerStop: true, dockertest.ContainerRemove: true, dockertest.ContainerRename: true}

func keyLog(f *dockertest.Engine) []string {
	var out []string
	for _, c := range f.Log() {
		if keyCalls[c] {
			out = append(out, c)
		}
	}
	return out
}

const (
	pull    = dockertest.ImagePull
	rmi     = dockertest.ImageRemove
	create  = dockertest.ContainerCreate
	start   = dockertest.ContainerStart
	stop    = dockertest.ContainerStop
	remove  = dockertest.ContainerRemove
	rename  = dockertest.ContainerRename
	oldRef  = "app:1"
	newRef  = "app:2"
	newSize = 1000
)

// freeSpace is a FreeSpaceFunc that reports free bytes.
func freeSpace(free uint64) docker.FreeSpaceFunc {
	return func(context.Context, string) (uint64, bool, error) { return free, true, nil }
}

// TestUpdateStrategyOrder updates one container from app:1 to app:2 under
// every strategy and checks the order of the engine calls, as balena's
// app.spec.ts checks the order of its steps, and what is left on the
// engine.
func TestUpdateStrategyOrder(t *testing.T) {
	healthy := &docker.Healthcheck{Test: []string{"CMD", "true"}}
	tests := []struct {
		name      string
		strategy  docker.UpdateStrategy
		health    *docker.Healthcheck
		free      uint64 // 0: no space check
		oldSize   int64
		onStart   func(c *dockertest.Container) (container.ContainerState, int)
		want      []string
		wantErr   error
		signalOld bool     // the old container holds a signal file
		wantImage string   // the image the container runs after the update
		images    []string // the local images after the update
	}{
		{name: "download-then-kill", strategy: docker.DownloadThenKill,
			want: []string{pull, create, stop, remove, rename, start}, wantImage: newRef, images: []string{oldRef, newRef}},
		{name: "kill-then-download", strategy: docker.KillThenDownload,
			want: []string{stop, remove, pull, create, start}, wantImage: newRef, images: []string{oldRef, newRef}},
		{name: "delete-then-download", strategy: docker.DeleteThenDownload,
			want: []string{stop, remove, rmi, pull, create, start}, wantImage: newRef, images: []string{newRef}},
		{name: "hand-over healthy", strategy: docker.HandOver, health: healthy,
			want: []string{pull, create, start, stop, remove, rename}, wantImage: newRef, images: []string{oldRef, newRef}},
		{name: "hand-over signalled by file", strategy: docker.HandOver,
			onStart: func(c *dockertest.Container) (container.ContainerState, int) {
				if c.Config.Image == newRef {
					c.Files = map[string]bool{docker.HandoverCompleteFile: true}
				}
				return container.StateRunning, 0
			},
			want: []string{pull, create, start, stop, remove, rename}, wantImage: newRef, images: []string{oldRef, newRef}},
		{name: "hand-over with a stale signal in the old container waits for the new", strategy: docker.HandOver, signalOld: true,
			onStart: func(c *dockertest.Container) (container.ContainerState, int) {
				if c.Config.Image == newRef {
					c.Health = container.Starting
				}
				return container.StateRunning, 0
			}, health: healthy,
			want: []string{pull, create, start, stop, remove}, wantErr: docker.ErrHandoverFailed, wantImage: oldRef, images: []string{oldRef, newRef}},
		{name: "hand-over signalled under balena's legacy name", strategy: docker.HandOver,
			onStart: func(c *dockertest.Container) (container.ContainerState, int) {
				if c.Config.Image == newRef {
					c.Files = map[string]bool{docker.HandoverKillMeFile: true}
				}
				return container.StateRunning, 0
			},
			want: []string{pull, create, start, stop, remove, rename}, wantImage: newRef, images: []string{oldRef, newRef}},
		{name: "hand-over new container never healthy keeps the old", strategy: docker.HandOver, health: healthy,
			onStart: func(c *dockertest.Container) (container.ContainerState, int) {
				if c.Config.Image == newRef {
					c.Health = container.Starting
				}
				return container.StateRunning, 0
			},
			want: []string{pull, create, start, stop, remove}, wantErr: docker.ErrHandoverFailed, wantImage: oldRef, images: []string{oldRef, newRef}},
		{name: "auto with room downloads then kills", strategy: docker.AutoUpdate, free: 10 * newSize,
			want: []string{pull, create, stop, remove, rename, start}, wantImage: newRef, images: []string{oldRef, newRef}},
		{name: "auto on a full disk deletes then downloads", strategy: docker.AutoUpdate, free: newSize / 2, oldSize: newSize,
			want: []string{stop, remove, rmi, pull, create, start}, wantImage: newRef, images: []string{newRef}},
		{name: "download-then-kill on a full disk changes nothing", strategy: docker.DownloadThenKill, free: newSize / 2,
			wantErr: docker.ErrNoSpace, wantImage: oldRef, images: []string{oldRef}},
		{name: "kill-then-download on a full disk changes nothing", strategy: docker.KillThenDownload, free: newSize / 2,
			wantErr: docker.ErrNoSpace, wantImage: oldRef, images: []string{oldRef}},
		{name: "hand-over on a full disk changes nothing", strategy: docker.HandOver, free: newSize / 2,
			wantErr: docker.ErrNoSpace, wantImage: oldRef, images: []string{oldRef}},
		{name: "delete-then-download on a full disk changes nothing", strategy: docker.DeleteThenDownload, free: newSize / 2, oldSize: newSize / 4,
			wantErr: docker.ErrNoSpace, wantImage: oldRef, images: []string{oldRef}},
		{name: "auto on a disk too full even without the old image changes nothing", strategy: docker.AutoUpdate, free: newSize / 2, oldSize: newSize / 4,
			wantErr: docker.ErrNoSpace, wantImage: oldRef, images: []string{oldRef}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := dockertest.New()
				f.AddImage(oldRef)
				f.SetImageSize(oldRef, tt.oldSize)
				f.Pullable(newRef, newSize/2, newSize/2)
				spec := docker.ContainerSpec{Service: "a", Image: oldRef, Update: tt.strategy, Healthcheck: tt.health,
					HandoverTimeout: 5 * time.Second}
				p := &docker.Project{Name: "up", Containers: []docker.ContainerSpec{spec}}
				if tt.free > 0 {
					p.FreeSpace = freeSpace(tt.free)
					p.Containers[0].ImageSize = newSize
				}
				apply(t, f, p)
				f.OnStart = tt.onStart
				if tt.signalOld {
					f.SetFile("up-a", docker.HandoverKillMeFile, true)
				}
				p.Containers[0].Image = newRef
				f.ResetCalls()
				g, err := p.Graph(f)
				require.NoError(t, err)
				_, err = converge.Apply(t.Context(), g)
				if tt.wantErr != nil {
					require.ErrorIs(t, err, tt.wantErr)
				} else {
					require.NoError(t, err)
				}
				assert.Equal(t, tt.want, keyLog(f))
				cs := f.Containers()
				require.Len(t, cs, 1, "one container, no leftover")
				assert.Equal(t, "up-a", cs[0].Name)
				assert.Equal(t, tt.wantImage, cs[0].Config.Image)
				assert.Equal(t, container.StateRunning, cs[0].Status)
				assert.Equal(t, tt.images, f.Images())
			})
		})
	}
}

func TestUpdateStrategyFromCompose(t *testing.T) {
	tests := []struct {
		name    string
		service string
		want    docker.UpdateStrategy
		timeout time.Duration
		wantErr error
	}{
		{name: "balena's label", service: "    labels:\n      io.balena.update.strategy: delete-then-download\n", want: docker.DeleteThenDownload},
		{name: "hand-over with its timeout", service: "    labels:\n      io.balena.update.strategy: hand-over\n      io.balena.update.handover-timeout: \"1500\"\n",
			want: docker.HandOver, timeout: 1500 * time.Millisecond},
		{name: "x-update", service: "    x-update: auto\n", want: docker.AutoUpdate},
		{name: "x-update agreeing with the label", service: "    x-update: hand-over\n    labels:\n      io.balena.update.strategy: hand-over\n", want: docker.HandOver},
		{name: "x-update contradicting the label", service: "    x-update: auto\n    labels:\n      io.balena.update.strategy: hand-over\n", wantErr: docker.ErrInvalidSpec},
		{name: "unknown label value", service: "    labels:\n      io.balena.update.strategy: sometimes\n", wantErr: docker.ErrInvalidSpec},
		{name: "bad timeout", service: "    labels:\n      io.balena.update.handover-timeout: soon\n", wantErr: docker.ErrInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := docker.LoadCompose(t.Context(), []byte("name: s\nservices:\n  a:\n    image: app:1\n"+tt.service), docker.LoadOptions{})
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				var se *docker.SpecError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, "a", se.Service)
				return
			}
			require.NoError(t, err)
			c := p.Containers[0]
			assert.Equal(t, tt.want, c.Update)
			assert.Equal(t, tt.timeout, c.HandoverTimeout)
			assert.NotContains(t, c.Labels, docker.LabelUpdateStrategy, "read, not set as a label")

			// The stored form names the strategy.
			b, err := p.MarshalJSON()
			require.NoError(t, err)
			assert.Contains(t, string(b), `"update_strategy":"`+tt.want.String()+`"`)
			var back docker.Project
			require.NoError(t, back.UnmarshalJSON(b))
			assert.Equal(t, tt.want, back.Containers[0].Update)
			assert.Equal(t, tt.timeout, back.Containers[0].HandoverTimeout)
		})
	}
}

func TestParseUpdateStrategy(t *testing.T) {
	for _, u := range []docker.UpdateStrategy{docker.DownloadThenKill, docker.KillThenDownload, docker.DeleteThenDownload, docker.HandOver, docker.AutoUpdate} {
		got, err := docker.ParseUpdateStrategy(u.String())
		require.NoError(t, err)
		assert.Equal(t, u, got)
	}
	_, err := docker.ParseUpdateStrategy("later")
	require.ErrorIs(t, err, docker.ErrInvalidSpec)
	p := &docker.Project{Name: "v", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Update: docker.AutoUpdate + 1}}}
	_, err = p.Graph(dockertest.New())
	require.ErrorIs(t, err, docker.ErrInvalidSpec)
}

// TestSupersededImagesPruned updates app:1 (loaded by someone else) to
// app:2 and then app:3 (both pulled by converge): app:1 survives, app:2 is
// removed once app:3 runs, unless another container uses it or the
// project keeps its images.
func TestSupersededImagesPruned(t *testing.T) {
	tests := []struct {
		name      string
		strategy  docker.UpdateStrategy
		keep      bool
		bystander bool // a container of another program on app:2
		want      []string
	}{
		{name: "download-then-kill", strategy: docker.DownloadThenKill, want: []string{oldRef, "app:3"}},
		{name: "kill-then-download", strategy: docker.KillThenDownload, want: []string{oldRef, "app:3"}},
		{name: "hand-over", strategy: docker.HandOver, want: []string{oldRef, "app:3"}},
		{name: "kept on request", strategy: docker.DownloadThenKill, keep: true, want: []string{oldRef, newRef, "app:3"}},
		{name: "still used by another container", strategy: docker.DownloadThenKill, bystander: true, want: []string{oldRef, newRef, "app:3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := dockertest.New()
				f.AddImage(oldRef)
				f.Pullable(newRef, 10)
				f.Pullable("app:3", 10)
				p := &docker.Project{Name: "pr", KeepImages: tt.keep,
					Containers: []docker.ContainerSpec{{Service: "a", Image: oldRef, Update: tt.strategy}}}
				apply(t, f, p)
				p.Containers[0].Image = newRef
				apply(t, f, p)
				assert.Equal(t, []string{oldRef, newRef}, f.Images(), "app:1 was not brought by converge: kept")
				if tt.bystander {
					_, err := f.ContainerCreate(t.Context(), &container.Config{Image: newRef}, nil, nil, nil, "someone-else")
					require.NoError(t, err)
				}
				p.Containers[0].Image = "app:3"
				rep := apply(t, f, p)
				assert.Equal(t, tt.want, f.Images())
				r, ok := rep.Item(docker.PruneID("pr"))
				require.True(t, ok)
				assert.Equal(t, converge.OutcomeUnchanged == r.Outcome, tt.keep || tt.bystander)

				// Converged: the prune item costs no engine call.
				f.ResetCalls()
				rep = apply(t, f, p)
				assert.Empty(t, rep.IDs(converge.OutcomeChanged))
				assert.Zero(t, f.Calls()[dockertest.ImageRemove])
			})
		})
	}
}

// TestBuildChecksSpaceFirst: a build with a known size is refused before
// it starts when the engine's data root is too full.
func TestBuildChecksSpaceFirst(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\n"), 0o600))
	tests := []struct {
		name    string
		free    uint64
		wantErr error
	}{
		{name: "too full", free: newSize / 2, wantErr: docker.ErrNoSpace},
		{name: "room: the build is tried", free: 2 * newSize, wantErr: docker.ErrCannotBuild},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := dockertest.New()
			p := &docker.Project{Name: "b", FreeSpace: freeSpace(tt.free), Containers: []docker.ContainerSpec{
				{Service: "a", Image: "built:1", Build: &docker.Build{Context: dir}, ImageSize: newSize}}}
			err := applyErr(t, f, p)
			require.ErrorIs(t, err, tt.wantErr)
			assert.Empty(t, f.Containers(), "nothing created")
		})
	}
}
