package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/convergekit/converge"
)

// ImageState is whether an image reference is present locally, and its ID.
type ImageState struct {
	Ref     string
	Present bool
	ID      string
	// Outdated is true when the registry serves another image under Ref
	// than the one present locally (ID): a PullAlways image to pull again.
	// The registry is asked only under PullAlways.
	Outdated bool
	// due is true when a PullRefresh image's last recorded pull is older
	// than its interval, or none is recorded: a pull that may bring the
	// same image.
	due bool

	snap     *snapshot
	keep     bool // a clean target that leaves the image alone
	deferred bool // a goal pulled by the container itself (KillThenDownload)
	// unpullable is why a missing image the container will pull cannot be
	// pulled (its registry does not serve it); nil when it can or when it
	// was not asked.
	unpullable error
	// replaces is, in a dry run, the ID of the local image a pull of an
	// Outdated image will replace.
	replaces string
	// buildKey is the LabelBuildKey of a built image (current), or the
	// key of its context and options now (target).
	buildKey string
	// short is true when a pull is due, the image's size is known and the
	// engine's data root (root) has less free space (free) than it.
	short bool
	root  string
	free  uint64
	// brought is true after Apply pulled the image.
	brought bool
}

// Image is the item of one image reference: Present pulls it when it is
// missing, or under PullAlways when the registry serves a newer one
// (reporting bytes as units of progress); Absent removes it when no
// container uses it.
type Image struct {
	// Ref is the image reference.
	Ref string
	// Pull says whether a missing image may be pulled, and whether the
	// registry is asked for a newer one (PullAlways).
	Pull PullPolicy

	eng      Engine
	project  converge.ID
	keep     bool
	services []string // the services using the image, for errors
	deferred bool     // only KillThenDownload and DeleteThenDownload containers use it
	auto     bool     // the containers that do not pull it themselves use AutoUpdate
	size     uint64   // the largest ContainerSpec.ImageSize of its services
	space    *space
	pulled   atomic.Pointer[string] // the ID of the image Apply pulled
	refresh  *pullRecords           // under PullRefresh: where pull times are kept
	every    time.Duration          // under PullRefresh: the shortest PullEvery of its services
}

// NewImage returns a standalone Image item on eng (outside a project).
func NewImage(eng Engine, ref string, pull PullPolicy) *Image {
	return &Image{Ref: normalizeRef(ref), Pull: pull, eng: eng}
}

// ID returns ImageID(Ref).
func (im *Image) ID() converge.ID { return ImageID(im.Ref) }

func (im *Image) key() string { return "image:" + im.Ref }

// StateCurrent reads the project's snapshot when there is one, else lists
// the reference. Under PullAlways a present image is looked up in its
// registry (DistributionInspect, a read, once per walk): when the
// registry's manifest digest is not among the local image's repository
// digests the state is Outdated; when the registry cannot be asked, the
// local image stands. The image of KillThenDownload containers only, when
// it is missing and may be pulled, is also looked up in its registry, so
// that an image nobody can pull fails before the old container is
// removed.
func (im *Image) StateCurrent(ctx context.Context, deps converge.DepStates) (_ ImageState, err error) {
	defer func() { err = scrubURLs(err) }()
	ref := normalizeRef(im.Ref)
	var (
		st ImageState
		li localImage
	)
	if ps, err := converge.DepState[ProjectState](deps, im.project); im.project != "" && err == nil && ps.snap.usable(im.key()) {
		var ok bool
		li, ok = ps.snap.images[ref]
		st = ImageState{Ref: ref, Present: ok, ID: li.ID, snap: ps.snap}
	} else {
		found, err := listImages(ctx, im.eng, []string{ref})
		if err != nil {
			return ImageState{}, err
		}
		var ok bool
		li, ok = found[ref]
		st = ImageState{Ref: ref, Present: ok, ID: li.ID}
	}
	switch {
	case st.Present && im.Pull == PullAlways:
		d, err := im.eng.DistributionInspect(ctx, ref, "")
		st.Outdated = err == nil && d.Descriptor.Digest != "" && !li.servedAs(string(d.Descriptor.Digest))
	case !st.Present && im.deferred && im.Pull != PullNever:
		if _, err := im.eng.DistributionInspect(ctx, ref, ""); err != nil {
			st.unpullable = &PullError{Ref: ref, Err: err}
		}
	}
	if st.Present && im.Pull == PullRefresh {
		last, ok, err := im.refresh.last(ctx, ref)
		if err != nil {
			return ImageState{}, &ImageError{Ref: ref, Services: im.services, Err: err}
		}
		st.due = !ok || im.refresh.now().Sub(last) >= im.every
	}
	if id := im.pulled.Load(); id != nil && *id == st.ID {
		st.brought = true // the verification's read
	}
	if (!st.Present && im.Pull != PullNever || st.Outdated || st.due) && !im.deferred && im.size > 0 {
		root, free, ok, err := im.space.read(ctx)
		if err != nil {
			return ImageState{}, err
		}
		st.root, st.free, st.short = root, free, ok && free < im.size
	}
	return st, nil
}

