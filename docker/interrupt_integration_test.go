package docker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// lateEngine is a real engine that answers a walk's creates late, as a
// busy engine does: after n containers were started it cancels the walk,
// and the creates beyond the first n, held until then, are carried out by
// the engine whether or not their client still waits. A client that still
// waits gets the engine's answer. One that gave up (its context ended:
// the client cancelled the request) or lost its connection (connLost: a
// killed process) does not, and the engine carries the create out only
// once the next walk has listed the project's containers (nextListed),
// so that listing misses it.
type lateEngine struct {
	docker.Engine
	n        int32
	connLost bool
	cancel   context.CancelFunc

	creates    atomic.Int32
	started    atomic.Int32
	cancelled  chan struct{}
	nextListed chan struct{}
	late       sync.WaitGroup // creates carried out after their client left
}

func newLateEngine(eng docker.Engine, n int32, connLost bool, cancel context.CancelFunc) *lateEngine {
	return &lateEngine{Engine: eng, n: n, connLost: connLost, cancel: cancel,
		cancelled: make(chan struct{}), nextListed: make(chan struct{})}
}

func (e *lateEngine) ContainerCreate(ctx context.Context, cfg *container.Config, h *container.HostConfig, nc *network.NetworkingConfig, pl *ocispec.Platform, name string) (container.CreateResponse, error) {
	if err := ctx.Err(); err != nil {
		return container.CreateResponse{}, err // never sent
	}
	if e.creates.Add(1) <= e.n {
		return e.Engine.ContainerCreate(ctx, cfg, h, nc, pl, name)
	}
	<-e.cancelled
	if ctx.Err() == nil && !e.connLost {
		return e.Engine.ContainerCreate(context.WithoutCancel(ctx), cfg, h, nc, pl, name)
	}
	e.late.Go(func() {
		<-e.nextListed
		_, _ = e.Engine.ContainerCreate(context.Background(), cfg, h, nc, pl, name)
	})
	if e.connLost {
		return container.CreateResponse{}, errors.New("connection reset by peer")
	}
	return container.CreateResponse{}, ctx.Err()
}

func (e *lateEngine) ContainerStart(ctx context.Context, id string, opts container.StartOptions) error {
	err := e.Engine.ContainerStart(ctx, id, opts)
	if err == nil && e.started.Add(1) == e.n {
		e.cancel()
		close(e.cancelled)
	}
	return err
}

// nextWalk is the engine of the walk after the interrupted one: once its
// container list is answered, the creates the interrupted walk left in
// the engine are carried out.
type nextWalk struct {
	docker.Engine
	late *lateEngine
	once sync.Once
}

func (e *nextWalk) ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	list, err := e.Engine.ContainerList(ctx, opts)
	e.once.Do(func() {
		close(e.late.nextListed)
		e.late.late.Wait()
	})
	return list, err
}

// TestIntegrationInterruptedUpIsFinishedAtOnce: an up of 20 services
// cancelled after n containers were started, then applied again at once,
// succeeds and leaves exactly the 20 containers, each running. When the
// walk is cancelled, it waits for the answers of the creates it sent, so
// the next walk's listing finds them; when a create's answer is lost (a
// killed process), the engine carries it out after the next walk listed
// the project, and that walk's create meets the project's own container
// under the name: it adopts it.
func TestIntegrationInterruptedUpIsFinishedAtOnce(t *testing.T) {
	cli, img := realEngine(t)
	for _, connLost := range []bool{false, true} {
		for _, n := range []int32{2, 5, 12} {
			t.Run(fmt.Sprintf("connection lost=%v/cancel after %d starts", connLost, n), func(t *testing.T) {
				proj := uniqueName("cvx")
				cleanupProject(t, cli, proj)
				var b strings.Builder
				fmt.Fprintf(&b, "name: %s\nservices:\n", proj)
				var want []string
				for i := range 20 {
					fmt.Fprintf(&b, "  s%02d:\n    image: %s\n    command: [\"/app\", \"sleep\"]\n    labels: {%s: \"1\"}\n", i, img, dockertest.TestLabel)
					want = append(want, fmt.Sprintf("%s-s%02d", proj, i))
				}
				p := load(t, b.String())

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				late := newLateEngine(cli, n, connLost, cancel)
				_, err := converge.Apply(ctx, mustGraph(t, p, late))
				require.Error(t, err, "the walk was interrupted")

				rep, err := converge.Apply(context.Background(), mustGraph(t, p, &nextWalk{Engine: cli, late: late}))
				require.NoError(t, err, "the next walk, started at once, finishes the up")
				require.True(t, rep.Converged())

				list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
					Filters: filters.NewArgs(filters.Arg("label", docker.LabelProject+"="+proj))})
				require.NoError(t, err)
				var got []string
				for _, c := range list {
					got = append(got, strings.TrimPrefix(c.Names[0], "/"))
					assert.Equal(t, container.StateRunning, c.State, c.Names[0])
				}
				slices.Sort(got)
				assert.Equal(t, want, got, "each service once, no duplicate, no leftover")
			})
		}
	}
}
