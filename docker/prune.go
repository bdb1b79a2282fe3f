package docker

import (
	"context"
	"fmt"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/convergekit/converge"
)

// LabelImageBrought marks a container whose image the package pulled or
// built ("true"): once an update replaced the container, that image is
// superseded and removed when no container uses it any more (see
// Project.KeepImages). An image the package did not bring (pulled or
// loaded by someone else) never gets the label, so it is never removed.
const LabelImageBrought = "io.convergekit.image-brought"

// PruneID is the ID of a project's prune item (see Project.Graph).
func PruneID(project string) converge.ID { return converge.ID("docker-prune:" + project) }

// PruneState lists the superseded images of a project: the images the
// package brought (LabelImageBrought) for containers the walk found, that
// no container on the engine uses now, by image ID.
type PruneState struct {
	Images []string

	keep bool
}

// pruneItem removes the images the project's updates superseded, after
// every container converged.
type pruneItem struct {
	p          *Project
	eng        Engine
	containers []converge.ID
}

func (it *pruneItem) ID() converge.ID { return PruneID(it.p.Name) }

// StateCurrent lists the images the project's containers ran on when the
// walk started (its snapshot) and that the package brought; those the
// containers still run on (as the walk left them) are kept without an
// engine call, the others are looked up among every container and image
// on the engine.
func (it *pruneItem) StateCurrent(ctx context.Context, deps converge.DepStates) (PruneState, error) {
	ps, err := converge.DepState[ProjectState](deps, ProjectID(it.p.Name))
	if err != nil || ps.snap == nil {
		return PruneState{}, nil
	}
	inUse := map[string]bool{}
	for _, id := range it.containers {
		if cs, err := converge.DepState[ContainerState](deps, id); err == nil && cs.ImageID != "" {
			inUse[cs.ImageID] = true
		}
	}
	var candidates []string
	for _, s := range ps.snap.containers {
		if s.Labels[LabelOwner] == OwnerValue && s.Labels[LabelImageBrought] == "true" && s.ImageID != "" && !inUse[s.ImageID] {
			candidates = append(candidates, s.ImageID)
		}
	}
	if len(candidates) == 0 {
		return PruneState{}, nil
	}
	all, err := it.eng.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return PruneState{}, fmt.Errorf("docker: project %s: list containers: %w", it.p.Name, err)
	}
	for _, c := range all {
		inUse[c.ImageID] = true
	}
	images, err := it.eng.ImageList(ctx, image.ListOptions{All: true})
	if err != nil {
		return PruneState{}, fmt.Errorf("docker: project %s: list images: %w", it.p.Name, err)
	}
	present := map[string]bool{}
	for _, im := range images {
		present[im.ID] = true
	}
	var st PruneState
	for _, id := range candidates {
		if present[id] && !inUse[id] {
			st.Images = append(st.Images, id)
		}
	}
	slices.Sort(st.Images)
	st.Images = slices.Compact(st.Images)
	return st, nil
}

// StateGoal is no superseded image left, unless the project keeps them.
func (it *pruneItem) StateGoal(context.Context, converge.DepStates) (PruneState, error) {
	return PruneState{keep: it.p.KeepImages}, nil
}

// StateClean leaves images alone: cleaning removes them only with
// RemoveImages, through the image items.
func (it *pruneItem) StateClean(context.Context, converge.DepStates) (PruneState, error) {
	return PruneState{keep: true}, nil
}

// Check requires the removal of the superseded images.
func (it *pruneItem) Check(_ context.Context, current, target PruneState) (converge.Decision, error) {
	if target.keep || len(current.Images) == 0 {
		return converge.NotRequired(), nil
	}
	return converge.Required(len(current.Images)), nil
}

// Apply removes the superseded images by ID. One the engine refuses to
// remove because a container uses it after all (created since the list)
// stays, as does one already gone.
func (it *pruneItem) Apply(ctx context.Context, current, target PruneState) (PruneState, error) {
	if target.keep {
		return current, nil
	}
	for i, id := range current.Images {
		_, err := it.eng.ImageRemove(ctx, id, image.RemoveOptions{PruneChildren: true})
		if err != nil && !errdefs.IsNotFound(err) && !errdefs.IsConflict(err) {
			return PruneState{Images: current.Images[i:]}, fmt.Errorf("docker: project %s: remove superseded image %s: %w", it.p.Name, id, err)
		}
	}
	return PruneState{}, nil
}

// ApplyDry returns no superseded image left.
func (it *pruneItem) ApplyDry(_ context.Context, current, target PruneState) (PruneState, error) {
	if target.keep {
		return current, nil
	}
	return PruneState{}, nil
}
