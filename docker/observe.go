package docker

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/convergekit/converge"
)

// The metrics of the engine calls, reported through Project.Metrics or an
// Engine wrapped by Instrument. The "operation" label is the name of the
// Engine method ("ContainerList", "ContainerCreate", "ImagePull", ...), a
// fixed set.
var (
	// MetricEngineCalls counts the calls to the engine by operation (a
	// counter).
	MetricEngineCalls = &converge.Metric{
		Name: "converge_docker_engine_calls_total", Kind: converge.MetricCounter,
		Help:   "Calls to the Docker engine API, by operation.",
		Labels: []string{"operation"},
	}
	// MetricEngineErrors counts the engine calls that failed, by
	// operation, including those answered "not found" (a counter). The
	// errors that Events delivers on its channel are not counted.
	MetricEngineErrors = &converge.Metric{
		Name: "converge_docker_engine_errors_total", Kind: converge.MetricCounter,
		Help:   "Calls to the Docker engine API that returned an error, by operation.",
		Labels: []string{"operation"},
	}
)

// AllMetrics returns every metric the package reports, for an adapter to
// register before the first value arrives.
func AllMetrics() []*converge.Metric {
	return []*converge.Metric{MetricEngineCalls, MetricEngineErrors}
}

// Instrument returns an Engine that passes every call to eng and counts it
// in m (MetricEngineCalls, and MetricEngineErrors when it fails). A nil m
// returns eng itself. Project.Metrics does the same for the engine calls of
// a project's graph; Instrument is for the calls made elsewhere, such as
// WatchEvents.
func Instrument(eng Engine, m converge.Metrics) Engine {
	if m == nil {
		return eng
	}
	return keepClock(&observed{eng: eng, m: m})
}

// observedClock is an observed engine that keeps the engineClock ability
// of the engine it wraps, which WatchEvents uses.
type observedClock struct{ *observed }

func (o observedClock) Info(ctx context.Context) (system.Info, error) {
	r, err := o.eng.(engineClock).Info(ctx)
	return r, o.call("Info", err)
}

// keepClock returns o, with the engineClock ability when its engine has it.
func keepClock(o *observed) Engine {
	if _, ok := o.eng.(engineClock); ok {
		return observedClock{o}
	}
	return o
}

// observed is an Engine that counts every call in m (when not nil) and
// logs every write to log (when not nil), with the project, and the
// service of the container item it was made for; red scrubs the errors it
// logs.
type observed struct {
	eng     Engine
	m       converge.Metrics
	log     *slog.Logger
	project string
	// service and container name the container of the item the engine
	// was made for (forService), "" for the project's other items.
	service, container string
	red                redactor
}

// observe wraps eng for the items of project p: nil-free, and eng itself
// when p has neither Metrics nor Logger.
func observe(eng Engine, p *Project) Engine {
	if p.Metrics == nil && p.Logger == nil {
		return eng
	}
	var red redactor
	for i := range p.Containers {
		for _, v := range newRedactor(&p.Containers[i]) {
			if !slices.Contains(red, v) {
				red = append(red, v)
			}
		}
	}
	// Longest first so a secret containing another is replaced whole.
	sort.Slice(red, func(i, j int) bool { return len(red[i]) > len(red[j]) })
	return keepClock(&observed{eng: eng, m: p.Metrics, log: p.Logger, project: p.Name, red: red})
}

// forService returns eng for the item of the container of service s,
// named name: its writes are logged with the service and the name.
func forService(eng Engine, s *ContainerSpec, name string) Engine {
	var o *observed
	switch e := eng.(type) {
	case *observed:
		o = e
	case observedClock:
		o = e.observed
	}
	if o == nil || o.log == nil {
		return eng
	}
	cp := *o
	cp.service, cp.container = s.Service, name
	return keepClock(&cp)
}

// call counts one call of op that returned err, and returns err.
func (o *observed) call(op string, err error) error {
	if o.m != nil {
		o.m.Add(MetricEngineCalls, 1, op)
		if err != nil {
			o.m.Add(MetricEngineErrors, 1, op)
		}
	}
	return err
}

