package docker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// upCalls is the engine calls, per kind, of bringing a project of n
// containers of one local image up from nothing: the second list looks
// for the containers compose may have started for the project.
func upCalls(n int) map[string]int {
	return map[string]int{
		dockertest.ContainerList:    2,
		dockertest.ImageList:        1,
		dockertest.NetworkList:      1,
		dockertest.NetworkCreate:    1,
		dockertest.ContainerCreate:  n,
		dockertest.ContainerStart:   n,
		dockertest.ContainerInspect: n,
	}
}

// TestUpCallsPerContainer counts the engine calls of bringing a project up
// from nothing: beyond the create and start of each container (the floor)
// and the project's reads, one inspect per container, the early-exit
// watch's, which the verification reuses; and the network created once,
// with no list after its create.
func TestUpCallsPerContainer(t *testing.T) {
	for _, n := range []int{1, 5, 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFake()
			p := load(t, nServices(n))
			p.PollInterval = 1 // the watch's wait is not what is counted
			rep := apply(t, f, p)
			require.True(t, rep.Converged())
			assert.Equal(t, upCalls(n), f.Calls())

			// What the verification saw is the engine's container.
			ids := idsByName(f)
			for i := range n {
				res, ok := rep.Item(docker.ContainerID("many", fmt.Sprintf("s%02d", i)))
				require.True(t, ok)
				_, after, ok := converge.ResultStates[docker.ContainerState](res)
				require.True(t, ok)
				name := fmt.Sprintf("many-s%02d", i)
				assert.Equal(t, ids[name], after.ID, "%s", name)
				assert.Equal(t, "running", after.Status, "%s", name)
			}
			net, ok := rep.Item(docker.NetworkID("many_default"))
			require.True(t, ok)
			_, ns, ok := converge.ResultStates[docker.NetworkState](net)
			require.True(t, ok)
			assert.True(t, ns.Exists)
			assert.True(t, ns.Owned)
			assert.NotEmpty(t, ns.ID)
		})
	}
}

// TestVerifySeesTheWatchedInspect: the state the walk verifies a started
// container with is the engine's reading after the start, not what Apply
// expected: an engine that reports another image after the start fails
// the verification.
func TestVerifySeesTheWatchedInspect(t *testing.T) {
	f := newFake()
	p := load(t, nServices(1))
	p.PollInterval = 1
	g, err := p.Graph(&tamperAfterStart{Engine: f})
	require.NoError(t, err)
	rep, err := converge.Apply(context.Background(), g)
	require.ErrorIs(t, err, converge.ErrNotConverged)
	res, ok := rep.Item(docker.ContainerID("many", "s00"))
	require.True(t, ok)
	assert.Equal(t, converge.PhaseVerify, res.Phase)
}

// tamperAfterStart is an engine on which every started container runs
// another image than the one it was created from (someone changed it
// behind the walk's back right after the start).
type tamperAfterStart struct {
	*dockertest.Engine
}

func (e *tamperAfterStart) ContainerStart(ctx context.Context, id string, opts container.StartOptions) error {
	if err := e.Engine.ContainerStart(ctx, id, opts); err != nil {
		return err
	}
	e.Tamper(id, func(c *dockertest.Container) { c.ImageID = "sha256:0ther" })
	return nil
}

// TestIntegrationUpCalls brings a project of three containers up on the
// real engine and counts the calls per kind: one inspect per started
// container (the early-exit watch, whose reading the verification
// reuses), one network list and create, and the engine's own containers
// are what the report says.
func TestIntegrationUpCalls(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	proj := uniqueName("cvu")
	cleanupProject(t, cli, proj)
	yaml := fmt.Sprintf("name: %s\nservices:\n", proj)
	for i := range 3 {
		yaml += fmt.Sprintf("  s%d:\n    image: %s\n    command: [\"/app\", \"sleep\"]\n    labels: {%s: \"1\"}\n", i, img, dockertest.TestLabel)
	}
	p, err := docker.LoadCompose(ctx, []byte(yaml), docker.LoadOptions{})
	require.NoError(t, err)
	eng := dockertest.Count(cli)
	rep := apply(t, eng, p)
	require.True(t, rep.Converged())
	assert.Equal(t, upCalls(3), eng.Calls())
	for i := range 3 {
		res, ok := rep.Item(docker.ContainerID(proj, fmt.Sprintf("s%d", i)))
		require.True(t, ok)
		_, after, ok := converge.ResultStates[docker.ContainerState](res)
		require.True(t, ok)
		r := inspect(t, cli, fmt.Sprintf("%s-s%d", proj, i))
		assert.Equal(t, r.ID, after.ID)
		assert.Equal(t, "running", after.Status)
	}
	eng.Reset()
	rep = apply(t, eng, p)
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.LessOrEqual(t, eng.Total(), 2, "calls: %v", eng.Calls())
}

// TestSnapshotListsImagesWithContainers: the project item's first two
// reads (the project's containers and its images) are in flight together,
// so a walk waits for one round trip, not two. The container list waits
// (in a synctest bubble, for at most a second of fake time) for the image
// list to begin.
func TestSnapshotListsImagesWithContainers(t *testing.T) {
	for _, converged := range []bool{false, true} {
		t.Run(fmt.Sprint("converged=", converged), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake()
				p := load(t, nServices(2))
				p.PollInterval = time.Millisecond
				if converged {
					apply(t, f, p)
				}
				eng := &overlapEngine{Engine: f, images: make(chan struct{}, 1)}
				g, err := p.Graph(eng)
				require.NoError(t, err)
				_, err = converge.Apply(context.Background(), g)
				require.NoError(t, err)
				assert.True(t, eng.overlapped, "the container list ran while the image list was in flight")
			})
		})
	}
}

// overlapEngine's first ContainerList waits up to a second for an
// ImageList to begin and records whether it did.
type overlapEngine struct {
	*dockertest.Engine
	images     chan struct{}
	once       sync.Once
	overlapped bool
}

func (e *overlapEngine) ImageList(ctx context.Context, opts image.ListOptions) ([]image.Summary, error) {
	select {
	case e.images <- struct{}{}:
	default:
	}
	return e.Engine.ImageList(ctx, opts)
}

func (e *overlapEngine) ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	e.once.Do(func() {
		select {
		case <-e.images:
			e.overlapped = true
		case <-time.After(time.Second):
		}
	})
	return e.Engine.ContainerList(ctx, opts)
}
