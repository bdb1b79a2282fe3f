package dockertest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// TestRemoveProjectRemovesOnlyItsProject: RemoveProject removes the
// containers, networks and volumes labelled as one project's, by converge
// or by compose, and leaves another project's alone.
func TestRemoveProjectRemovesOnlyItsProject(t *testing.T) {
	ctx := context.Background()
	cli, img := testEngine(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	gone, kept := "cvrm"+hex.EncodeToString(b), "cvrk"+hex.EncodeToString(b)
	t.Cleanup(func() { assert.NoError(t, dockertest.RemoveProject(context.Background(), cli, kept)) })

	make1 := func(project, label string) {
		labels := map[string]string{label: project, dockertest.TestLabel: "1"}
		_, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: project + "_data", Labels: labels})
		require.NoError(t, err)
		_, err = cli.NetworkCreate(ctx, project+"_net", network.CreateOptions{Labels: labels})
		require.NoError(t, err)
		_, err = cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"/app", "sleep"}, Labels: labels}, nil, nil, nil, project+"-c")
		require.NoError(t, err)
	}
	make1(gone, docker.LabelProject)
	make1(gone+"x", "com.docker.compose.project") // compose's label
	make1(kept, docker.LabelProject)

	require.NoError(t, dockertest.RemoveProject(ctx, cli, gone))
	require.NoError(t, dockertest.RemoveProject(ctx, cli, gone+"x"))
	require.NoError(t, dockertest.RemoveProject(ctx, cli, gone), "removing what is gone is no error")
	for _, p := range []string{gone, gone + "x"} {
		_, err := cli.ContainerInspect(ctx, p+"-c")
		assert.Error(t, err, "container of %s", p)
		_, err = cli.NetworkInspect(ctx, p+"_net", network.InspectOptions{})
		assert.Error(t, err, "network of %s", p)
		_, err = cli.VolumeInspect(ctx, p+"_data")
		assert.Error(t, err, "volume of %s", p)
	}
	_, err := cli.ContainerInspect(ctx, kept+"-c")
	assert.NoError(t, err, "another project's container is kept")
	_, err = cli.NetworkInspect(ctx, kept+"_net", network.InspectOptions{})
	assert.NoError(t, err)
	_, err = cli.VolumeInspect(ctx, kept+"_data")
	assert.NoError(t, err)
}
