package dockertest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// TestBystanderNoticesATouch: Check passes on a project left alone and
// fails, matching ErrBystanderTouched, when a test restarted one of its
// containers or took the project down with its volumes (what a test that
// reused the project's name did).
func TestBystanderNoticesATouch(t *testing.T) {
	ctx := context.Background()
	cli, img := testEngine(t)
	tests := []struct {
		name  string
		touch func(t *testing.T, b *dockertest.Bystander)
	}{
		{"restart", func(t *testing.T, b *dockertest.Bystander) {
			require.NoError(t, cli.ContainerRestart(ctx, b.Name()+"-web", container.StopOptions{}))
		}},
		{"down -volumes", func(t *testing.T, b *dockertest.Bystander) {
			p, err := docker.LoadCompose(ctx, []byte("name: "+b.Name()+"\nservices:\n  db: {image: "+img+"}\n"), docker.LoadOptions{})
			require.NoError(t, err)
			p.RemoveVolumes = true
			g, err := p.Graph(cli)
			require.NoError(t, err)
			_, err = converge.Clean(ctx, g)
			require.NoError(t, err)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make([]byte, 4)
			_, _ = rand.Read(b)
			by, err := dockertest.StartBystander(ctx, cli, "cvby"+hex.EncodeToString(b), img)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, by.Remove(context.Background())) })
			require.True(t, by.Created())
			require.NoError(t, by.Check(ctx), "left alone")
			tt.touch(t, by)
			require.ErrorIs(t, by.Check(ctx), dockertest.ErrBystanderTouched)
		})
	}
}

// TestBystanderIsShared: runs that share an engine share the bystander:
// the second watcher finds it, the first one's Remove leaves it to the
// second, whose Check still passes and whose Remove removes it.
func TestBystanderIsShared(t *testing.T) {
	ctx := context.Background()
	cli, img := testEngine(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "cvby" + hex.EncodeToString(b)
	first, err := dockertest.StartBystander(ctx, cli, name, img)
	require.NoError(t, err)
	second, err := dockertest.StartBystander(ctx, cli, name, img)
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Remove(context.Background()); _ = second.Remove(context.Background()) })
	assert.True(t, first.Created())
	assert.False(t, second.Created(), "the second watcher finds it")

	require.NoError(t, first.Remove(ctx))
	require.NoError(t, second.Check(ctx), "the first watcher left it to the second")
	require.NoError(t, second.Remove(ctx))
	_, err = cli.ContainerInspect(ctx, name+"-db")
	assert.True(t, errdefs.IsNotFound(err), "the last watcher removed it: %v", err)
	_, err = cli.VolumeInspect(ctx, name+"_data")
	assert.True(t, errdefs.IsNotFound(err), "with its volume: %v", err)
}

// testEngine returns a client of the Docker engine, closed after the
// test's cleanups, and the test image (a shared fixture, kept); it
// skips t without an engine, unless CONVERGE_REQUIRE_DOCKER=1 requires
// one, and in -short mode.
func testEngine(t *testing.T) (*client.Client, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test against the Docker engine skipped in -short mode")
	}
	ctx := context.Background()
	cli, err := dockertest.Connect(ctx)
	if err != nil {
		if os.Getenv("CONVERGE_REQUIRE_DOCKER") == "1" {
			t.Fatalf("Docker engine required (CONVERGE_REQUIRE_DOCKER=1): %v", err)
		}
		t.Skipf("no Docker engine, skipping (set CONVERGE_REQUIRE_DOCKER=1 to fail instead): %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })             // after the cleanups that use it
	img, _, err := dockertest.BuildAppImage(ctx, cli) // a shared fixture, kept
	require.NoError(t, err)
	return cli, img
}
