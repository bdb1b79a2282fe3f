package docker

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
)

// snapshot is what one walk knows of the engine, read by the project item
// with a constant number of calls: the project's containers (one list by
// label), the images the project uses (one list), and networks and volumes
// only when no running container already proves they exist. Items read it
// instead of inspecting one by one; an item that wrote marks itself stale
// and reads the engine directly afterwards.
type snapshot struct {
	containers map[string]container.Summary // by name
	images     map[string]localImage        // by normalized ref
	networks   map[string]objectInfo        // by name; confirmed or listed
	volumes    map[string]objectInfo

	mu    sync.Mutex
	stale map[string]bool
	// observed holds, per item key, the state an item read from the
	// engine at the end of its Apply, after its last write (a container's
	// inspect after its start, a network's create response): the walk's
	// verification of that item takes it once instead of reading the
	// engine again.
	observed map[string]any
}

type objectInfo struct {
	ID    string
	Owned bool
	known bool // listed (Owned is meaningful) rather than inferred
	// composeProject is the object's LabelComposeProject: compose created
	// it for that project.
	composeProject string
}

// owns reports whether the project named project owns the object: we
// created it, compose created it for the project, or (not listed) a
// running container of the project uses it.
func (o objectInfo) owns(project string) bool {
	return !o.known || o.Owned || project != "" && o.composeProject == project
}

func (s *snapshot) invalidate(key string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.stale == nil {
		s.stale = map[string]bool{}
	}
	s.stale[key] = true
	s.mu.Unlock()
}

func (s *snapshot) usable(key string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.stale[key]
}

// observe records the state of item key as the engine reported it after
// the item's last write of this walk; the item's next StateCurrent takes it
// (takeObserved).
func (s *snapshot) observe(key string, st any) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.observed == nil {
		s.observed = map[string]any{}
	}
	s.observed[key] = st
	s.mu.Unlock()
}

