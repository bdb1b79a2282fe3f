package dockertest

import (
	"context"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/convergekit/converge/docker"
)

// Counter wraps a docker.Engine (a real client or the fake) and counts
// calls per endpoint, with the endpoint names of this package. Create it
// with Count.
type Counter struct {
	docker.Engine
	mu    sync.Mutex
	calls map[string]int
}

// Count returns a Counter around eng.
func Count(eng docker.Engine) *Counter { return &Counter{Engine: eng, calls: map[string]int{}} }

func (c *Counter) inc(name string) {
	c.mu.Lock()
	c.calls[name]++
	c.mu.Unlock()
}

// Calls returns the number of calls per endpoint since Count or Reset.
func (c *Counter) Calls() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.calls)
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
	c.mu.Lock()
	clear(c.calls)
	c.mu.Unlock()
}

// ContainerList counts and delegates.
func (c *Counter) ContainerList(ctx context.Context, o container.ListOptions) ([]container.Summary, error) {
	c.inc(ContainerList)
	return c.Engine.ContainerList(ctx, o)
}

// ContainerInspect counts and delegates.
func (c *Counter) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	c.inc(ContainerInspect)
	return c.Engine.ContainerInspect(ctx, id)
}

// ContainerCreate counts and delegates.
func (c *Counter) ContainerCreate(ctx context.Context, cfg *container.Config, h *container.HostConfig, n *network.NetworkingConfig, p *ocispec.Platform, name string) (container.CreateResponse, error) {
	c.inc(ContainerCreate)
	return c.Engine.ContainerCreate(ctx, cfg, h, n, p, name)
}

// ContainerStart counts and delegates.
func (c *Counter) ContainerStart(ctx context.Context, id string, o container.StartOptions) error {
	c.inc(ContainerStart)
	return c.Engine.ContainerStart(ctx, id, o)
}

// ContainerStop counts and delegates.
func (c *Counter) ContainerStop(ctx context.Context, id string, o container.StopOptions) error {
	c.inc(ContainerStop)
	return c.Engine.ContainerStop(ctx, id, o)
}

// ContainerRemove counts and delegates.
func (c *Counter) ContainerRemove(ctx context.Context, id string, o container.RemoveOptions) error {
	c.inc(ContainerRemove)
	return c.Engine.ContainerRemove(ctx, id, o)
}

// ContainerRename counts and delegates.
func (c *Counter) ContainerRename(ctx context.Context, id, name string) error {
	c.inc(ContainerRename)
	return c.Engine.ContainerRename(ctx, id, name)
}

// ContainerUnpause counts and delegates.
func (c *Counter) ContainerUnpause(ctx context.Context, id string) error {
	c.inc(ContainerUnpause)
	return c.Engine.ContainerUnpause(ctx, id)
}

// ContainerLogs counts and delegates.
func (c *Counter) ContainerLogs(ctx context.Context, id string, o container.LogsOptions) (io.ReadCloser, error) {
	c.inc(ContainerLogs)
	return c.Engine.ContainerLogs(ctx, id, o)
}

// ContainerStatPath counts and delegates.
func (c *Counter) ContainerStatPath(ctx context.Context, id, path string) (container.PathStat, error) {
	c.inc(ContainerStatPath)
	return c.Engine.ContainerStatPath(ctx, id, path)
}

// DistributionInspect counts and delegates.
func (c *Counter) DistributionInspect(ctx context.Context, ref, auth string) (registry.DistributionInspect, error) {
	c.inc(DistributionInspect)
	return c.Engine.DistributionInspect(ctx, ref, auth)
}

// ImageList counts and delegates.
func (c *Counter) ImageList(ctx context.Context, o image.ListOptions) ([]image.Summary, error) {
	c.inc(ImageList)
	return c.Engine.ImageList(ctx, o)
}

// ImagePull counts and delegates.
func (c *Counter) ImagePull(ctx context.Context, ref string, o image.PullOptions) (io.ReadCloser, error) {
	c.inc(ImagePull)
	return c.Engine.ImagePull(ctx, ref, o)
}

// ImageRemove counts and delegates.
func (c *Counter) ImageRemove(ctx context.Context, ref string, o image.RemoveOptions) ([]image.DeleteResponse, error) {
	c.inc(ImageRemove)
	return c.Engine.ImageRemove(ctx, ref, o)
}

// NetworkList counts and delegates.
func (c *Counter) NetworkList(ctx context.Context, o network.ListOptions) ([]network.Summary, error) {
	c.inc(NetworkList)
	return c.Engine.NetworkList(ctx, o)
}

// NetworkCreate counts and delegates.
func (c *Counter) NetworkCreate(ctx context.Context, name string, o network.CreateOptions) (network.CreateResponse, error) {
	c.inc(NetworkCreate)
	return c.Engine.NetworkCreate(ctx, name, o)
}

// NetworkRemove counts and delegates.
func (c *Counter) NetworkRemove(ctx context.Context, id string) error {
	c.inc(NetworkRemove)
	return c.Engine.NetworkRemove(ctx, id)
}

// NetworkConnect counts and delegates.
func (c *Counter) NetworkConnect(ctx context.Context, net, id string, cfg *network.EndpointSettings) error {
	c.inc(NetworkConnect)
	return c.Engine.NetworkConnect(ctx, net, id, cfg)
}

// VolumeList counts and delegates.
func (c *Counter) VolumeList(ctx context.Context, o volume.ListOptions) (volume.ListResponse, error) {
	c.inc(VolumeList)
	return c.Engine.VolumeList(ctx, o)
}

// VolumeCreate counts and delegates.
func (c *Counter) VolumeCreate(ctx context.Context, o volume.CreateOptions) (volume.Volume, error) {
	c.inc(VolumeCreate)
	return c.Engine.VolumeCreate(ctx, o)
}

// VolumeRemove counts and delegates.
func (c *Counter) VolumeRemove(ctx context.Context, id string, force bool) error {
	c.inc(VolumeRemove)
	return c.Engine.VolumeRemove(ctx, id, force)
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

// Events counts and delegates.
func (c *Counter) Events(ctx context.Context, o events.ListOptions) (<-chan events.Message, <-chan error) {
	c.inc(Events)
	return c.Engine.Events(ctx, o)
}
