package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
)

// LabelUpdateStrategy on a Compose service sets its
// ContainerSpec.Update by name, as balena reads it ("download-then-kill",
// "kill-then-download", "delete-then-download", "hand-over"; converge adds
// "auto").
const LabelUpdateStrategy = "io.balena.update.strategy"

// LabelHandoverTimeout on a Compose service sets its
// ContainerSpec.HandoverTimeout, in milliseconds, as balena reads it.
const LabelHandoverTimeout = "io.balena.update.handover-timeout"

// ErrNoSpace means the engine's data root has less free space than an
// image needs. It is matched by *SpaceError.
var ErrNoSpace = errors.New("not enough free space")

// ErrHandoverFailed means a HandOver update's new container did not become
// healthy in time: it was removed and the old container kept running. It
// is matched by *HandoverError.
var ErrHandoverFailed = errors.New("hand-over failed")

// SpaceError is an image that does not fit on the engine's data root. It
// is returned before anything is stopped, removed or pulled, so the
// container that would use the image is left as it was.
type SpaceError struct {
	// Ref is the image, Services the services using it.
	Ref      string
	Services []string
	// Root is the engine's data root (docker info DockerRootDir).
	Root string
	// Need is the image's size (ContainerSpec.ImageSize); Free is the free
	// space of Root, plus, for DeleteThenDownload, the size of the image
	// the update would remove first.
	Need, Free uint64
}

// Error names the image and its services once, then the figures.
func (e *SpaceError) Error() string {
	return fmt.Sprintf("docker: image %s%s: needs %d bytes on %s, %d free", e.Ref, servicesSuffix(e.Services), e.Need, e.Root, e.Free)
}

// Unwrap returns ErrNoSpace.
func (e *SpaceError) Unwrap() error { return ErrNoSpace }

// HandoverError is a HandOver update whose new container was not healthy
// when its timeout passed: the new container was removed, the old one
// keeps running.
type HandoverError struct {
	Container, Service string
	// Health is the new container's last health status.
	Health  string
	Timeout time.Duration
}

// Error names the container once, then what the wait saw.
func (e *HandoverError) Error() string {
	return fmt.Sprintf("docker: container %s: hand-over: new container %s after %s, old one kept", e.Container, e.Health, e.Timeout)
}

// Unwrap returns ErrHandoverFailed.
func (e *HandoverError) Unwrap() error { return ErrHandoverFailed }

func servicesSuffix(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return " (service " + s[0] + ")"
	}
	out := " (services " + s[0]
	for _, x := range s[1:] {
		out += ", " + x
	}
	return out + ")"
}

// deferred reports whether the container itself pulls its image, after
// removing the old container.
func (u UpdateStrategy) deferred() bool { return u == KillThenDownload || u == DeleteThenDownload }

// FreeSpaceFunc returns the free bytes of the filesystem holding dir, the
// engine's data root as the engine names it. ok false means unknown (the
// directory cannot be seen from here): then no space is checked.
type FreeSpaceFunc func(ctx context.Context, dir string) (free uint64, ok bool, err error)

// space reads the free space of an engine's data root.
type space struct {
	eng  Engine // the engine as given to Graph, with its Info ability
	free FreeSpaceFunc
}

// read returns the data root and its free space; ok is false when either
// cannot be known (an engine without Info, a root not visible here).
func (s *space) read(ctx context.Context) (root string, free uint64, ok bool, err error) {
	if s == nil {
		return "", 0, false, nil
	}
	if c, has := s.eng.(engineClock); has {
		info, err := c.Info(ctx)
		if err != nil {
			return "", 0, false, fmt.Errorf("docker: engine info: %w", err)
		}
		root = info.DockerRootDir
	}
	f := s.free
	if f == nil {
		f = statfsFree
	}
	free, ok, err = f(ctx, root)
	if err != nil {
		return root, 0, false, fmt.Errorf("docker: free space of %s: %w", root, err)
	}
	return root, free, ok, nil
}

// imageSize returns the size of the local image id, 0 when unknown.
func imageSize(ctx context.Context, eng Engine, id string) (uint64, error) {
	list, err := eng.ImageList(ctx, image.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("docker: list images: %w", err)
	}
	for _, im := range list {
		if im.ID == id && im.Size > 0 {
			return uint64(im.Size), nil
		}
	}
	return 0, nil
}

// usedByOthers reports whether a container other than self uses image id.
func usedByOthers(ctx context.Context, eng Engine, id, self string) (bool, error) {
	list, err := eng.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("ancestor", id))})
	if err != nil {
		return false, fmt.Errorf("list users of image %s: %w", id, err)
	}
	for _, c := range list {
		if c.ID != self && c.ImageID == id {
			return true, nil
		}
	}
	return false, nil
}

