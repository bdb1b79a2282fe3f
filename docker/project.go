package docker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/convergekit/converge"
)

// DefaultPollInterval is how often a depends_on wait inspects a dependency
// when Project.PollInterval is zero.
const DefaultPollInterval = 250 * time.Millisecond

// Project is a set of containers with the networks and volumes they use,
// converged together: Graph turns it into a converge graph with one item per
// image, network, volume and container, plus a project item that reads the
// engine once per walk and removes owned containers the project no longer
// names. The zero value is an empty project, which Graph rejects for its
// empty Name.
type Project struct {
	// Name labels everything the project creates; required.
	Name       string
	Containers []ContainerSpec
	Networks   []NetworkSpec
	Volumes    []VolumeSpec
	// PollInterval is how often depends_on waits look at a dependency; 0
	// means DefaultPollInterval.
	PollInterval time.Duration
	// RemoveImages makes Clean remove the project's images too (when no
	// container uses them); by default cleaning leaves images alone.
	RemoveImages bool
	// Unsupported lists the Compose fields the loader skipped because
	// LoadOptions.IgnoreUnsupported was set ("services.web.cap_add").
	Unsupported []string
	// HashKey keys the spec hashes in LabelSpecHash and LabelSpecFields
	// (HMAC-SHA256), so a reader of the labels cannot test a guessed secret
	// offline. Keep it secret and stable: a new key recreates every
	// container once. Nil derives a key from Name, which anyone can
	// recompute: set it whenever labels may be seen by someone who must not
	// learn the environment (see the package documentation).
	HashKey []byte
}

// NetworkSpec is an engine network the project owns.
type NetworkSpec struct {
	// Name is the engine network name; required.
	Name     string
	Driver   string
	Internal bool
	Labels   map[string]string
}

// VolumeSpec is an engine volume the project owns.
type VolumeSpec struct {
	// Name is the engine volume name; required.
	Name   string
	Driver string
	Labels map[string]string
}

// ProjectID is the ID of the project item of project name.
func ProjectID(name string) converge.ID { return converge.ID("docker-project:" + name) }

// ContainerID is the ID of the container item of a service.
func ContainerID(project, service string) converge.ID {
	return converge.ID("container:" + project + "/" + service)
}

// ImageID is the ID of the image item of a reference.
func ImageID(ref string) converge.ID { return converge.ID("image:" + normalizeRef(ref)) }

// NetworkID is the ID of the network item of an engine network name.
func NetworkID(name string) converge.ID { return converge.ID("network:" + name) }

// VolumeID is the ID of the volume item of an engine volume name.
func VolumeID(name string) converge.ID { return converge.ID("volume:" + name) }

func (p *Project) containerName(s *ContainerSpec) string {
	if s.Name != "" {
		return s.Name
	}
	return p.Name + "-" + s.Service
}

func (p *Project) imageRefs() []string {
	var refs []string
	for i := range p.Containers {
		if r := normalizeRef(p.Containers[i].Image); !slices.Contains(refs, r) {
			refs = append(refs, r)
		}
	}
	return refs
}

func (p *Project) validate() error {
	if p.Name == "" {
		return &SpecError{Object: "project", Field: "Name", Reason: "must not be empty"}
	}
	seen := map[string]bool{}
	names := map[string]bool{}
	for i := range p.Containers {
		s := &p.Containers[i]
		obj := fmt.Sprintf("project %s: container %d (%s)", p.Name, i, s.Service)
		if err := s.validate(obj); err != nil {
			return err
		}
		if seen[s.Service] {
			return &SpecError{Object: obj, Service: s.Service, Field: "Service", Reason: "duplicate service"}
		}
		seen[s.Service] = true
		n := p.containerName(s)
		if names[n] {
			return &SpecError{Object: obj, Service: s.Service, Field: "Name", Reason: fmt.Sprintf("duplicate container name %q", n)}
		}
		names[n] = true
	}
	for i := range p.Containers {
		s := &p.Containers[i]
		for _, d := range s.DependsOn {
			if !seen[d.Service] {
				return &SpecError{Object: "project " + p.Name + ": service " + s.Service, Service: s.Service, Field: "DependsOn",
					Reason: fmt.Sprintf("unknown service %q", d.Service)}
			}
		}
	}
	for _, n := range p.Networks {
		if n.Name == "" {
			return &SpecError{Object: "project " + p.Name, Field: "Networks", Reason: "network name is required"}
		}
	}
	for _, v := range p.Volumes {
		if v.Name == "" {
			return &SpecError{Object: "project " + p.Name, Field: "Volumes", Reason: "volume name is required"}
		}
	}
	return nil
}

