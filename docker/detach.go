package docker

import (
	"context"
	"io"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// WriteGrace bounds how long a write the engine was already sent is
// waited for once its walk is cancelled (see Project.Graph): the engine
// carries such a write out whether or not its client is still waiting, so
// the item waits for the answer rather than leave it in flight.
const WriteGrace = time.Minute

// settled is the Engine of a project's items. Its quick writes (create,
// start, rename, remove, unpause, connect, and network, volume and image
// writes) are not cut off by the walk's cancellation once sent: they run
// to their answer, for at most WriteGrace, so a cancelled walk returns only
// after the engine has carried out or refused every such write it started,
// and the next walk sees what they did. A write asked for after the
// cancellation is not sent. Stops and pulls, which may take long, stay
// cancellable: the engine finishes a stop on its own, and a walk finds the
// container stopping or stopped.
type settled struct{ Engine }

// detach returns the context a write runs under: ctx's values without its
// cancellation, bounded by WriteGrace; or ctx's error when it already
// ended, so that nothing new is sent.
func detach(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), WriteGrace)
	return c, cancel, nil
}

func (e settled) ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig, nc *network.NetworkingConfig, pl *ocispec.Platform, name string) (container.CreateResponse, error) {
	c, cancel, err := detach(ctx)
	if err != nil {
		return container.CreateResponse{}, err
	}
	defer cancel()
	return e.Engine.ContainerCreate(c, cfg, host, nc, pl, name)
}

func (e settled) ContainerStart(ctx context.Context, id string, opts container.StartOptions) error {
	c, cancel, err := detach(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return e.Engine.ContainerStart(c, id, opts)
}

func (e settled) ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error {
	c, cancel, err := detach(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return e.Engine.ContainerRemove(c, id, opts)
}

func (e settled) ContainerRename(ctx context.Context, id, name string) error {
	c, cancel, err := detach(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return e.Engine.ContainerRename(c, id, name)
}

func (e settled) ContainerUnpause(ctx context.Context, id string) error {
	c, cancel, err := detach(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return e.Engine.ContainerUnpause(c, id)
}

func (e settled) ImageRemove(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	c, cancel, err := detach(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	return e.Engine.ImageRemove(c, ref, opts)
}

func (e settled) NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error) {
	c, cancel, err := detach(ctx)
	if err != nil {
		return network.CreateResponse{}, err
	}
	defer cancel()
	return e.Engine.NetworkCreate(c, name, opts)
}

func (e settled) NetworkRemove(ctx context.Context, id string) error {
	c, cancel, err := detach(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return e.Engine.NetworkRemove(c, id)
}

func (e settled) NetworkConnect(ctx context.Context, netID, id string, cfg *network.EndpointSettings) error {
	c, cancel, err := detach(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return e.Engine.NetworkConnect(c, netID, id, cfg)
}

func (e settled) VolumeCreate(ctx context.Context, opts volume.CreateOptions) (volume.Volume, error) {
	c, cancel, err := detach(ctx)
	if err != nil {
		return volume.Volume{}, err
	}
	defer cancel()
	return e.Engine.VolumeCreate(c, opts)
}

func (e settled) VolumeRemove(ctx context.Context, id string, force bool) error {
	c, cancel, err := detach(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return e.Engine.VolumeRemove(c, id, force)
}

// ImageBuild passes a build to the wrapped engine when it is an
// ImageBuilder, and fails with ErrCannotBuild otherwise. A build can take
// long and is not detached: cancelling the walk cancels it.
func (s settled) ImageBuild(ctx context.Context, buildContext io.Reader, opts build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	b, ok := s.Engine.(ImageBuilder)
	if !ok {
		return build.ImageBuildResponse{}, ErrCannotBuild
	}
	return b.ImageBuild(ctx, buildContext, opts)
}

// CopyToContainer passes a copy to the wrapped engine when it is a
// ContainerCopier, and fails with ErrCannotCopy otherwise. Like the other
// writes, it finishes once started.
func (e settled) CopyToContainer(ctx context.Context, id, dst string, content io.Reader, opts container.CopyToContainerOptions) error {
	cp, ok := e.Engine.(ContainerCopier)
	if !ok {
		return ErrCannotCopy
	}
	c, cancel, err := detach(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return cp.CopyToContainer(c, id, dst, content, opts)
}

// ContainerExecCreate, ContainerExecAttach and ContainerExecInspect pass
// a hook's exec to the wrapped engine when it is a ContainerExecer, and
// fail with ErrCannotExec otherwise. A hook can take long and is not
// detached: cancelling the walk cancels it.
func (e settled) ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	ex, ok := e.Engine.(ContainerExecer)
	if !ok {
		return container.ExecCreateResponse{}, ErrCannotExec
	}
	r, err := ex.ContainerExecCreate(ctx, id, opts)
	return r, err
}

func (e settled) ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	ex, ok := e.Engine.(ContainerExecer)
	if !ok {
		return types.HijackedResponse{}, ErrCannotExec
	}
	r, err := ex.ContainerExecAttach(ctx, execID, opts)
	return r, err
}

func (e settled) ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error) {
	ex, ok := e.Engine.(ContainerExecer)
	if !ok {
		return container.ExecInspect{}, ErrCannotExec
	}
	r, err := ex.ContainerExecInspect(ctx, execID)
	return r, err
}