// StateGoal is the image present (its ID is whatever the engine has).
func (im *Image) StateGoal(context.Context, converge.DepStates) (ImageState, error) {
	return ImageState{Ref: normalizeRef(im.Ref), Present: true, deferred: im.deferred}, nil
}

// StateClean is the image removed; for the image of a project that does
// not set RemoveImages, it is "whatever is there": cleaning the project
// leaves images alone.
func (im *Image) StateClean(context.Context, converge.DepStates) (ImageState, error) {
	return ImageState{Ref: normalizeRef(im.Ref), keep: im.keep}, nil
}

// Check compares presence, and requires a pull of an Outdated image. A
// pull the engine's data root has no room for (see ContainerSpec.ImageSize)
// is a *SpaceError matching ErrNoSpace, with nothing pulled; when every
// container that does not pull the image itself uses AutoUpdate, the pull
// is left to them (DeleteThenDownload) instead. A
// missing image that may not be pulled (PullNever) is an *ImageError
// matching ErrImageMissing, in a dry run as in Apply. The image of
// KillThenDownload containers only is pulled by the container after the
// old one is removed, so its item requires nothing, unless its registry
// does not serve it: that is an *ImageError too.
func (im *Image) Check(_ context.Context, current, target ImageState) (converge.Decision, error) {
	if target.keep {
		return converge.NotRequired(), nil
	}
	if current.short && target.Present && !target.deferred {
		if im.auto { // the containers delete the old image, then pull
			return converge.NotRequired(), nil
		}
		return converge.Decision{}, &SpaceError{Ref: target.Ref, Services: im.services, Root: current.root, Need: im.size, Free: current.free}
	}
	if current.Present && target.Present && (current.Outdated || current.due) && !target.deferred {
		return converge.Required(converge.WorkUnitsUnknown), nil
	}
	if current.Present == target.Present {
		return converge.NotRequired(), nil
	}
	if target.Present && im.Pull == PullNever {
		return converge.Decision{}, &ImageError{Ref: target.Ref, Services: im.services, Err: ErrImageMissing}
	}
	if target.deferred {
		if current.unpullable != nil {
			return converge.Decision{}, &ImageError{Ref: target.Ref, Services: im.services, Err: current.unpullable}
		}
		return converge.NotRequired(), nil
	}
	return converge.Required(converge.WorkUnitsUnknown), nil
}

// Apply pulls or removes the image. The state it returns after a pull has
// the ID of the image pulled, so the containers on the old one are
// recreated. Removing refuses (ErrImageInUse) only while containers
// created with this very reference exist; containers created from another
// tag of the same image keep running, since removing this tag only untags.
func (im *Image) Apply(ctx context.Context, current, target ImageState) (_ ImageState, err error) {
	defer func() { err = scrubURLs(err) }()
	current.snap.invalidate(im.key())
	if target.Present {
		id, pulled, err := ensureImage(ctx, im.eng, im.Ref, im.Pull, im.services, current.Outdated || current.due)
		if err != nil {
			return current, err
		}
		if pulled && im.Pull == PullRefresh {
			if err := im.refresh.record(ctx, target.Ref); err != nil {
				return ImageState{Ref: target.Ref, Present: true, ID: id, brought: true}, &ImageError{Ref: target.Ref, Services: im.services, Err: err}
			}
		}
		if pulled {
			im.pulled.Store(&id)
		}
		return ImageState{Ref: target.Ref, Present: true, ID: id, brought: pulled}, nil
	}
	// The engine's ancestor filter also matches containers created from
	// another tag of the same image, or by ID; removing this tag leaves
	// those alone (and the engine refuses to delete an image a container
	// still needs), so only containers created with this very reference
	// hold it.
	list, err := im.eng.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("ancestor", target.Ref))})
	if err != nil {
		return current, fmt.Errorf("docker: image %s: list users: %w", target.Ref, err)
	}
	var used []container.Summary
	for _, c := range list {
		if normalizeRef(c.Image) == normalizeRef(target.Ref) {
			used = append(used, c)
		}
	}
	if len(used) > 0 {
		return current, fmt.Errorf("docker: image %s: %w", target.Ref,
			&causeError{msg: fmt.Sprintf("in use by %d container(s)", len(used)), err: ErrImageInUse})
	}
	if _, err := im.eng.ImageRemove(ctx, target.Ref, image.RemoveOptions{PruneChildren: true}); err != nil && !errdefs.IsNotFound(err) {
		return current, fmt.Errorf("docker: image %s: remove: %w", target.Ref, err)
	}
	return ImageState{Ref: target.Ref}, nil
}