// write is call for a write: it also logs the action, at Info, or at Warn
// with the error (scrubbed of the project's secrets) when it failed.
func (o *observed) write(ctx context.Context, op, action string, err error, attrs ...slog.Attr) error {
	o.call(op, err)
	if o.log == nil {
		return err
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
	}
	if !o.log.Enabled(ctx, level) {
		return err
	}
	all := make([]slog.Attr, 0, 5+len(attrs))
	all = append(all, slog.String("project", o.project), slog.String("action", action))
	if o.service != "" {
		all = append(all, slog.String("service", o.service))
	}
	all = append(all, attrs...)
	if err != nil {
		all = append(all, slog.String("error", o.red.string(err.Error())))
	}
	o.log.LogAttrs(ctx, level, "docker: "+action, all...)
	return err
}

// target returns the attributes naming the container a call names with
// id: the item's container name, and id when it is another name or an ID
// (a temporary name, the ID of the container being replaced).
func (o *observed) target(id string) []slog.Attr {
	if o.container == "" || o.container == id {
		return []slog.Attr{slog.String("container", id)}
	}
	return []slog.Attr{slog.String("container", o.container), slog.String("target", id)}
}

func (o *observed) ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	r, err := o.eng.ContainerList(ctx, opts)
	return r, o.call("ContainerList", err)
}

func (o *observed) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	r, err := o.eng.ContainerInspect(ctx, id)
	return r, o.call("ContainerInspect", err)
}

func (o *observed) ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig, n *network.NetworkingConfig, p *ocispec.Platform, name string) (container.CreateResponse, error) {
	r, err := o.eng.ContainerCreate(ctx, cfg, host, n, p, name)
	attrs := o.target(name)
	if cfg != nil {
		attrs = append(attrs, slog.String("image", cfg.Image))
	}
	return r, o.write(ctx, "ContainerCreate", "create", err, attrs...)
}

func (o *observed) ContainerStart(ctx context.Context, id string, opts container.StartOptions) error {
	return o.write(ctx, "ContainerStart", "start", o.eng.ContainerStart(ctx, id, opts), o.target(id)...)
}

func (o *observed) ContainerStop(ctx context.Context, id string, opts container.StopOptions) error {
	return o.write(ctx, "ContainerStop", "stop", o.eng.ContainerStop(ctx, id, opts), o.target(id)...)
}

func (o *observed) ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error {
	return o.write(ctx, "ContainerRemove", "remove", o.eng.ContainerRemove(ctx, id, opts), o.target(id)...)
}

func (o *observed) ContainerRename(ctx context.Context, id, name string) error {
	return o.write(ctx, "ContainerRename", "rename", o.eng.ContainerRename(ctx, id, name),
		slog.String("container", name), slog.String("from", id))
}

func (o *observed) ContainerUnpause(ctx context.Context, id string) error {
	return o.write(ctx, "ContainerUnpause", "unpause", o.eng.ContainerUnpause(ctx, id), o.target(id)...)
}

func (o *observed) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	r, err := o.eng.ContainerLogs(ctx, id, opts)
	return r, o.call("ContainerLogs", err)
}

func (o *observed) ContainerStatPath(ctx context.Context, id, path string) (container.PathStat, error) {
	r, err := o.eng.ContainerStatPath(ctx, id, path)
	return r, o.call("ContainerStatPath", err)
}

func (o *observed) ImageList(ctx context.Context, opts image.ListOptions) ([]image.Summary, error) {
	r, err := o.eng.ImageList(ctx, opts)
	return r, o.call("ImageList", err)
}

func (o *observed) ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error) {
	r, err := o.eng.ImagePull(ctx, ref, opts)
	return r, o.write(ctx, "ImagePull", "pull", err, slog.String("image", redactURLs(ref)))
}

// ImageBuild passes a build to the wrapped engine when it is an
// ImageBuilder, and fails with ErrCannotBuild otherwise.
func (o *observed) ImageBuild(ctx context.Context, buildContext io.Reader, opts build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	b, ok := o.eng.(ImageBuilder)
	if !ok {
		return build.ImageBuildResponse{}, ErrCannotBuild
	}
	r, err := b.ImageBuild(ctx, buildContext, opts)
	return r, o.write(ctx, "ImageBuild", "build", err, slog.String("image", strings.Join(opts.Tags, ",")))
}

