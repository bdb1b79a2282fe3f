package dockertest_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/convergekit/converge/docker/dockertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFakeCountsAndFails(t *testing.T) {
	ctx := context.Background()
	f := dockertest.New()
	f.AddImage("app:1")
	_, err := f.ContainerCreate(ctx, &container.Config{Image: "app:1"}, nil, nil, nil, "a")
	require.NoError(t, err)
	_, err = f.ContainerCreate(ctx, &container.Config{Image: "app:1"}, nil, nil, nil, "a")
	assert.True(t, errdefs.IsConflict(err), "duplicate name: %v", err)
	_, err = f.ContainerInspect(ctx, "nope")
	assert.True(t, errdefs.IsNotFound(err))
	_, err = f.ContainerCreate(ctx, &container.Config{Image: "missing:1"}, nil, nil, nil, "b")
	assert.True(t, errdefs.IsNotFound(err))
	assert.Equal(t, 3, f.Calls()[dockertest.ContainerCreate])
	assert.Equal(t, 3, f.WriteCalls())
	assert.Equal(t, 4, f.TotalCalls())
	assert.Equal(t, []string{"ContainerCreate", "ContainerCreate", "ContainerInspect", "ContainerCreate"}, f.Log())

	f.FailWrites(1, 1)
	err = f.ContainerStart(ctx, "a", container.StartOptions{})
	require.ErrorIs(t, err, dockertest.ErrTransient)
	assert.True(t, errdefs.IsUnavailable(err))
	c, _ := f.Container("a")
	assert.Equal(t, container.ContainerState("created"), c.Status, "a failed write has no effect")
	_, err = f.NetworkCreate(ctx, "n", network.CreateOptions{})
	require.ErrorIs(t, err, dockertest.ErrTransient)
	f.FailWrites(0, 1)
	f.ResetCalls()
	assert.Zero(t, f.TotalCalls())
	assert.Empty(t, f.Log())
}

func TestFakePullStreamsProgress(t *testing.T) {
	f := dockertest.New()
	f.Pullable("x:1", 10)
	rc, err := f.ImagePull(context.Background(), "x:1", image.PullOptions{})
	require.NoError(t, err)
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"total":10`)
	list, err := f.ImageList(context.Background(), image.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, []string{"x:1"}, list[0].RepoTags)
	_, err = f.ImagePull(context.Background(), "y:1", image.PullOptions{})
	assert.True(t, errors.Is(err, errdefs.ErrNotFound))
}

func TestCounterWrapsAnEngine(t *testing.T) {
	f := dockertest.New()
	c := dockertest.Count(f)
	_, err := c.ContainerList(context.Background(), container.ListOptions{})
	require.NoError(t, err)
	_, err = c.VolumeCreate(context.Background(), volumeOpts("v"))
	require.NoError(t, err)
	assert.Equal(t, 2, c.Total())
	assert.Equal(t, 1, c.Writes())
	c.Reset()
	assert.Zero(t, c.Total())
}

func volumeOpts(name string) volume.CreateOptions { return volume.CreateOptions{Name: name} }