// checkSpace is the space check of a container that pulls its own image
// (strategy deferred): before anything is stopped, the image must fit,
// counting for DeleteThenDownload the old image it will remove (oldImage,
// when no other container uses it).
func (c *Container) checkSpace(ctx context.Context, strategy UpdateStrategy, current ContainerState, target ContainerState) error {
	if c.spec.ImageSize == 0 || (target.ImageID != "" && target.staleImage == "") { // size unknown, or nothing to pull
		return nil
	}
	root, free, ok, err := c.space.read(ctx)
	if err != nil || !ok {
		return err
	}
	if strategy == DeleteThenDownload && c.deletesOld(current, target) {
		used, err := usedByOthers(ctx, c.eng, current.ImageID, current.ID)
		if err != nil {
			return err
		}
		if !used {
			n, err := imageSize(ctx, c.eng, current.ImageID)
			if err != nil {
				return err
			}
			free += n
		}
	}
	if free < c.spec.ImageSize {
		return &SpaceError{Ref: normalizeRef(c.spec.Image), Services: []string{c.spec.Service}, Root: root, Need: c.spec.ImageSize, Free: free}
	}
	return nil
}

// deletesOld reports whether DeleteThenDownload removes the container's
// old image: it has one, and the target is not on it.
func (c *Container) deletesOld(current, target ContainerState) bool {
	return current.ImageID != "" && current.ImageID != target.ImageID
}

// deleteOldImage removes the image the removed container ran on, unless
// another container still uses it (the engine refuses: it is left alone).
func (c *Container) deleteOldImage(ctx context.Context, current, target ContainerState) error {
	if !c.deletesOld(current, target) {
		return nil
	}
	_, err := c.eng.ImageRemove(ctx, current.ImageID, image.RemoveOptions{PruneChildren: true})
	if err != nil && !errdefs.IsNotFound(err) && !errdefs.IsConflict(err) {
		return fmt.Errorf("remove old image: %w", err)
	}
	return nil
}

// handOver starts the new container, created under tmp, beside the old
// one, and waits until it is healthy or has created HandoverCompleteFile,
// for at most the spec's HandoverTimeout. The signal is looked up in the
// new container only, under HandoverCompleteFile and balena's legacy
// HandoverKillMeFile: the old one may still hold the file it created at
// its own hand-over, which the package cannot remove. A new container that exits is a
// *ContainerError; one with a healthcheck that is not healthy when the
// timeout passes is removed (a *HandoverError): in both cases the old
// container is left running.
func (c *Container) handOver(ctx context.Context, tmp string) error {
	if err := c.eng.ContainerStart(ctx, tmp, container.StartOptions{}); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	timeout := c.spec.HandoverTimeout
	if timeout == 0 {
		timeout = DefaultHandoverTimeout
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(c.poll)
	defer tick.Stop()
	health := ""
	for {
		r, err := c.eng.ContainerInspect(ctx, tmp)
		if err != nil {
			return fmt.Errorf("hand-over: inspect: %w", err)
		}
		if r.ContainerJSONBase != nil && r.State != nil {
			st := r.State
			if st.Health != nil {
				health = string(st.Health.Status)
			}
			if st.Status == container.StateExited || st.Status == container.StateDead {
				read := stateFromInspect(r, &c.spec)
				err := &ContainerError{Container: c.name, Service: c.spec.Service, Status: string(st.Status), ExitCode: st.ExitCode,
					Health: health, Log: logTail(ctx, c.eng, tmp, c.red), state: &read}
				return errors.Join(err, c.dropNew(ctx, tmp))
			}
			if health == container.Healthy {
				return nil
			}
		}
		if c.handoverSignalled(ctx, tmp) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			if health == "" { // no healthcheck: balena's timeout hands over
				return nil
			}
			return errors.Join(&HandoverError{Container: c.name, Service: c.spec.Service, Health: health, Timeout: timeout},
				c.dropNew(ctx, tmp))
		case <-tick.C:
		}
	}
}

// handoverSignalled reports whether the new container created a
// hand-over signal file.
func (c *Container) handoverSignalled(ctx context.Context, tmp string) bool {
	for _, f := range []string{HandoverCompleteFile, HandoverKillMeFile} {
		if _, err := c.eng.ContainerStatPath(ctx, tmp, f); err == nil {
			return true
		}
	}
	return false
}

// dropNew removes the new container of a failed hand-over.
func (c *Container) dropNew(ctx context.Context, tmp string) error {
	if err := removeContainer(ctx, c.eng, tmp, c.spec.StopTimeout); err != nil {
		return fmt.Errorf("remove new container %s: %w", tmp, err)
	}
	return nil
}