// ApplyDry returns the target without pulling or removing anything. An
// image to pull is looked up in its registry (DistributionInspect, a read):
// one the registry does not serve is an *ImageError wrapping a *PullError,
// as the pull would be. For an Outdated image the state remembers the ID
// the pull replaces, so the dry run plans the recreate of the containers
// on it.
func (im *Image) ApplyDry(ctx context.Context, current, target ImageState) (_ ImageState, err error) {
	defer func() { err = scrubURLs(err) }()
	if target.Present && !current.Present {
		if _, err := im.eng.DistributionInspect(ctx, target.Ref, ""); err != nil {
			return current, &ImageError{Ref: target.Ref, Services: im.services, Err: &PullError{Ref: target.Ref, Err: err}}
		}
	}
	if target.Present && current.Outdated && !target.deferred {
		next := target
		next.replaces = current.ID
		return next, nil
	}
	return target, nil
}

// ImageError is an image that cannot be resolved: missing locally under
// PullNever (it matches ErrImageMissing), or not pullable (it wraps a
// *PullError). Services lists the services of the project that use it.
type ImageError struct {
	Ref      string
	Services []string
	Err      error
}

// Error names the image and its services once, then the cause.
func (e *ImageError) Error() string {
	var b strings.Builder
	b.WriteString("docker: image " + e.Ref)
	switch len(e.Services) {
	case 0:
	case 1:
		b.WriteString(" (service " + e.Services[0] + ")")
	default:
		b.WriteString(" (services " + strings.Join(e.Services, ", ") + ")")
	}
	var pe *PullError
	switch {
	case errors.Is(e.Err, ErrImageMissing):
		b.WriteString(": not present locally, and the pull policy is never")
	case errors.As(e.Err, &pe):
		b.WriteString(": cannot be pulled: " + reason(pe.Err))
	default:
		b.WriteString(": " + reason(e.Err))
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *ImageError) Unwrap() error { return e.Err }

// ensureImage pulls ref when it is not present locally, or when refresh
// is set, and returns the ID of the local image and whether it pulled it;
// services are the users named in the *ImageError it returns.
func ensureImage(ctx context.Context, eng Engine, ref string, pull PullPolicy, services []string, refresh bool) (string, bool, error) {
	ref = normalizeRef(ref)
	found, err := listImages(ctx, eng, []string{ref})
	if err != nil {
		return "", false, &ImageError{Ref: ref, Services: services, Err: err}
	}
	if li, ok := found[ref]; ok && !refresh {
		return li.ID, false, nil
	}
	if pull == PullNever && !refresh {
		return "", false, &ImageError{Ref: ref, Services: services, Err: ErrImageMissing}
	}
	if err := pullImage(ctx, eng, ref); err != nil {
		return "", false, &ImageError{Ref: ref, Services: services, Err: err}
	}
	if found, err = listImages(ctx, eng, []string{ref}); err != nil {
		return "", false, &ImageError{Ref: ref, Services: services, Err: err}
	}
	return found[ref].ID, true, nil
}

// PullError is a pull that failed, with the engine's message.
type PullError struct {
	Ref string
	Err error
}

// Error describes the problem, naming its culprit.
func (e *PullError) Error() string { return fmt.Sprintf("docker: pull %s: %v", e.Ref, e.Err) }

// Unwrap returns the cause.
func (e *PullError) Unwrap() error { return e.Err }

// pullImage pulls ref, reporting bytes downloaded over bytes to download
// (summed over layers) through converge.ReportProgress.
func pullImage(ctx context.Context, eng Engine, ref string) error {
	rc, err := eng.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return &PullError{Ref: ref, Err: err}
	}
	defer rc.Close()
	type layer struct{ cur, total int64 }
	layers := map[string]*layer{}
	var order []string
	dec := json.NewDecoder(rc)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return &PullError{Ref: ref, Err: err}
		}
		if m.Error != nil {
			return &PullError{Ref: ref, Err: m.Error}
		}
		if m.ID == "" || m.Progress == nil || m.Progress.Total <= 0 {
			continue
		}
		l, ok := layers[m.ID]
		if !ok {
			l = &layer{}
			layers[m.ID] = l
			order = append(order, m.ID)
		}
		l.cur, l.total = m.Progress.Current, m.Progress.Total
		var done, total int64
		for _, id := range order {
			done += layers[id].cur
			total += layers[id].total
		}
		converge.ReportProgress(ctx, int(done), int(total))
	}
}