// takeObserved returns and forgets the state observe recorded for key, so
// it serves one StateCurrent (the walk's verification) and later reads go
// to the engine.
func takeObserved[S any](s *snapshot, key string) (S, bool) {
	var zero S
	if s == nil {
		return zero, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.observed[key]
	if !ok {
		return zero, false
	}
	delete(s.observed, key)
	st, ok := v.(S)
	return st, ok
}

// takeSnapshot reads the engine for project p.
func takeSnapshot(ctx context.Context, eng Engine, p *Project) (*snapshot, error) {
	s := &snapshot{
		containers: map[string]container.Summary{},
		images:     map[string]localImage{},
		networks:   map[string]objectInfo{},
		volumes:    map[string]objectInfo{},
	}
	// The images do not depend on the containers: list both at once, so a
	// walk waits for one round trip instead of two.
	var imgErr error
	var wg sync.WaitGroup
	if refs := p.imageRefs(); len(refs) > 0 {
		wg.Go(func() { imgErr = s.listImages(ctx, eng, refs) })
	}
	defer wg.Wait() // every return waits for the image list
	want := make([]string, 0, len(p.Containers))
	for i := range p.Containers {
		for _, r := range p.replicas(&p.Containers[i]) {
			want = append(want, r.name)
		}
	}
	list, err := listProjectContainers(ctx, eng, p.Name, want)
	if err != nil {
		return nil, err
	}
	s.containers = list
	for _, c := range list {
		if c.State != "running" {
			continue
		}
		if c.NetworkSettings != nil {
			for name, ep := range c.NetworkSettings.Networks {
				id := ""
				if ep != nil {
					id = ep.NetworkID
				}
				s.networks[name] = objectInfo{ID: id}
			}
		}
		for _, m := range c.Mounts {
			if m.Type == "volume" && m.Name != "" {
				s.volumes[m.Name] = objectInfo{ID: m.Name}
			}
		}
	}
	var nets, vols []string
	for _, n := range p.Networks {
		if _, ok := s.networks[n.Name]; !ok {
			nets = append(nets, n.Name)
		}
	}
	for _, v := range p.Volumes {
		if _, ok := s.volumes[v.Name]; !ok {
			vols = append(vols, v.Name)
		}
	}
	if len(nets) > 0 {
		found, err := listNetworks(ctx, eng, nets)
		if err != nil {
			return nil, err
		}
		for k, v := range found {
			s.networks[k] = v
		}
	}
	if len(vols) > 0 {
		found, err := listVolumes(ctx, eng, vols)
		if err != nil {
			return nil, err
		}
		for k, v := range found {
			s.volumes[k] = v
		}
	}
	wg.Wait()
	if imgErr != nil {
		return nil, imgErr
	}
	return s, nil
}

// listProjectContainers lists the containers of the project, by name: those
// carrying its label (LabelProject), and, unless every name in want is
// among them, also those carrying compose's (LabelComposeProject), which
// "docker compose up" started: a converged project costs one call, a
// project that lacks a container two. A nil want always asks for both.
func listProjectContainers(ctx context.Context, eng Engine, project string, want []string) (map[string]container.Summary, error) {
	out := map[string]container.Summary{}
	for _, l := range []string{LabelProject, LabelComposeProject} {
		list, err := eng.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", l+"="+project))})
		if err != nil {
			return nil, fmt.Errorf("docker: project %s: list containers: %w", project, err)
		}
		for _, c := range list {
			if len(c.Names) > 0 {
				out[strings.TrimPrefix(c.Names[0], "/")] = c
			}
		}
		if want != nil && !slices.ContainsFunc(want, func(n string) bool { _, ok := out[n]; return !ok }) {
			break
		}
	}
	return out, nil
}

// owned returns the names of the containers of project, sorted: those we
// created for it and those compose started for it (see ownedLabels).
func (s *snapshot) owned(project string) []string {
	var out []string
	for name, c := range s.containers {
		if ownedLabels(c.Labels, project) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// locks returns the update lock path of every container that declares one
// (LabelUpdateLock), by name.
func (s *snapshot) locks() map[string]string {
	out := map[string]string{}
	for name, c := range s.containers {
		if l := c.Labels[LabelUpdateLock]; l != "" {
			out[name] = l
		}
	}
	return out
}

func (s *snapshot) listImages(ctx context.Context, eng Engine, refs []string) error {
	found, err := listImages(ctx, eng, refs)
	if err != nil {
		return err
	}
	s.images = found
	return nil
}

// normalizeRef returns the familiar form of an image reference with the
// default tag added ("alpine" -> "alpine:latest"); unparsable references
// are returned as given.
func normalizeRef(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.FamiliarString(reference.TagNameOnly(named))
}

// localImage is an image present locally: its ID and its repository
// digests ("repo@sha256:...", those of the registry it was pulled from).
type localImage struct {
	ID      string
	digests []string
	// buildKey is the image's LabelBuildKey (an image the package built).
	buildKey string
}

// servedAs reports whether the image is the one a registry serves under
// the manifest digest d.
func (li localImage) servedAs(d string) bool {
	return slices.ContainsFunc(li.digests, func(rd string) bool { return strings.HasSuffix(rd, "@"+d) })
}

// listImages returns the given references present locally, in one call.
func listImages(ctx context.Context, eng Engine, refs []string) (map[string]localImage, error) {
	args := filters.NewArgs()
	want := map[string]bool{}
	for _, r := range refs {
		n := normalizeRef(r)
		want[n] = true
		if !strings.Contains(n, "@") {
			args.Add("reference", n)
		}
	}
	opts := image.ListOptions{Filters: args}
	if len(args.Get("reference")) < len(refs) {
		opts.Filters = filters.NewArgs() // digests: list everything and match below
	}
	list, err := eng.ImageList(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("docker: list images: %w", err)
	}
	found := map[string]localImage{}
	for _, im := range list {
		for _, t := range slices.Concat(im.RepoTags, im.RepoDigests) {
			if n := normalizeRef(t); want[n] {
				found[n] = localImage{ID: im.ID, digests: im.RepoDigests, buildKey: im.Labels[LabelBuildKey]}
			}
		}
	}
	return found, nil
}

func listNetworks(ctx context.Context, eng Engine, names []string) (map[string]objectInfo, error) {
	args := filters.NewArgs()
	for _, n := range names {
		args.Add("name", n)
	}
	list, err := eng.NetworkList(ctx, network.ListOptions{Filters: args})
	if err != nil {
		return nil, fmt.Errorf("docker: list networks: %w", err)
	}
	found := map[string]objectInfo{}
	for _, n := range list {
		if slices.Contains(names, n.Name) { // the name filter matches substrings
			found[n.Name] = objectInfo{ID: n.ID, Owned: n.Labels[LabelOwner] == OwnerValue, known: true,
				composeProject: n.Labels[LabelComposeProject]}
		}
	}
	return found, nil
}

func listVolumes(ctx context.Context, eng Engine, names []string) (map[string]objectInfo, error) {
	args := filters.NewArgs()
	for _, n := range names {
		args.Add("name", n)
	}
	resp, err := eng.VolumeList(ctx, volume.ListOptions{Filters: args})
	if err != nil {
		return nil, fmt.Errorf("docker: list volumes: %w", err)
	}
	found := map[string]objectInfo{}
	for _, v := range resp.Volumes {
		if v != nil && slices.Contains(names, v.Name) {
			found[v.Name] = objectInfo{ID: v.Name, Owned: v.Labels[LabelOwner] == OwnerValue, known: true,
				composeProject: v.Labels[LabelComposeProject]}
		}
	}
	return found, nil
}
