package docker_test

import (
	"context"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

func TestIntegrationItems(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	name := uniqueName("cvi")
	cleanupProject(t, cli, name)
	eng := dockertest.Count(cli)

	// A second tag of the test image, which the Image item may remove.
	alias := "converge-test/alias:" + name
	require.NoError(t, cli.ImageTag(ctx, img, alias))
	removeImageAfter(t, cli, name, alias)

	g := converge.NewGraph()
	g.Add(converge.Wrap[docker.NetworkState](docker.NewNetwork(eng, name, docker.NetworkSpec{Name: name + "-net", Labels: map[string]string{dockertest.TestLabel: "1"}})), converge.Present)
	g.Add(converge.Wrap[docker.VolumeState](docker.NewVolume(eng, name, docker.VolumeSpec{Name: name + "-vol", Labels: map[string]string{dockertest.TestLabel: "1"}})), converge.Present)
	im := docker.NewImage(eng, alias, docker.PullNever)
	g.Add(converge.Wrap[docker.ImageState](im), converge.Present)

	rep, err := converge.Apply(ctx, g)
	require.NoError(t, err)
	assert.ElementsMatch(t, []converge.ID{docker.NetworkID(name + "-net"), docker.VolumeID(name + "-vol")}, rep.IDs(converge.OutcomeChanged))
	r, _ := rep.Item(im.ID())
	assert.Equal(t, converge.OutcomeUnchanged, r.Outcome, "a local image needs no pull")
	assert.NotEmpty(t, r.After.(docker.ImageState).ID)
	n, err := cli.NetworkInspect(ctx, name+"-net", network.InspectOptions{})
	require.NoError(t, err)
	assert.Equal(t, docker.OwnerValue, n.Labels[docker.LabelOwner])

	eng.Reset()
	rep, err = converge.Apply(ctx, g)
	require.NoError(t, err)
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.Zero(t, eng.Writes())

	// A container created from the image's other tag does not hold the
	// alias: removing the alias only untags.
	other, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Labels: map[string]string{dockertest.TestLabel: "1"}}, nil, nil, nil, name+"-other")
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), other.ID, container.RemoveOptions{Force: true}) })

	_, err = converge.Clean(ctx, g)
	require.NoError(t, err)
	_, err = cli.NetworkInspect(ctx, name+"-net", network.InspectOptions{})
	assert.True(t, client.IsErrNotFound(err))
	_, err = cli.VolumeInspect(ctx, name+"-vol")
	assert.True(t, client.IsErrNotFound(err))
	left, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", alias))})
	require.NoError(t, err)
	assert.Empty(t, left, "the unused image tag was removed")
	has, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", img))})
	require.NoError(t, err)
	assert.Len(t, has, 1, "the image itself stays under its other tag")

	// Objects with our names that we do not own are left alone by a clean.
	_, err = cli.NetworkCreate(ctx, name+"-net", network.CreateOptions{Labels: map[string]string{docker.LabelProject: name}})
	require.NoError(t, err)
	_, err = cli.VolumeCreate(ctx, volume.CreateOptions{Name: name + "-vol", Labels: map[string]string{docker.LabelProject: name}})
	require.NoError(t, err)
	_, err = converge.Clean(ctx, g)
	require.NoError(t, err)
	_, err = cli.NetworkInspect(ctx, name+"-net", network.InspectOptions{})
	assert.NoError(t, err, "a network we do not own stays")
	_, err = cli.VolumeInspect(ctx, name+"-vol")
	assert.NoError(t, err, "a volume we do not own stays")

	// PullNever with a missing image is a typed error.
	g2 := converge.NewGraph()
	g2.Add(converge.Wrap[docker.ImageState](docker.NewImage(eng, "converge-test/missing:"+name, docker.PullNever)), converge.Present)
	_, err = converge.Apply(ctx, g2)
	require.ErrorIs(t, err, docker.ErrImageMissing)
}