// Graph validates the project and returns its graph, every item Present.
// Each container depends on the project item, its image (unless its update
// strategy is KillThenDownload, which pulls inside the container's own
// Apply), the project's networks and volumes it uses, and the containers it
// depends on. The project is copied: later changes to p do not affect the
// graph.
func (p *Project) Graph(eng Engine) (*converge.Graph, error) {
	if eng == nil {
		return nil, &SpecError{Object: "project " + p.Name, Field: "Engine", Reason: "must not be nil"}
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	cp := p.clone()
	g := converge.NewGraph()
	pid := ProjectID(cp.Name)
	g.Add(converge.Wrap[ProjectState](&projectItem{p: cp, eng: eng}), converge.Present)
	pulled := map[string]bool{}
	for i := range cp.Containers {
		s := &cp.Containers[i]
		if s.Update == KillThenDownload {
			continue
		}
		ref := normalizeRef(s.Image)
		if pulled[ref] {
			continue
		}
		pulled[ref] = true
		g.Add(converge.Wrap[ImageState](&Image{Ref: ref, Pull: s.Pull, eng: eng, project: pid, keep: !cp.RemoveImages}), converge.Present, pid)
	}
	netIDs := map[string]bool{}
	for _, n := range cp.Networks {
		netIDs[n.Name] = true
		g.Add(converge.Wrap[NetworkState](&Network{spec: n, project: cp.Name, eng: eng, projectID: pid}), converge.Present, pid)
	}
	volIDs := map[string]bool{}
	for _, v := range cp.Volumes {
		volIDs[v.Name] = true
		g.Add(converge.Wrap[VolumeState](&Volume{spec: v, project: cp.Name, eng: eng, projectID: pid}), converge.Present, pid)
	}
	for i := range cp.Containers {
		s := &cp.Containers[i]
		deps := []converge.ID{pid}
		c := &Container{spec: *s, name: cp.containerName(s), project: cp.Name, eng: eng, projectID: pid,
			poll: cp.PollInterval, red: newRedactor(s), hashKey: projectHashKey(cp)}
		if c.poll <= 0 {
			c.poll = DefaultPollInterval
		}
		if s.Update != KillThenDownload {
			c.imageID = ImageID(s.Image)
			deps = append(deps, c.imageID)
		}
		for _, n := range s.Networks {
			if netIDs[n.Name] && !slices.Contains(deps, NetworkID(n.Name)) {
				deps = append(deps, NetworkID(n.Name))
			}
		}
		for _, m := range s.Mounts {
			if m.Type == "volume" && volIDs[m.Source] && !slices.Contains(deps, VolumeID(m.Source)) {
				deps = append(deps, VolumeID(m.Source))
			}
		}
		for _, d := range s.DependsOn {
			for j := range cp.Containers {
				if cp.Containers[j].Service == d.Service {
					c.waits = append(c.waits, wait{name: cp.containerName(&cp.Containers[j]), dep: d})
				}
			}
			deps = append(deps, ContainerID(cp.Name, d.Service))
		}
		g.Add(converge.Wrap[ContainerState](c), converge.Present, deps...)
	}
	return g, nil
}

func (p *Project) clone() *Project {
	cp := *p
	cp.Containers = slices.Clone(p.Containers)
	for i := range cp.Containers {
		c := &cp.Containers[i]
		c.Env = maps.Clone(c.Env)
		c.Labels = maps.Clone(c.Labels)
		c.Command = slices.Clone(c.Command)
		c.Entrypoint = slices.Clone(c.Entrypoint)
		c.Ports = slices.Clone(c.Ports)
		c.Mounts = slices.Clone(c.Mounts)
		c.Networks = slices.Clone(c.Networks)
		c.DependsOn = slices.Clone(c.DependsOn)
		c.SecretEnv = slices.Clone(c.SecretEnv)
	}
	cp.Networks = slices.Clone(p.Networks)
	cp.Volumes = slices.Clone(p.Volumes)
	cp.HashKey = slices.Clone(p.HashKey)
	return &cp
}

// ProjectState is the state of the project item: the names of the
// containers the project owns on the engine (current) or should own
// (target), sorted. Containers owned but not named by the target are
// removed. It also carries the walk's snapshot of the engine to the other
// items of the project.
type ProjectState struct {
	Project    string
	Containers []string
	snap       *snapshot
}

// Orphans returns the containers of current the target does not name.
func (s ProjectState) Orphans(target ProjectState) []string {
	var out []string
	for _, c := range s.Containers {
		if !slices.Contains(target.Containers, c) {
			out = append(out, c)
		}
	}
	return out
}

type projectItem struct {
	p   *Project
	eng Engine
}

func (it *projectItem) ID() converge.ID { return ProjectID(it.p.Name) }

func (it *projectItem) StateCurrent(ctx context.Context, _ converge.Deps) (ProjectState, error) {
	snap, err := takeSnapshot(ctx, it.eng, it.p)
	if err != nil {
		return ProjectState{}, err
	}
	st := ProjectState{Project: it.p.Name, snap: snap}
	for name, c := range snap.containers {
		if c.Labels[LabelOwner] == OwnerValue {
			st.Containers = append(st.Containers, name)
		}
	}
	sort.Strings(st.Containers)
	return st, nil
}

func (it *projectItem) StateGoal(context.Context, converge.Deps) (ProjectState, error) {
	st := ProjectState{Project: it.p.Name}
	for i := range it.p.Containers {
		st.Containers = append(st.Containers, it.p.containerName(&it.p.Containers[i]))
	}
	sort.Strings(st.Containers)
	return st, nil
}

func (it *projectItem) StateClean(context.Context, converge.Deps) (ProjectState, error) {
	return ProjectState{Project: it.p.Name}, nil
}

func (it *projectItem) Check(_ context.Context, current, target ProjectState) (converge.Decision, error) {
	if n := len(current.Orphans(target)); n > 0 {
		return converge.Required(n), nil
	}
	return converge.NotRequired(), nil
}

func (it *projectItem) Apply(ctx context.Context, current, target ProjectState) (ProjectState, error) {
	orphans := current.Orphans(target)
	for i, name := range orphans {
		if err := removeContainer(ctx, it.eng, name, nil); err != nil {
			return current, fmt.Errorf("docker: project %s: remove orphan container %s: %w", it.p.Name, name, err)
		}
		converge.ReportUnits(ctx, i+1, len(orphans))
	}
	return it.ApplyDry(ctx, current, target)
}

func (it *projectItem) ApplyDry(_ context.Context, current, target ProjectState) (ProjectState, error) {
	next := current
	next.Containers = nil
	for _, c := range current.Containers {
		if slices.Contains(target.Containers, c) {
			next.Containers = append(next.Containers, c)
		}
	}
	return next, nil
}

// removeContainer stops and removes a container; a missing one is fine.
func removeContainer(ctx context.Context, eng Engine, name string, timeout *time.Duration) error {
	opts := container.StopOptions{}
	if timeout != nil {
		s := int(timeout.Seconds())
		opts.Timeout = &s
	}
	if err := eng.ContainerStop(ctx, name, opts); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("stop: %w", err)
	}
	if err := eng.ContainerRemove(ctx, name, container.RemoveOptions{Force: true}); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove: %w", err)
	}
	return nil
}

// Plans returns the planned action of every container in a report (a dry
// run shows what Apply would do), including the removal of orphans, sorted
// by container name.
func Plans(rep *converge.Report) []Plan {
	if rep == nil {
		return nil
	}
	var out []Plan
	for _, r := range rep.Items {
		switch before := r.Before.(type) {
		case ContainerState:
			if t, ok := r.Target.(ContainerState); ok {
				out = append(out, PlanFor(before, t))
			}
		case ProjectState:
			if t, ok := r.Target.(ProjectState); ok {
				for _, o := range before.Orphans(t) {
					out = append(out, Plan{Container: o, Action: ActionRemove})
				}
			}
		case nil:
			if t, ok := r.Target.(ContainerState); ok && r.Unknown {
				out = append(out, PlanFor(ContainerState{}, t))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Container < out[j].Container })
	return out
}
