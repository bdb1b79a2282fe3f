package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// otherImage commits a container of img into a new image (another ID, no
// registry involved) and returns its ID; it is removed when the test ends,
// after the containers of project name.
func otherImage(t *testing.T, cli *client.Client, img, name string) string {
	t.Helper()
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Labels: map[string]string{dockertest.TestLabel: "1"}}, nil, nil, nil, name+"-commit")
	require.NoError(t, err)
	defer func() { _ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) }()
	r, err := cli.ContainerCommit(ctx, c.ID, container.CommitOptions{Config: &container.Config{
		Cmd: []string{"/app", "sleep"}, Labels: map[string]string{dockertest.TestLabel: "1", "moved": name}}})
	require.NoError(t, err)
	removeImageAfter(t, cli, name, r.ID)
	return r.ID
}

func TestIntegrationMovedTagRecreatesItsContainers(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	name := uniqueName("cvm")
	cleanupProject(t, cli, name)
	eng := dockertest.Count(cli)

	tag := "converge-test/moved:" + name
	require.NoError(t, cli.ImageTag(ctx, img, tag))
	removeImageAfter(t, cli, name, tag)
	p := &docker.Project{Name: name, Containers: []docker.ContainerSpec{
		{Service: "a", Image: tag, Pull: docker.PullNever, Command: []string{"/app", "sleep"}, Labels: map[string]string{dockertest.TestLabel: "1"}},
		{Service: "b", Image: img, Pull: docker.PullNever, Command: []string{"/app", "sleep"}, Labels: map[string]string{dockertest.TestLabel: "1"}},
	}}
	apply(t, eng, p)
	a, b := inspect(t, cli, name+"-a"), inspect(t, cli, name+"-b")

	// Someone moves the tag to another image: the container on it runs
	// the old image ID and is recreated; the other is left alone.
	moved := otherImage(t, cli, img, name)
	require.NotEqual(t, a.Image, moved)
	require.NoError(t, cli.ImageTag(ctx, moved, tag))
	eng.Reset()
	plans := docker.Plans(dry(t, eng, p))
	assert.Contains(t, plans, docker.Plan{Container: name + "-a", Action: docker.ActionRecreate, Fields: []string{"image-id"}})
	rep := apply(t, eng, p)
	assert.Equal(t, []converge.ID{docker.ContainerID(name, "a")}, rep.IDs(converge.OutcomeChanged))
	a2 := inspect(t, cli, name+"-a")
	assert.NotEqual(t, a.ID, a2.ID)
	assert.Equal(t, moved, a2.Image, "the new container runs the image the tag points to now")
	assert.True(t, a2.State.Running)
	assert.Equal(t, b.ID, inspect(t, cli, name+"-b").ID)

	// Converged again: a constant number of reads.
	eng.Reset()
	rep = apply(t, eng, p)
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.Zero(t, eng.Writes(), "calls: %v", eng.Calls())
	assert.LessOrEqual(t, eng.Total(), 2, "calls: %v", eng.Calls())
}

func TestIntegrationUpdateLockHeldByTheApp(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	name := uniqueName("cvl")
	cleanupProject(t, cli, name)
	eng := dockertest.Count(cli)

	// The application shares a directory with the agent and takes its
	// lock by creating updates.lock in it.
	dir := t.TempDir()
	grace := 2 * time.Second
	p := &docker.Project{Name: name, Containers: []docker.ContainerSpec{{
		Service: "a", Image: img, Pull: docker.PullNever, Command: []string{"/app", "sleep"},
		Env: map[string]string{"V": "1"}, StopTimeout: &grace, Labels: map[string]string{dockertest.TestLabel: "1"},
		Mounts:     []docker.Mount{{Type: "bind", Source: dir, Target: "/lock"}},
		UpdateLock: "/lock/updates.lock",
	}}}
	apply(t, eng, p)
	before := inspect(t, cli, name+"-a")
	assert.Equal(t, "/lock/updates.lock", before.Config.Labels[docker.LabelUpdateLock])

	// Not held: the engine does not find the file, nothing is refused.
	p.Containers[0].Env["V"] = "2"
	eng.Reset()
	apply(t, eng, p)
	assert.Equal(t, 1, eng.Calls()[dockertest.ContainerStatPath])
	held := inspect(t, cli, name+"-a")
	require.NotEqual(t, before.ID, held.ID)

	// Held: the change is refused and the container keeps running.
	lockFile := filepath.Join(dir, "updates.lock")
	require.NoError(t, os.WriteFile(lockFile, nil, 0o644))
	p.Containers[0].Env["V"] = "3"
	g, err := p.Graph(eng)
	require.NoError(t, err)
	_, err = converge.Apply(ctx, g)
	require.ErrorIs(t, err, converge.ErrLocked)
	var le *docker.LockError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, docker.LockError{Container: name + "-a", Lock: "/lock/updates.lock", Action: docker.ActionRecreate}, *le)
	r := inspect(t, cli, name+"-a")
	assert.Equal(t, held.ID, r.ID)
	assert.True(t, r.State.Running)
	assert.Equal(t, held.State.StartedAt, r.State.StartedAt, "not restarted either")
	_, err = converge.Clean(ctx, g)
	require.ErrorIs(t, err, converge.ErrLocked, "cleaning does not remove a locked container")
	assert.Equal(t, held.ID, inspect(t, cli, name+"-a").ID)

	// Under a reconcile loop the pass fails as locked; a forced trigger
	// goes past the lock.
	rec, passes, stop := runLoop(t, eng, *p)
	defer stop()
	select {
	case err := <-passes:
		require.ErrorIs(t, err, converge.ErrLocked)
	case <-time.After(60 * time.Second):
		t.Fatal("no pass within 60s")
	}
	rec.TriggerForced()
	require.NoError(t, waitPass(passes, 90*time.Second))
	forced := inspect(t, cli, name+"-a")
	assert.NotEqual(t, held.ID, forced.ID)
	assert.Contains(t, forced.Config.Env, "V=3")
	assert.True(t, forced.State.Running)
}
