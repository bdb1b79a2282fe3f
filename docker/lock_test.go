package docker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

const lockPath = "/run/lock/updates.lock"

// lockedProject is two services, a with an update lock, b without.
func lockedProject(update docker.UpdateStrategy) *docker.Project {
	return &docker.Project{Name: "lk", Containers: []docker.ContainerSpec{
		{Service: "a", Image: "app:1", Env: map[string]string{"V": "1"}, UpdateLock: lockPath, Update: update},
		{Service: "b", Image: "app:1", Env: map[string]string{"V": "1"}},
	}}
}

func TestUpdateLockRefusesToReplaceStopOrRemove(t *testing.T) {
	tests := []struct {
		name   string
		change func(p *docker.Project)
		clean  bool
		action docker.Action
	}{
		{"recreate", func(p *docker.Project) { p.Containers[0].Env["V"] = "2" }, false, docker.ActionRecreate},
		{"recreate kill-then-download", func(p *docker.Project) {
			p.Containers[0].Env["V"] = "2"
			p.Containers[0].Update = docker.KillThenDownload
		}, false, docker.ActionRecreate},
		{"stop", func(p *docker.Project) { p.Containers[0].Run = docker.Stopped }, false, docker.ActionStop},
		{"orphan", func(p *docker.Project) { p.Containers = p.Containers[1:] }, false, docker.ActionRemove},
		{"clean", nil, true, docker.ActionRemove},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFake()
			p := lockedProject(docker.DownloadThenKill)
			apply(t, f, p)
			before, _ := f.Container("lk-a")
			f.SetFile("lk-a", lockPath, true)
			if tt.change != nil {
				tt.change(p)
			}
			g, err := p.Graph(f)
			require.NoError(t, err)
			run := converge.Apply
			if tt.clean {
				run = converge.Clean
			}

			_, err = run(ctx, g)
			require.ErrorIs(t, err, converge.ErrLocked)
			var le *docker.LockError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, docker.LockError{Container: "lk-a", Lock: lockPath, Action: tt.action}, *le)
			assert.Contains(t, err.Error(), "lk-a")
			assert.Contains(t, err.Error(), lockPath)
			after, ok := f.Container("lk-a")
			require.True(t, ok, "the locked container is still there")
			assert.Equal(t, before.ID, after.ID)
			assert.Equal(t, "running", string(after.Status))

			// A forced pass goes past the lock.
			_, err = run(converge.WithForce(ctx), g)
			require.NoError(t, err)
			after, ok = f.Container("lk-a")
			assert.True(t, !ok || after.ID != before.ID || after.Status != "running", "the forced pass changed the container")
		})
	}
}

func TestUpdateLockReleasedLetsTheChangeThrough(t *testing.T) {
	f := newFake()
	p := lockedProject(docker.DownloadThenKill)
	apply(t, f, p)
	f.SetFile("lk-a", lockPath, true)
	p.Containers[0].Env["V"] = "2"
	p.Containers[1].Env["V"] = "2"
	g, err := p.Graph(f)
	require.NoError(t, err)
	rep, err := converge.Apply(context.Background(), g)
	require.ErrorIs(t, err, converge.ErrLocked)
	assert.Equal(t, []converge.ID{docker.ContainerID("lk", "b")}, rep.IDs(converge.OutcomeChanged),
		"a container without a lock is updated in the same walk")

	f.SetFile("lk-a", lockPath, false)
	rep = apply(t, f, p)
	assert.Equal(t, []converge.ID{docker.ContainerID("lk", "a")}, rep.IDs(converge.OutcomeChanged))
	c, _ := f.Container("lk-a")
	assert.Contains(t, c.Config.Env, "V=2")
	assert.Equal(t, lockPath, c.Config.Labels[docker.LabelUpdateLock], "the lock path travels with the container")
}

func TestUpdateLockAllowsStartCreateAndUnpause(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *dockertest.Engine)
		want  string
	}{
		{"start a stopped container", func(f *dockertest.Engine) { f.Exit("lk-a", 0) }, "running"},
		{"unpause", func(f *dockertest.Engine) { f.Pause("lk-a") }, "running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			p := lockedProject(docker.DownloadThenKill)
			apply(t, f, p)
			f.SetFile("lk-a", lockPath, true)
			tt.setup(f)
			before, _ := f.Container("lk-a")
			apply(t, f, p)
			after, _ := f.Container("lk-a")
			assert.Equal(t, before.ID, after.ID)
			assert.Equal(t, tt.want, string(after.Status))
		})
	}
	t.Run("create a missing container", func(t *testing.T) {
		f := newFake()
		rep := apply(t, f, lockedProject(docker.DownloadThenKill))
		assert.Len(t, rep.IDs(converge.OutcomeChanged), 2)
		assert.Zero(t, f.Calls()[dockertest.ContainerStatPath], "nothing to lock when nothing runs")
	})
}

func TestUpdateLockCostsNothingWhenConverged(t *testing.T) {
	f := newFake()
	p := lockedProject(docker.DownloadThenKill)
	apply(t, f, p)
	f.SetFile("lk-a", lockPath, true)
	f.ResetCalls()
	apply(t, f, p)
	assert.Zero(t, f.Calls()[dockertest.ContainerStatPath], "the lock is looked at only before a change it guards")
	assert.Zero(t, f.WriteCalls())
}

func TestUpdateLockFromComposeLabel(t *testing.T) {
	p := load(t, `
name: lk
services:
  a:
    image: app:1
    labels:
      io.convergekit.update-lock: /run/lock/updates.lock
      other: x
`)
	require.Len(t, p.Containers, 1)
	assert.Equal(t, lockPath, p.Containers[0].UpdateLock)
	assert.Equal(t, map[string]string{"other": "x"}, p.Containers[0].Labels)
}

func TestUpdateLockMustBeAnAbsolutePath(t *testing.T) {
	for _, bad := range []string{"updates.lock", "/run/../lock", "/run/lock/"} {
		p := &docker.Project{Name: "lk", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", UpdateLock: bad}}}
		_, err := p.Graph(dockertest.New())
		var se *docker.SpecError
		require.ErrorAs(t, err, &se, bad)
		assert.Equal(t, "UpdateLock", se.Field)
	}
	p := &docker.Project{Name: "lk", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1",
		Labels: map[string]string{docker.LabelUpdateLock: lockPath}}}}
	_, err := p.Graph(dockertest.New())
	var se *docker.SpecError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "Labels", se.Field)
}

func TestUpdateLockEngineFailureIsNotALock(t *testing.T) {
	f := newFake()
	p := lockedProject(docker.DownloadThenKill)
	apply(t, f, p)
	p.Containers[0].Env["V"] = "2"
	g, err := p.Graph(statFails{f})
	require.NoError(t, err)
	_, err = converge.Apply(context.Background(), g)
	require.ErrorIs(t, err, errStat)
	assert.False(t, errors.Is(err, converge.ErrLocked))
	c, _ := f.Container("lk-a")
	assert.Contains(t, c.Config.Env, "V=1", "a lock that cannot be read is not ignored")
}

var errStat = errors.New("stat: engine unavailable")

// statFails is the fake with ContainerStatPath failing.
type statFails struct{ *dockertest.Engine }

func (statFails) ContainerStatPath(context.Context, string, string) (container.PathStat, error) {
	return container.PathStat{}, errStat
}
