package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

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

	snap *snapshot
	keep bool // a clean target that leaves the image alone
}

// Image is the item of one image reference: Present pulls it when it is
// missing (reporting bytes as units of progress), Absent removes it when no
// container uses it.
type Image struct {
	// Ref is the image reference.
	Ref string
	// Pull says whether a missing image may be pulled.
	Pull PullPolicy

	eng     Engine
	project converge.ID
	keep    bool
}

// NewImage returns a standalone Image item on eng (outside a project).
func NewImage(eng Engine, ref string, pull PullPolicy) *Image {
	return &Image{Ref: normalizeRef(ref), Pull: pull, eng: eng}
}

// ID returns ImageID(Ref).
func (im *Image) ID() converge.ID { return ImageID(im.Ref) }

func (im *Image) key() string { return "image:" + im.Ref }

// StateCurrent reads the project's snapshot when there is one, else lists
// the reference.
func (im *Image) StateCurrent(ctx context.Context, deps converge.Deps) (ImageState, error) {
	ref := normalizeRef(im.Ref)
	if im.project != "" {
		if ps, err := converge.DepState[ProjectState](deps, im.project); err == nil && ps.snap.usable(im.key()) {
			id, ok := ps.snap.images[ref]
			return ImageState{Ref: ref, Present: ok, ID: id, snap: ps.snap}, nil
		}
	}
	found, err := listImages(ctx, im.eng, []string{ref})
	if err != nil {
		return ImageState{}, err
	}
	id, ok := found[ref]
	return ImageState{Ref: ref, Present: ok, ID: id}, nil
}

// StateGoal is the image present (its ID is whatever the engine has).
func (im *Image) StateGoal(context.Context, converge.Deps) (ImageState, error) {
	return ImageState{Ref: normalizeRef(im.Ref), Present: true}, nil
}

// StateClean is the image removed; for the image of a project that does
// not set RemoveImages, it is "whatever is there": cleaning the project
// leaves images alone.
func (im *Image) StateClean(context.Context, converge.Deps) (ImageState, error) {
	return ImageState{Ref: normalizeRef(im.Ref), keep: im.keep}, nil
}

// Check compares presence only.
func (im *Image) Check(_ context.Context, current, target ImageState) (converge.Decision, error) {
	if current.Present == target.Present || target.keep {
		return converge.NotRequired(), nil
	}
	return converge.Required(converge.UnitsUnknown), nil
}

// Apply pulls or removes the image.
func (im *Image) Apply(ctx context.Context, current, target ImageState) (ImageState, error) {
	current.snap.invalidate(im.key())
	if target.Present {
		if err := ensureImage(ctx, im.eng, im.Ref, im.Pull); err != nil {
			return current, err
		}
		return ImageState{Ref: target.Ref, Present: true, ID: current.ID}, nil
	}
	used, err := im.eng.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("ancestor", target.Ref))})
	if err != nil {
		return current, fmt.Errorf("docker: image %s: list users: %w", target.Ref, err)
	}
	if len(used) > 0 {
		return current, fmt.Errorf("docker: image %s: %w by %d container(s)", target.Ref, ErrImageInUse, len(used))
	}
	if _, err := im.eng.ImageRemove(ctx, target.Ref, image.RemoveOptions{PruneChildren: true}); err != nil && !errdefs.IsNotFound(err) {
		return current, fmt.Errorf("docker: image %s: remove: %w", target.Ref, err)
	}
	return ImageState{Ref: target.Ref}, nil
}

// ApplyDry returns the target without pulling or removing anything.
func (im *Image) ApplyDry(_ context.Context, _, target ImageState) (ImageState, error) {
	return target, nil
}

// ensureImage pulls ref when it is not present locally.
func ensureImage(ctx context.Context, eng Engine, ref string, pull PullPolicy) error {
	ref = normalizeRef(ref)
	found, err := listImages(ctx, eng, []string{ref})
	if err != nil {
		return err
	}
	if _, ok := found[ref]; ok {
		return nil
	}
	if pull == PullNever {
		return &objectError{kind: "image", name: ref, err: ErrImageMissing}
	}
	return pullImage(ctx, eng, ref)
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
// (summed over layers) through converge.ReportUnits.
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
		converge.ReportUnits(ctx, int(done), int(total))
	}
}