// CopyToContainer passes a copy to the wrapped engine when it is a
// ContainerCopier, and fails with ErrCannotCopy otherwise. The log names
// the destination, never the content.
func (o *observed) CopyToContainer(ctx context.Context, id, dst string, content io.Reader, opts container.CopyToContainerOptions) error {
	c, ok := o.eng.(ContainerCopier)
	if !ok {
		return ErrCannotCopy
	}
	err := c.CopyToContainer(ctx, id, dst, content, opts)
	return o.write(ctx, "CopyToContainer", "copy files", err, slog.String("target", id))
}

func (o *observed) ImageRemove(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	r, err := o.eng.ImageRemove(ctx, ref, opts)
	return r, o.write(ctx, "ImageRemove", "remove image", err, slog.String("image", redactURLs(ref)))
}

func (o *observed) DistributionInspect(ctx context.Context, ref, auth string) (registry.DistributionInspect, error) {
	r, err := o.eng.DistributionInspect(ctx, ref, auth)
	return r, o.call("DistributionInspect", err)
}

func (o *observed) NetworkList(ctx context.Context, opts network.ListOptions) ([]network.Summary, error) {
	r, err := o.eng.NetworkList(ctx, opts)
	return r, o.call("NetworkList", err)
}

func (o *observed) NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error) {
	r, err := o.eng.NetworkCreate(ctx, name, opts)
	return r, o.write(ctx, "NetworkCreate", "create network", err, slog.String("network", name))
}

func (o *observed) NetworkRemove(ctx context.Context, id string) error {
	return o.write(ctx, "NetworkRemove", "remove network", o.eng.NetworkRemove(ctx, id), slog.String("network", id))
}

func (o *observed) NetworkConnect(ctx context.Context, net, id string, cfg *network.EndpointSettings) error {
	return o.write(ctx, "NetworkConnect", "connect network", o.eng.NetworkConnect(ctx, net, id, cfg),
		append(o.target(id), slog.String("network", net))...)
}

func (o *observed) VolumeList(ctx context.Context, opts volume.ListOptions) (volume.ListResponse, error) {
	r, err := o.eng.VolumeList(ctx, opts)
	return r, o.call("VolumeList", err)
}

func (o *observed) VolumeCreate(ctx context.Context, opts volume.CreateOptions) (volume.Volume, error) {
	r, err := o.eng.VolumeCreate(ctx, opts)
	return r, o.write(ctx, "VolumeCreate", "create volume", err, slog.String("volume", opts.Name))
}

func (o *observed) VolumeRemove(ctx context.Context, id string, force bool) error {
	return o.write(ctx, "VolumeRemove", "remove volume", o.eng.VolumeRemove(ctx, id, force), slog.String("volume", id))
}

func (o *observed) Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error) {
	o.call("Events", nil)
	return o.eng.Events(ctx, opts)
}

// ContainerExecCreate, ContainerExecAttach and ContainerExecInspect pass
// a hook's exec to the wrapped engine when it is a ContainerExecer, and
// fail with ErrCannotExec otherwise.
func (o *observed) ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	ex, ok := o.eng.(ContainerExecer)
	if !ok {
		return container.ExecCreateResponse{}, ErrCannotExec
	}
	r, err := ex.ContainerExecCreate(ctx, id, opts)
	return r, o.call("ContainerExecCreate", err)
}

func (o *observed) ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	ex, ok := o.eng.(ContainerExecer)
	if !ok {
		return types.HijackedResponse{}, ErrCannotExec
	}
	r, err := ex.ContainerExecAttach(ctx, execID, opts)
	return r, o.call("ContainerExecAttach", err)
}

func (o *observed) ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error) {
	ex, ok := o.eng.(ContainerExecer)
	if !ok {
		return container.ExecInspect{}, ErrCannotExec
	}
	r, err := ex.ContainerExecInspect(ctx, execID)
	return r, o.call("ContainerExecInspect", err)
}
