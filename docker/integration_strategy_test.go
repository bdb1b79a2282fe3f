package docker_test

import (
	"context"
	"errors"
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

// applyErr walks p's graph and returns the walk's error.
func applyErr(t *testing.T, eng docker.Engine, p *docker.Project) error {
	t.Helper()
	g, err := p.Graph(eng)
	require.NoError(t, err)
	_, err = converge.Apply(context.Background(), g)
	return err
}

// TestIntegrationHandOver replaces a container by hand-over on a real
// engine: a new container that becomes healthy takes over; one whose
// healthcheck never passes is removed when the timeout passes, and the
// old one goes on running (balena-supervisor#1759).
func TestIntegrationHandOver(t *testing.T) {
	cli, img := realEngine(t)
	name := uniqueName("cvh")
	cleanupProject(t, cli, name)
	healthy := &docker.Healthcheck{Test: []string{"CMD", "/app", "ok"}, Interval: 500 * time.Millisecond, Retries: 1}
	spec := docker.ContainerSpec{Service: "a", Image: img, Pull: docker.PullNever, Command: []string{"/app", "sleep"},
		Env: map[string]string{"V": "1"}, Healthcheck: healthy, Update: docker.HandOver, HandoverTimeout: 20 * time.Second,
		Labels: map[string]string{dockertest.TestLabel: "1"}}
	p := &docker.Project{Name: name, PollInterval: 200 * time.Millisecond, Containers: []docker.ContainerSpec{spec}}
	apply(t, cli, p)
	first := inspect(t, cli, name+"-a")

	// A new container that turns healthy takes over.
	p.Containers[0].Env = map[string]string{"V": "2"}
	apply(t, cli, p)
	second := inspect(t, cli, name+"-a")
	assert.NotEqual(t, first.ID, second.ID)
	assert.Contains(t, second.Config.Env, "V=2")
	require.NotNil(t, second.State.Health)
	assert.Equal(t, container.Healthy, second.State.Health.Status, "it took over once healthy")
	_, err := cli.ContainerInspect(context.Background(), first.ID)
	assert.True(t, client.IsErrNotFound(err), "the old container is gone")

	// A new container that never gets healthy: the old one keeps running.
	p.Containers[0].Env = map[string]string{"V": "3"}
	p.Containers[0].HandoverTimeout = 3 * time.Second
	p.Containers[0].Healthcheck = &docker.Healthcheck{Test: []string{"CMD", "/app", "exit", "1"}, Interval: 500 * time.Millisecond, Retries: 100}
	err = applyErr(t, cli, p)
	require.ErrorIs(t, err, docker.ErrHandoverFailed)
	var he *docker.HandoverError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, name+"-a", he.Container)
	assert.Equal(t, container.Starting, he.Health)
	still := inspect(t, cli, name+"-a")
	assert.Equal(t, second.ID, still.ID, "the old container was not killed")
	assert.True(t, still.State.Running)
	_, err = cli.ContainerInspect(context.Background(), docker.TempName(name+"-a"))
	assert.True(t, client.IsErrNotFound(err), "the new container was removed")
}

// TestIntegrationDeleteThenDownload removes the old image before it brings
// the new one, on a real engine. The new image is local (no registry is
// reachable from the tests), so its "download" finds it.
func TestIntegrationDeleteThenDownload(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	name := uniqueName("cvd")
	cleanupProject(t, cli, name)
	oldTag := "converge-test/dtd:" + name + "-old"
	oldID := otherImage(t, cli, img, name)
	require.NoError(t, cli.ImageTag(ctx, oldID, oldTag))
	removeImageAfter(t, cli, name, oldTag)
	newTag := "converge-test/dtd:" + name + "-new"
	require.NoError(t, cli.ImageTag(ctx, img, newTag))
	removeImageAfter(t, cli, name, newTag)

	p := &docker.Project{Name: name, Containers: []docker.ContainerSpec{{Service: "a", Image: oldTag, Pull: docker.PullNever,
		Command: []string{"/app", "sleep"}, Update: docker.DeleteThenDownload, Labels: map[string]string{dockertest.TestLabel: "1"}}}}
	apply(t, cli, p)
	require.Equal(t, oldID, inspect(t, cli, name+"-a").Image)

	p.Containers[0].Image = newTag
	apply(t, cli, p)
	c := inspect(t, cli, name+"-a")
	assert.True(t, c.State.Running)
	newImg, err := cli.ImageInspect(ctx, newTag)
	require.NoError(t, err)
	assert.Equal(t, newImg.ID, c.Image)
	_, err = cli.ImageInspect(ctx, oldID)
	assert.True(t, client.IsErrNotFound(err), "the old image was deleted: %v", err)
	_, err = cli.ImageInspect(ctx, img)
	require.NoError(t, err, "the shared test image is left alone")
}

// TestIntegrationDiskTooFull checks the free space of the engine's real
// data root (docker info DockerRootDir, statfs'd here) against an image
// larger than any disk: a *SpaceError before anything is pulled or
// stopped. (Kill-then-download and delete-then-download first ask the
// registry whether the image can be pulled, which no registry answers
// here: their space check is tested on the fake engine.)
func TestIntegrationDiskTooFull(t *testing.T) {
	cli, img := realEngine(t)
	name := uniqueName("cvf")
	cleanupProject(t, cli, name)
	for _, strategy := range []docker.UpdateStrategy{docker.DownloadThenKill, docker.HandOver, docker.AutoUpdate} {
		t.Run(strategy.String(), func(t *testing.T) {
			p := &docker.Project{Name: name, Containers: []docker.ContainerSpec{{Service: "a", Image: img, Pull: docker.PullNever,
				Command: []string{"/app", "sleep"}, Labels: map[string]string{dockertest.TestLabel: "1"}}}}
			apply(t, cli, p)
			before := inspect(t, cli, name+"-a")

			p.Containers[0].Image = "converge-test/absent:" + name // not local: a pull is due
			p.Containers[0].Pull = docker.PullMissing
			p.Containers[0].Update = strategy
			p.Containers[0].ImageSize = 1 << 62
			err := applyErr(t, dockertest.Count(cli), p)
			require.ErrorIs(t, err, docker.ErrNoSpace)
			var se *docker.SpaceError
			require.ErrorAs(t, err, &se)
			info, ierr := cli.Info(context.Background())
			require.NoError(t, ierr)
			assert.Equal(t, info.DockerRootDir, se.Root)
			assert.Positive(t, se.Free)
			after := inspect(t, cli, name+"-a")
			assert.Equal(t, before.ID, after.ID, "nothing half-done")
			assert.True(t, after.State.Running)
			assert.False(t, errors.Is(err, docker.ErrImageMissing))
		})
	}
}
