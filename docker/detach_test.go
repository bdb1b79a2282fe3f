package docker_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// slowCreate is an engine whose creates wait for release before the
// engine carries them out; a client that gives up first (its context
// ended) gets its context's error, and the create is abandoned.
type slowCreate struct {
	*dockertest.Engine
	entered   chan struct{}
	release   chan struct{}
	abandoned bool
}

func (e *slowCreate) ContainerCreate(ctx context.Context, cfg *container.Config, h *container.HostConfig, nc *network.NetworkingConfig, pl *ocispec.Platform, name string) (container.CreateResponse, error) {
	close(e.entered)
	select {
	case <-ctx.Done():
		e.abandoned = true
		return container.CreateResponse{}, ctx.Err()
	case <-e.release:
	}
	return e.Engine.ContainerCreate(ctx, cfg, h, nc, pl, name)
}

// TestCancelledWalkWaitsForTheWritesItSent: a walk cancelled while a
// create is in flight does not return before the engine answered it, and
// sends nothing after the cancellation (the container is created, not
// started).
func TestCancelledWalkWaitsForTheWritesItSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		eng := &slowCreate{Engine: f, entered: make(chan struct{}), release: make(chan struct{})}
		p := &docker.Project{Name: "cw", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1"}}}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := converge.Apply(ctx, mustGraph(t, p, eng))
			done <- err
		}()
		<-eng.entered
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("the walk returned while its create was in flight: %v", err)
		default:
		}
		close(eng.release)
		require.ErrorIs(t, <-done, context.Canceled)
		assert.False(t, eng.abandoned, "the create was answered")
		c, ok := f.Container("cw-a")
		require.True(t, ok, "the engine carried the create out before the walk returned")
		assert.Equal(t, container.StateCreated, c.Status, "nothing sent after the cancellation")
		assert.Zero(t, f.Calls()[dockertest.ContainerStart])
	})
}
