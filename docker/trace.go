package docker

import (
	"context"
	"io"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/volume"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/convergekit/converge"
)

// SpanPrefix begins the name of the span of an engine call made for an
// item of a project's graph ("docker.ContainerCreate"): with a
// converge.Tracer in the walk (WalkerConfig.Tracer), each call is a child
// of its item's span, with the attribute AttrOperation. Events, a stream
// that outlives the item, has none.
const SpanPrefix = "docker."

// AttrOperation is the attribute of an engine call's span naming the
// Engine method, a fixed set.
const AttrOperation = "docker.operation"

// traced is an Engine that starts a span (converge.StartSpan) around every
// call but Events, with the Tracer and the item's span that the walk puts
// in the call's context; without a Tracer it costs a context lookup per
// call.
type traced struct{ Engine }

// startCall starts the span of a call of op.
func startCall(ctx context.Context, op string) (context.Context, converge.Span) {
	if converge.TracerFrom(ctx) == nil {
		return ctx, converge.NopSpan{}
	}
	return converge.StartSpan(ctx, SpanPrefix+op, converge.StringAttr(AttrOperation, op))
}

func (e traced) ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error) {
	ctx, sp := startCall(ctx, "ContainerList")
	r, err := e.Engine.ContainerList(ctx, options)
	sp.End(err)
	return r, err
}

func (e traced) ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error) {
	ctx, sp := startCall(ctx, "ContainerInspect")
	r, err := e.Engine.ContainerInspect(ctx, containerID)
	sp.End(err)
	return r, err
}

func (e traced) ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error) {
	ctx, sp := startCall(ctx, "ContainerCreate")
	r, err := e.Engine.ContainerCreate(ctx, config, hostConfig, networkingConfig, platform, containerName)
	sp.End(err)
	return r, err
}

func (e traced) ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error {
	ctx, sp := startCall(ctx, "ContainerStart")
	err := e.Engine.ContainerStart(ctx, containerID, options)
	sp.End(err)
	return err
}

func (e traced) ContainerStop(ctx context.Context, containerID string, options container.StopOptions) error {
	ctx, sp := startCall(ctx, "ContainerStop")
	err := e.Engine.ContainerStop(ctx, containerID, options)
	sp.End(err)
	return err
}

func (e traced) ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error {
	ctx, sp := startCall(ctx, "ContainerRemove")
	err := e.Engine.ContainerRemove(ctx, containerID, options)
	sp.End(err)
	return err
}

func (e traced) ContainerRename(ctx context.Context, containerID, newContainerName string) error {
	ctx, sp := startCall(ctx, "ContainerRename")
	err := e.Engine.ContainerRename(ctx, containerID, newContainerName)
	sp.End(err)
	return err
}

func (e traced) ContainerUnpause(ctx context.Context, containerID string) error {
	ctx, sp := startCall(ctx, "ContainerUnpause")
	err := e.Engine.ContainerUnpause(ctx, containerID)
	sp.End(err)
	return err
}

func (e traced) ContainerLogs(ctx context.Context, containerID string, options container.LogsOptions) (io.ReadCloser, error) {
	ctx, sp := startCall(ctx, "ContainerLogs")
	r, err := e.Engine.ContainerLogs(ctx, containerID, options)
	sp.End(err)
	return r, err
}

func (e traced) ContainerStatPath(ctx context.Context, containerID, path string) (container.PathStat, error) {
	ctx, sp := startCall(ctx, "ContainerStatPath")
	r, err := e.Engine.ContainerStatPath(ctx, containerID, path)
	sp.End(err)
	return r, err
}

func (e traced) ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error) {
	ctx, sp := startCall(ctx, "ImageList")
	r, err := e.Engine.ImageList(ctx, options)
	sp.End(err)
	return r, err
}

func (e traced) ImagePull(ctx context.Context, refStr string, options image.PullOptions) (io.ReadCloser, error) {
	ctx, sp := startCall(ctx, "ImagePull")
	r, err := e.Engine.ImagePull(ctx, refStr, options)
	sp.End(err)
	return r, err
}

func (e traced) ImageRemove(ctx context.Context, imageID string, options image.RemoveOptions) ([]image.DeleteResponse, error) {
	ctx, sp := startCall(ctx, "ImageRemove")
	r, err := e.Engine.ImageRemove(ctx, imageID, options)
	sp.End(err)
	return r, err
}

