package dockertest

import (
	"context"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
)

// Counter wraps a docker.Engine (a real client or the fake) and counts
// calls per endpoint, with the endpoint names of this package (the names of
// the docker.Engine methods). It is docker.Instrument with a Metrics that
// keeps the counts. Create it with Count.
type Counter struct {
	docker.Engine
	t *tally
}

// Count returns a Counter around eng.
func Count(eng docker.Engine) *Counter {
	t := &tally{calls: map[string]int{}}
	return &Counter{Engine: docker.Instrument(eng, t), t: t}
}

// tally is the converge.Metrics behind a Counter: it keeps the count of
// docker.MetricEngineCalls per operation, Info excepted (it is not an
// endpoint of docker.Engine).
type tally struct {
	mu    sync.Mutex
	calls map[string]int
}

func (t *tally) Add(m *converge.Metric, delta float64, labels ...string) {
	if m != docker.MetricEngineCalls || len(labels) != 1 || labels[0] == "Info" {
		return
	}
	t.mu.Lock()
	t.calls[labels[0]] += int(delta)
	t.mu.Unlock()
}

func (t *tally) Set(*converge.Metric, float64, ...string)     {}
func (t *tally) Observe(*converge.Metric, float64, ...string) {}

// Calls returns the number of calls per endpoint since Count or Reset.
func (c *Counter) Calls() map[string]int {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return maps.Clone(c.t.calls)
}

// Total returns the number of calls to all endpoints but Events.
func (c *Counter) Total() int {
	n := 0
	for k, v := range c.Calls() {
		if k != Events {
			n += v
		}
	}
	return n
}

// Writes returns the number of calls to write endpoints.
func (c *Counter) Writes() int {
	calls := c.Calls()
	n := 0
	for _, w := range WriteEndpoints {
		n += calls[w]
	}
	return n
}

// Reset sets every count to zero.
func (c *Counter) Reset() {
	c.t.mu.Lock()
	clear(c.t.calls)
	c.t.mu.Unlock()
}

// Info delegates to the wrapped engine when it has Info (a real client
// does), so docker.WatchEvents reads the engine's clock through a Counter
// too; otherwise it reports this process's time. It is not counted: it is
// not an endpoint of docker.Engine.
func (c *Counter) Info(ctx context.Context) (system.Info, error) {
	if i, ok := c.Engine.(interface {
		Info(context.Context) (system.Info, error)
	}); ok {
		return i.Info(ctx)
	}
	return system.Info{SystemTime: time.Now().Format(time.RFC3339Nano)}, nil
}

// CopyToContainer passes a copy to the wrapped engine (counted as
// "CopyToContainer"), so a Counter around a real client can put files into
// containers (see docker.ContainerCopier); around an engine that cannot it
// fails with docker.ErrCannotCopy.
func (c *Counter) CopyToContainer(ctx context.Context, id, dst string, content io.Reader, options container.CopyToContainerOptions) error {
	if cp, ok := c.Engine.(docker.ContainerCopier); ok {
		return cp.CopyToContainer(ctx, id, dst, content, options)
	}
	return docker.ErrCannotCopy
}

// ImageBuild passes a build to the wrapped engine (counted as
// "ImageBuild"), so a Counter around a real client can build images (see
// docker.ImageBuilder); around an engine that cannot build it fails with
// docker.ErrCannotBuild.
func (c *Counter) ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	if b, ok := c.Engine.(docker.ImageBuilder); ok {
		return b.ImageBuild(ctx, buildContext, options)
	}
	return build.ImageBuildResponse{}, docker.ErrCannotBuild
}

// ContainerExecCreate, ContainerExecAttach and ContainerExecInspect pass
// a hook's exec to the wrapped engine when it is a ContainerExecer, and
// fail with docker.ErrCannotExec otherwise.
func (c *Counter) ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	ex, ok := c.Engine.(docker.ContainerExecer)
	if !ok {
		return container.ExecCreateResponse{}, docker.ErrCannotExec
	}
	r, err := ex.ContainerExecCreate(ctx, id, opts)
	return r, err
}

func (c *Counter) ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	ex, ok := c.Engine.(docker.ContainerExecer)
	if !ok {
		return types.HijackedResponse{}, docker.ErrCannotExec
	}
	r, err := ex.ContainerExecAttach(ctx, execID, opts)
	return r, err
}

func (c *Counter) ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error) {
	ex, ok := c.Engine.(docker.ContainerExecer)
	if !ok {
		return container.ExecInspect{}, docker.ErrCannotExec
	}
	r, err := ex.ContainerExecInspect(ctx, execID)
	return r, err
}