func (e traced) DistributionInspect(ctx context.Context, imageRef, encodedRegistryAuth string) (registry.DistributionInspect, error) {
	ctx, sp := startCall(ctx, "DistributionInspect")
	r, err := e.Engine.DistributionInspect(ctx, imageRef, encodedRegistryAuth)
	sp.End(err)
	return r, err
}

func (e traced) NetworkList(ctx context.Context, options network.ListOptions) ([]network.Summary, error) {
	ctx, sp := startCall(ctx, "NetworkList")
	r, err := e.Engine.NetworkList(ctx, options)
	sp.End(err)
	return r, err
}

func (e traced) NetworkCreate(ctx context.Context, name string, options network.CreateOptions) (network.CreateResponse, error) {
	ctx, sp := startCall(ctx, "NetworkCreate")
	r, err := e.Engine.NetworkCreate(ctx, name, options)
	sp.End(err)
	return r, err
}

func (e traced) NetworkRemove(ctx context.Context, networkID string) error {
	ctx, sp := startCall(ctx, "NetworkRemove")
	err := e.Engine.NetworkRemove(ctx, networkID)
	sp.End(err)
	return err
}

func (e traced) NetworkConnect(ctx context.Context, networkID, containerID string, config *network.EndpointSettings) error {
	ctx, sp := startCall(ctx, "NetworkConnect")
	err := e.Engine.NetworkConnect(ctx, networkID, containerID, config)
	sp.End(err)
	return err
}

func (e traced) VolumeList(ctx context.Context, options volume.ListOptions) (volume.ListResponse, error) {
	ctx, sp := startCall(ctx, "VolumeList")
	r, err := e.Engine.VolumeList(ctx, options)
	sp.End(err)
	return r, err
}

func (e traced) VolumeCreate(ctx context.Context, options volume.CreateOptions) (volume.Volume, error) {
	ctx, sp := startCall(ctx, "VolumeCreate")
	r, err := e.Engine.VolumeCreate(ctx, options)
	sp.End(err)
	return r, err
}

func (e traced) VolumeRemove(ctx context.Context, volumeID string, force bool) error {
	ctx, sp := startCall(ctx, "VolumeRemove")
	err := e.Engine.VolumeRemove(ctx, volumeID, force)
	sp.End(err)
	return err
}

// ImageBuild, CopyToContainer, ContainerExecCreate, ContainerExecAttach
// and ContainerExecInspect pass on the abilities of the wrapped engine, as
// settled does, and fail as it does when it lacks them.
func (e traced) ImageBuild(ctx context.Context, buildContext io.Reader, opts build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	b, ok := e.Engine.(ImageBuilder)
	if !ok {
		return build.ImageBuildResponse{}, ErrCannotBuild
	}
	ctx, sp := startCall(ctx, "ImageBuild")
	r, err := b.ImageBuild(ctx, buildContext, opts)
	sp.End(err)
	return r, err
}

func (e traced) CopyToContainer(ctx context.Context, id, dst string, content io.Reader, opts container.CopyToContainerOptions) error {
	c, ok := e.Engine.(ContainerCopier)
	if !ok {
		return ErrCannotCopy
	}
	ctx, sp := startCall(ctx, "CopyToContainer")
	err := c.CopyToContainer(ctx, id, dst, content, opts)
	sp.End(err)
	return err
}

func (e traced) ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	ex, ok := e.Engine.(ContainerExecer)
	if !ok {
		return container.ExecCreateResponse{}, ErrCannotExec
	}
	ctx, sp := startCall(ctx, "ContainerExecCreate")
	r, err := ex.ContainerExecCreate(ctx, id, opts)
	sp.End(err)
	return r, err
}

func (e traced) ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	ex, ok := e.Engine.(ContainerExecer)
	if !ok {
		return types.HijackedResponse{}, ErrCannotExec
	}
	ctx, sp := startCall(ctx, "ContainerExecAttach")
	r, err := ex.ContainerExecAttach(ctx, execID, opts)
	sp.End(err)
	return r, err
}

func (e traced) ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error) {
	ex, ok := e.Engine.(ContainerExecer)
	if !ok {
		return container.ExecInspect{}, ErrCannotExec
	}
	ctx, sp := startCall(ctx, "ContainerExecInspect")
	r, err := ex.ContainerExecInspect(ctx, execID)
	sp.End(err)
	return r, err
}
