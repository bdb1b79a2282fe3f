package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
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
// engine once per walk and an orphans item that removes owned containers
// the project no longer names. The zero value is an empty project, which
// Graph rejects for its empty Name.
type Project struct {
	// Name labels everything the project creates; required.
	Name string `json:"name,omitzero"`
	// Containers are the project's containers [services].
	Containers []ContainerSpec `json:"services,omitempty"`
	Networks   []NetworkSpec   `json:"networks,omitempty"`
	Volumes    []VolumeSpec    `json:"volumes,omitempty"`
	// PollInterval is how often depends_on waits look at a dependency, and
	// how long a container the walk started is watched for an early exit;
	// 0 means DefaultPollInterval.
	PollInterval time.Duration `json:"poll_interval,omitzero,format:units"`
	// RemoveImages makes Clean remove the project's images too (when no
	// container uses them); by default cleaning leaves images alone.
	RemoveImages bool `json:"remove_images,omitzero"`
	// RemoveVolumes makes Clean remove the project's volumes too, as
	// "docker compose down --volumes" does; by default cleaning keeps them,
	// with the data in them.
	RemoveVolumes bool `json:"remove_volumes,omitzero"`
	// KeepImages keeps the images an update superseded. By default, once
	// every container of the project converged (each verified running),
	// the images the package pulled or built for containers it then
	// replaced, and that no container on the engine uses any more, are
	// removed (the prune item, PruneID). Images the package did not bring
	// are never removed (see LabelImageBrought); an image it pulled in an
	// earlier walk than the one that created its container is not known
	// as brought either, and stays.
	KeepImages bool `json:"keep_images,omitzero"`
	// PullRecords is the store in which the time of each pull of a
	// PullRefresh image is kept (under PullRecordKey), the program's
	// converge.Store beside its target (as LoadHashKey keeps the hash
	// key); required by a project with a PullRefresh service, read by no
	// other. It is not part of the project's JSON (see Runtime).
	PullRecords converge.Store `json:"-"`
	// Now is the clock of the PullRefresh intervals; nil is time.Now. It
	// is not part of the project's JSON.
	Now func() time.Time `json:"-"`
	// Unsupported lists the Compose fields the loader skipped because
	// LoadOptions.IgnoreUnsupported was set ("services.web.cap_add").
	Unsupported []string `json:"unsupported,omitempty"`
	// NoEffect lists the Compose fields the loader accepted that have no
	// effect on a deployment, each with the reason: compose up ignores
	// them too, so converge, which applies a file as compose up does,
	// changes nothing for them ("services.web.develop": develop is read
	// by compose watch and up --watch only). They are listed, never
	// dropped silently, whether or not IgnoreUnsupported is set.
	NoEffect []NoEffectField `json:"no_effect,omitempty"`
	// EnvFiles lists the env_file files the loader read, per service, in
	// the order read; the values are in each ContainerSpec.Env. A file
	// marked "required: false" that does not exist is not listed.
	EnvFiles []EnvFileRead `json:"env_files,omitempty"`
	// ComposeFiles are the absolute paths of the Compose files the project
	// was loaded from and ComposeDir its directory, which LoadComposeFile
	// sets; the containers carry them in compose's labels
	// (LabelComposeConfigFiles, LabelComposeWorkingDir), where "docker
	// compose ls" shows them. Empty, no label is written.
	ComposeFiles []string `json:"compose_files,omitempty"`
	ComposeDir   string   `json:"compose_dir,omitzero"`
	// HashKey keys the spec hashes in LabelSpecHash and LabelSpecFields
	// (HMAC-SHA256), so a reader of the labels cannot test a guessed secret
	// offline. Keep it secret and stable: a new key recreates every
	// container once. LoadHashKey keeps a random one in the program's
	// converge.Store, beside its target. Nil (the zero value) derives the
	// key from Name, which anyone can recompute: then a label reader CAN
	// test a guessed secret value. Set it whenever labels may be seen by
	// someone who must not learn the environment (see the package
	// documentation). It is not part of the project's JSON, so a stored
	// target never holds it: give it at run time (Runtime.HashKey).
	HashKey []byte `json:"-"`
	// Metrics, when set, counts every engine call the project's graph
	// makes, by operation (MetricEngineCalls, MetricEngineErrors); nil
	// counts nothing. It is not part of the project's JSON (see Runtime).
	Metrics converge.Metrics `json:"-"`
	// Logger, when set, receives a record of every change the project's
	// graph makes on the engine (create, start, stop, remove, rename,
	// unpause, pull, networks and volumes), at Info, or at Warn when it
	// failed, with the attributes project, action, service, container
	// (and target, the temporary name or ID the call named when it is
	// not the container's name), image, network, volume and error as they
	// apply; nil logs nothing.
	// Environment values are never logged, and an error is scrubbed of
	// the project's secrets as the package's errors are. It is not part
	// of the project's JSON (see Runtime).
	Logger *slog.Logger `json:"-"`
	// FreeSpace, when set, reads the free space of the engine's data root
	// (docker info DockerRootDir) for the space check before a pull (see
	// ContainerSpec.ImageSize); nil statfs's the data root from this
	// process, which must then see it at the path the engine names (an
	// agent in a container mounts it there): where it cannot, no space is
	// checked. It is not part of the project's JSON.
	FreeSpace FreeSpaceFunc `json:"-"`
}

// NoEffectField is a Compose field set in a file that has no effect on a
// deployment (see Project.NoEffect).
type NoEffectField struct {
	// Field is the field's path, "services.<name>.<field>".
	Field string `json:"field,omitzero"`
	// Reason says why it has no effect.
	Reason string `json:"reason,omitzero"`
}

// EnvFileRead is one env_file the Compose loader read for a service.
type EnvFileRead struct {
	// Service is the Compose service.
	Service string `json:"service,omitzero"`
	// Path is the file, relative to the project directory when inside
	// it, absolute when in one of LoadOptions.EnvFileDirs.
	Path string `json:"path,omitzero"`
}

// NetworkSpec is an engine network the project owns.
type NetworkSpec struct {
	// Name is the engine network name; required.
	Name     string            `json:"name,omitzero"`
	Driver   string            `json:"driver,omitzero"`
	Internal bool              `json:"internal,omitzero"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Options are the driver's options (Compose driver_opts).
	Options map[string]string `json:"driver_opts,omitempty"`
	// EnableIPv6 gives the network IPv6 addresses (Compose enable_ipv6).
	EnableIPv6 bool `json:"enable_ipv6,omitzero"`
	// IPAM sets the address pools; nil lets the engine choose.
	IPAM *IPAM `json:"ipam,omitzero"`
}

// VolumeSpec is an engine volume the project owns.
type VolumeSpec struct {
	// Name is the engine volume name; required.
	Name   string            `json:"name,omitzero"`
	Driver string            `json:"driver,omitzero"`
	Labels map[string]string `json:"labels,omitempty"`
	// Options are the driver's options (Compose driver_opts).
	Options map[string]string `json:"driver_opts,omitempty"`
}

// ProjectID is the ID of the project item of project name.
func ProjectID(name string) converge.ID { return converge.ID("docker-project:" + name) }

// ContainerID is the ID of the container item of a service without
// ContainerSpec.Replicas (see ReplicaID for those with it).
func ContainerID(project, service string) converge.ID {
	return converge.ID("container:" + project + "/" + service)
}

// ReplicaID is the ID of the container item of replica n (from 1) of a
// service with ContainerSpec.Replicas set. A service without Replicas has
// one item, ContainerID.
func ReplicaID(project, service string, n int) converge.ID {
	return converge.ID(string(ContainerID(project, service)) + "#" + strconv.Itoa(n))
}

// isServiceItem reports whether id is the item of a container of service:
// its ContainerID or one of its ReplicaIDs.
func isServiceItem(id converge.ID, project, service string) bool {
	base := ContainerID(project, service)
	rest, ok := strings.CutPrefix(string(id), string(base))
	return ok && (rest == "" || strings.HasPrefix(rest, "#"))
}

// ImageID is the ID of the image item of a reference.
func ImageID(ref string) converge.ID { return converge.ID("image:" + normalizeRef(ref)) }

// NetworkID is the ID of the network item of an engine network name.
func NetworkID(name string) converge.ID { return converge.ID("network:" + name) }

// VolumeID is the ID of the volume item of an engine volume name.
func VolumeID(name string) converge.ID { return converge.ID("volume:" + name) }

// volumesFromParts splits a VolumesFrom entry into its source,
// "service:NAME" or "container:NAME", and its mode ("", "ro" or "rw", or
// what else was given).
func volumesFromParts(v string) (src, mode string) {
	if name, ok := strings.CutPrefix(v, "container:"); ok {
		name, mode, _ = strings.Cut(name, ":")
		return "container:" + name, mode
	}
	name, mode, _ := strings.Cut(v, ":")
	if name == "" {
		return "", mode
	}
	return "service:" + name, mode
}

func (p *Project) containerName(s *ContainerSpec) string {
	if s.Name != "" {
		return s.Name
	}
	return p.Name + "-" + s.Service
}

// replica is one container of a service: its engine name, its item's ID
// and its number (from 1).
type replica struct {
	name   string
	id     converge.ID
	number int
}

// replicas are the containers of service s, by number: one, named by
// containerName, when s.Replicas is nil; else *s.Replicas of them, named
// as compose names them ("<project>-<service>-N"), or Name for a single
// one.
func (p *Project) replicas(s *ContainerSpec) []replica {
	if s.Replicas == nil {
		return []replica{{name: p.containerName(s), id: ContainerID(p.Name, s.Service), number: 1}}
	}
	out := make([]replica, max(*s.Replicas, 0))
	for i := range out {
		n := i + 1
		name := p.Name + "-" + s.Service + "-" + strconv.Itoa(n)
		if s.Name != "" {
			name = s.Name
		}
		out[i] = replica{name: name, id: ReplicaID(p.Name, s.Service, n), number: n}
	}
	return out
}

// serviceReplicas returns the replicas of the project's service svc.
func (p *Project) serviceReplicas(svc string) []replica {
	for i := range p.Containers {
		if p.Containers[i].Service == svc {
			return p.replicas(&p.Containers[i])
		}
	}
	return nil
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
		for _, r := range p.replicas(s) {
			if names[r.name] {
				return &SpecError{Object: obj, Service: s.Service, Field: "Name", Reason: fmt.Sprintf("duplicate container name %q", r.name)}
			}
			names[r.name] = true
		}
	}
	// A reference to one container of a service (a shared namespace,
	// volumes_from, a link) needs one to exist.
	none := map[string]bool{}
	for i := range p.Containers {
		if s := &p.Containers[i]; len(p.replicas(s)) == 0 {
			none[s.Service] = true
		}
	}
	for i := range p.Containers {
		s := &p.Containers[i]
		refs := map[string]string{"NetworkMode": s.NetworkMode, "IPC": s.IPC, "PID": s.PID}
		for j, v := range s.VolumesFrom {
			if src, _ := volumesFromParts(v); strings.HasPrefix(src, "service:") {
				refs[fmt.Sprintf("VolumesFrom[%d]", j)] = src
			}
		}
		for j, l := range s.Links {
			svc, _, _ := strings.Cut(l, ":")
			refs[fmt.Sprintf("Links[%d]", j)] = ServiceNetworkPrefix + svc
		}
		for _, field := range slices.Sorted(maps.Keys(refs)) {
			if svc, ok := strings.CutPrefix(refs[field], ServiceNetworkPrefix); ok && none[svc] {
				return &SpecError{Object: "project " + p.Name + ": service " + s.Service, Service: s.Service, Field: field,
					Reason: fmt.Sprintf("service %q runs no container (Replicas is 0)", svc)}
			}
		}
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
	for i := range p.Containers {
		s := &p.Containers[i]
		for j, l := range s.ExternalLinks {
			if name, alias, _ := strings.Cut(l, ":"); name == "" || strings.Contains(l, ":") && alias == "" {
				return &SpecError{Object: "project " + p.Name + ": service " + s.Service, Service: s.Service, Field: fmt.Sprintf("ExternalLinks[%d]", j),
					Reason: fmt.Sprintf("%q is not CONTAINER or CONTAINER:ALIAS", l)}
			}
		}
		for j, v := range s.VolumesFrom {
			src, mode := volumesFromParts(v)
			svc, isService := strings.CutPrefix(src, "service:")
			if isService && !seen[svc] || src == "" || mode != "" && mode != "ro" && mode != "rw" {
				return &SpecError{Object: "project " + p.Name + ": service " + s.Service, Service: s.Service, Field: fmt.Sprintf("VolumesFrom[%d]", j),
					Reason: fmt.Sprintf("%q is not SERVICE[:ro|rw] (a service of the project) or container:NAME[:ro|rw]", v)}
			}
		}
		for j, l := range s.Links {
			svc, _, _ := strings.Cut(l, ":")
			if !seen[svc] || !slices.ContainsFunc(s.DependsOn, func(d Dependency) bool { return d.Service == svc }) {
				return &SpecError{Object: "project " + p.Name + ": service " + s.Service, Service: s.Service, Field: fmt.Sprintf("Links[%d]", j),
					Reason: fmt.Sprintf("%q is not a service this one depends on", svc)}
			}
		}
		for field, mode := range map[string]string{"IPC": s.IPC, "PID": s.PID} {
			if svc, ok := strings.CutPrefix(mode, ServiceNetworkPrefix); ok && !seen[svc] {
				return &SpecError{Object: "project " + p.Name + ": service " + s.Service, Service: s.Service, Field: field,
					Reason: fmt.Sprintf("unknown service %q", svc)}
			}
		}
		if svc, ok := strings.CutPrefix(s.NetworkMode, ServiceNetworkPrefix); ok && !seen[svc] {
			return &SpecError{Object: "project " + p.Name + ": service " + s.Service, Service: s.Service, Field: "NetworkMode",
				Reason: fmt.Sprintf("unknown service %q", svc)}
		}
	}
	for _, n := range p.Networks {
		if n.Name == "" {
			return &SpecError{Object: "project " + p.Name, Field: "Networks", Reason: "network name is required"}
		}
		if field, reason := n.IPAM.validate(); field != "" {
			return &SpecError{Object: "project " + p.Name + ": network " + n.Name, Field: field, Reason: reason}
		}
	}
	for _, v := range p.Volumes {
		if v.Name == "" {
			return &SpecError{Object: "project " + p.Name, Field: "Volumes", Reason: "volume name is required"}
		}
	}
	return nil
}

// Graph validates the project and returns its graph, every item Present,
// ordered so that nothing is created before every image is resolved and
// nothing a container uses is removed before the container:
//
//   - the project item (ProjectID) reads the engine once per walk;
//   - image items (one per reference) pull what is missing, or fail with
//     an *ImageError; every network and volume item depends on all of
//     them, so a missing image fails the walk with nothing created;
//   - network and volume items;
//   - the orphans item (OrphansID) removes owned containers the project no
//     longer names, after the images and before any container;
//   - container items, each after the project's networks and volumes it
//     uses, its image, and the containers it depends on.
//
// Cleaning walks the same graph backwards: containers in reverse
// dependency order, then the remaining owned containers (orphans), then
// networks, volumes (only with RemoveVolumes) and images (only with
// RemoveImages). The image of containers that all use KillThenDownload is
// pulled by the container after the old one is removed; its item only
// checks that a PullNever image is present. The project is copied: later
// changes to p do not affect the graph.
func (p *Project) Graph(eng Engine) (*converge.Graph, error) {
	if eng == nil {
		return nil, &SpecError{Object: "project " + p.Name, Field: "Engine", Reason: "must not be nil"}
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	cp := p.clone()
	sp := &space{eng: eng, free: cp.FreeSpace}
	var refresh *pullRecords
	for _, s := range cp.Containers {
		if s.Pull == PullRefresh && s.Build == nil && cp.PullRecords == nil {
			return nil, &SpecError{Object: "project " + cp.Name + ": service " + s.Service, Service: s.Service, Field: "Pull",
				Reason: "PullRefresh needs Project.PullRecords, the store in which the time of each pull is kept"}
		}
	}
	if cp.PullRecords != nil {
		refresh = &pullRecords{store: cp.PullRecords, project: cp.Name, clock: cp.Now}
	}
	eng = observe(traced{settled{eng}}, cp)
	g := converge.NewGraph()
	pid := ProjectID(cp.Name)
	g.Add(converge.Wrap[ProjectState](&projectItem{p: cp, eng: eng}), converge.Present)
	var images []*Image
	builds := map[string]*builtImage{}
	var buildRefs []string
	for i := range cp.Containers {
		s := &cp.Containers[i]
		ref := normalizeRef(s.Image)
		if s.Build != nil {
			b, ok := builds[ref]
			switch {
			case !ok:
				b = &builtImage{ref: ref, spec: *s.Build, eng: eng, project: pid, keep: !cp.RemoveImages, space: sp}
				builds[ref] = b
				buildRefs = append(buildRefs, ref)
			case !reflect.DeepEqual(b.spec, *s.Build):
				return nil, &SpecError{Object: "project " + cp.Name + ": service " + s.Service, Service: s.Service, Field: "Build",
					Reason: fmt.Sprintf("image %s is also built by another service with other options", ref)}
			}
			b.services = append(b.services, s.Service)
			b.size = max(b.size, s.ImageSize)
			continue
		}
		if slices.Contains(buildRefs, ref) {
			return nil, &SpecError{Object: "project " + cp.Name + ": service " + s.Service, Service: s.Service, Field: "Image",
				Reason: fmt.Sprintf("image %s is built by another service: give this one Build too", ref)}
		}
		j := slices.IndexFunc(images, func(im *Image) bool { return im.Ref == ref })
		if j < 0 {
			j = len(images)
			images = append(images, &Image{Ref: ref, Pull: s.Pull, eng: eng, project: pid, keep: !cp.RemoveImages, deferred: true, auto: true, space: sp, refresh: refresh})
		}
		images[j].services = append(images[j].services, s.Service)
		switch {
		case s.Pull == PullAlways: // one service asking is enough to ask the registry
			images[j].Pull, images[j].every = PullAlways, 0
		case s.Pull == PullRefresh && images[j].Pull != PullAlways: // the shortest interval
			if images[j].Pull != PullRefresh || images[j].every == 0 || s.PullEvery < images[j].every {
				images[j].every = s.PullEvery
			}
			images[j].Pull = PullRefresh
		}
		if !s.Update.deferred() {
			images[j].deferred = false
			if s.Update != AutoUpdate {
				images[j].auto = false
			}
		}
		images[j].size = max(images[j].size, s.ImageSize)
	}
	var imageIDs []converge.ID
	for _, im := range images {
		if _, built := builds[im.Ref]; built {
			return nil, &SpecError{Object: "project " + cp.Name, Field: "Image",
				Reason: fmt.Sprintf("image %s is built by service %s and pulled by service %s", im.Ref, builds[im.Ref].services[0], im.services[0])}
		}
		sort.Strings(im.services)
		g.Add(converge.Wrap[ImageState](im), converge.Present, pid)
		imageIDs = append(imageIDs, im.ID())
	}
	for _, ref := range buildRefs {
		b := builds[ref]
		sort.Strings(b.services)
		g.Add(converge.Wrap[ImageState](b), converge.Present, pid)
		imageIDs = append(imageIDs, b.ID())
	}
	resolved := append([]converge.ID{pid}, imageIDs...)
	orphanDeps := slices.Clone(resolved)
	netIDs := map[string]bool{}
	for _, n := range cp.Networks {
		netIDs[n.Name] = true
		g.Add(converge.Wrap[NetworkState](&Network{spec: n, project: cp.Name, eng: eng, projectID: pid}), converge.Present, resolved...)
		orphanDeps = append(orphanDeps, NetworkID(n.Name))
	}
	volIDs := map[string]bool{}
	for _, v := range cp.Volumes {
		volIDs[v.Name] = true
		g.Add(converge.Wrap[VolumeState](&Volume{spec: v, project: cp.Name, eng: eng, projectID: pid, keep: !cp.RemoveVolumes}),
			converge.Present, resolved...)
		orphanDeps = append(orphanDeps, VolumeID(v.Name))
	}
	oid := OrphansID(cp.Name)
	var containerIDs []converge.ID
	g.Add(converge.Wrap[ProjectState](&orphansItem{p: cp, eng: eng}), converge.Present, orphanDeps...)
	for i := range cp.Containers {
		s := &cp.Containers[i]
		var prev converge.ID
		for _, r := range cp.replicas(s) {
			c := cp.containerItem(eng, s, r, sp)
			c.projectID = pid
			deps := []converge.ID{pid, oid, c.imageID}
			// Replicas are walked one after the other, from number 1
			// (and removed from the highest): a recreate takes one down
			// at a time.
			if prev != "" {
				deps = append(deps, prev)
			}
			prev = r.id
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
			for _, id := range c.serviceDeps {
				if !slices.Contains(deps, id) {
					deps = append(deps, id)
				}
			}
			if slices.ContainsFunc(s.DependsOn, func(d Dependency) bool { return d.Restart }) {
				g.Add(converge.Wrap[ContainerState](&restartingContainer{c}), converge.Present, deps...)
			} else {
				g.Add(converge.Wrap[ContainerState](c), converge.Present, deps...)
			}
			containerIDs = append(containerIDs, c.ID())
		}
	}
	g.Add(converge.Wrap[PruneState](&pruneItem{p: cp, eng: eng, containers: containerIDs}), converge.Present,
		append([]converge.ID{pid}, containerIDs...)...)
	return g, nil
}

// containerItem is the item of replica r of service s of the project,
// with the references to other services resolved to their containers:
// every replica of a service it depends on, the first replica of one
// whose namespace or volumes it shares, every replica of one it links to.
func (p *Project) containerItem(eng Engine, s *ContainerSpec, r replica, sp *space) *Container {
	c := &Container{spec: *s, name: r.name, id: r.id, number: r.number, project: p.Name, eng: forService(eng, s, r.name),
		imageID: ImageID(s.Image), poll: p.PollInterval, red: newRedactor(s), hashKey: projectHashKey(p), space: sp,
		composeDir: p.ComposeDir, composeFiles: strings.Join(p.ComposeFiles, ",")}
	if c.poll <= 0 {
		c.poll = DefaultPollInterval
	}
	redactorOf := func(svc string) redactor {
		for j := range p.Containers {
			if dep := &p.Containers[j]; dep.Service == svc {
				return newRedactor(dep)
			}
		}
		return nil
	}
	first := func(svc string) (replica, bool) {
		rs := p.serviceReplicas(svc)
		if len(rs) == 0 {
			return replica{}, false
		}
		if !slices.Contains(c.serviceDeps, rs[0].id) {
			c.serviceDeps = append(c.serviceDeps, rs[0].id)
		}
		return rs[0], true
	}
	if svc, ok := strings.CutPrefix(s.NetworkMode, ServiceNetworkPrefix); ok {
		if dep, ok := first(svc); ok {
			c.netContainer, c.netID = dep.name, dep.id
		}
	}
	for _, d := range s.DependsOn {
		red := redactorOf(d.Service)
		for _, dep := range p.serviceReplicas(d.Service) {
			c.waits = append(c.waits, wait{name: dep.name, dep: d, red: red})
			if !slices.Contains(c.serviceDeps, dep.id) {
				c.serviceDeps = append(c.serviceDeps, dep.id)
			}
		}
	}
	for _, mode := range []string{s.IPC, s.PID} {
		svc, ok := strings.CutPrefix(mode, ServiceNetworkPrefix)
		if !ok {
			continue
		}
		if dep, ok := first(svc); ok {
			if c.shared == nil {
				c.shared = map[string]string{}
			}
			c.shared[mode] = dep.name
		}
	}
	for _, v := range s.VolumesFrom {
		src, mode := volumesFromParts(v)
		ref := strings.TrimPrefix(src, "container:")
		if svc, ok := strings.CutPrefix(src, "service:"); ok {
			if dep, ok := first(svc); ok {
				ref = dep.name
			}
		}
		if mode != "" {
			ref += ":" + mode
		}
		c.volumesFrom = append(c.volumesFrom, ref)
	}
	for _, l := range s.ExternalLinks {
		name, alias, ok := strings.Cut(l, ":")
		if !ok {
			alias = name
		}
		c.links = append(c.links, name+":"+alias)
	}
	for _, l := range s.Links {
		svc, alias, ok := strings.Cut(l, ":")
		if !ok {
			alias = svc
		}
		for _, dep := range p.serviceReplicas(svc) {
			c.links = append(c.links, dep.name+":"+alias)
			if !slices.Contains(c.serviceDeps, dep.id) {
				c.serviceDeps = append(c.serviceDeps, dep.id)
			}
		}
	}
	return c
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
		if c.Replicas != nil {
			n := *c.Replicas
			c.Replicas = &n
		}
		c.cloneHost()
	}
	cp.Networks = slices.Clone(p.Networks)
	cp.Volumes = slices.Clone(p.Volumes)
	cp.ComposeFiles = slices.Clone(p.ComposeFiles)
	cp.HashKey = slices.Clone(p.HashKey)
	return &cp
}

// ProjectState is the state of the project item and of the orphans item:
// the names of the containers the project owns on the engine (current) or
// should own (target), sorted. The orphans item removes the containers
// owned but not named by the target. The project item also carries the
// walk's snapshot of the engine to the other items of the project.
type ProjectState struct {
	Project    string
	Containers []string
	snap       *snapshot
	locks      map[string]string // container name -> its update lock path
}

// Orphans returns the containers of current the target does not name,
// highest replica number first (the N of a name ending in "-N", as a
// scale-down removes them), then by name. The leftover of an interrupted
// recreate under the TempName of a container the target names is not an
// orphan: that container adopts or removes it.
func (s ProjectState) Orphans(target ProjectState) []string {
	var out []string
	for _, c := range s.Containers {
		if !slices.Contains(target.Containers, c) && !slices.ContainsFunc(target.Containers, func(t string) bool { return TempName(t) == c }) {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int {
		if na, nb := replicaNumber(a), replicaNumber(b); na != nb {
			return nb - na
		}
		return strings.Compare(a, b)
	})
	return out
}

// replicaNumber is the N of a container name ending in "-N" (N > 0), 0
// when it has none.
func replicaNumber(name string) int {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return 0
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || n <= 0 || name[i+1] == '+' {
		return 0
	}
	return n
}

// OrphansID is the ID of the orphans item of project name, which removes
// the owned containers the project no longer names (all of them when
// cleaning).
func OrphansID(name string) converge.ID { return converge.ID("docker-orphans:" + name) }

// projectItem reads the engine once per walk (its snapshot) and changes
// nothing.
type projectItem struct {
	p   *Project
	eng Engine
}

func (it *projectItem) ID() converge.ID { return ProjectID(it.p.Name) }

func (it *projectItem) StateCurrent(ctx context.Context, _ converge.DepStates) (ProjectState, error) {
	snap, err := takeSnapshot(ctx, it.eng, it.p)
	if err != nil {
		return ProjectState{}, err
	}
	return ProjectState{Project: it.p.Name, Containers: snap.owned(it.p.Name), snap: snap, locks: snap.locks()}, nil
}

func (it *projectItem) StateGoal(context.Context, converge.DepStates) (ProjectState, error) {
	return ProjectState{Project: it.p.Name}, nil
}

func (it *projectItem) StateClean(context.Context, converge.DepStates) (ProjectState, error) {
	return ProjectState{Project: it.p.Name}, nil
}

func (it *projectItem) Check(context.Context, ProjectState, ProjectState) (converge.Decision, error) {
	return converge.NotRequired(), nil
}

func (it *projectItem) Apply(_ context.Context, current, _ ProjectState) (ProjectState, error) {
	return current, nil
}

func (it *projectItem) ApplyDry(_ context.Context, current, _ ProjectState) (ProjectState, error) {
	return current, nil
}

// orphansItem removes owned containers the target does not name.
type orphansItem struct {
	p   *Project
	eng Engine
}

func (it *orphansItem) ID() converge.ID { return OrphansID(it.p.Name) }

func (it *orphansItem) key() string { return "orphans" }

// StateCurrent reads the project's snapshot, or (when cleaning, before the
// project item ran) lists the project's containers.
func (it *orphansItem) StateCurrent(ctx context.Context, deps converge.DepStates) (ProjectState, error) {
	if ps, err := converge.DepState[ProjectState](deps, ProjectID(it.p.Name)); err == nil && ps.snap.usable(it.key()) {
		return ProjectState{Project: it.p.Name, Containers: ps.Containers, snap: ps.snap, locks: ps.locks}, nil
	}
	list, err := listProjectContainers(ctx, it.eng, it.p.Name, nil)
	if err != nil {
		return ProjectState{}, err
	}
	snap := &snapshot{containers: list}
	return ProjectState{Project: it.p.Name, Containers: snap.owned(it.p.Name), locks: snap.locks()}, nil
}

// StateGoal names the project's containers, and the containers compose
// started under other names that the project's containers adopt (see
// ActionRename): those are not orphans.
func (it *orphansItem) StateGoal(_ context.Context, deps converge.DepStates) (ProjectState, error) {
	st := ProjectState{Project: it.p.Name}
	ps, _ := converge.DepState[ProjectState](deps, ProjectID(it.p.Name))
	for i := range it.p.Containers {
		s := &it.p.Containers[i]
		for _, r := range it.p.replicas(s) {
			st.Containers = append(st.Containers, r.name)
		}
		if rs := it.p.replicas(s); len(rs) > 0 && s.Name == "" {
			if n := ps.snap.adoptable(it.p.Name, s.Service, rs[0].name, s.Replicas != nil); n != "" {
				st.Containers = append(st.Containers, n)
			}
		}
	}
	sort.Strings(st.Containers)
	return st, nil
}

func (it *orphansItem) StateClean(context.Context, converge.DepStates) (ProjectState, error) {
	return ProjectState{Project: it.p.Name}, nil
}

func (it *orphansItem) Check(_ context.Context, current, target ProjectState) (converge.Decision, error) {
	if n := len(current.Orphans(target)); n > 0 {
		return converge.Required(n), nil
	}
	return converge.NotRequired(), nil
}

// Apply removes the orphans. One whose update lock is held stays, and
// the others are removed: the item then fails with its *LockError
// (joined, when several are locked), unless ctx is forced.
func (it *orphansItem) Apply(ctx context.Context, current, target ProjectState) (ProjectState, error) {
	current.snap.invalidate(it.key())
	orphans := current.Orphans(target)
	next := current
	next.Containers = slices.Clone(current.Containers)
	var locked []error
	for i, name := range orphans {
		err := checkLock(ctx, it.eng, name, current.locks[name], ActionRemove)
		if errors.Is(err, converge.ErrLocked) {
			locked = append(locked, err)
			continue
		}
		if err == nil {
			err = it.remove(ctx, current.snap, name)
		}
		if err != nil {
			return next, fmt.Errorf("docker: project %s: orphan container %s: %w", it.p.Name, name, err)
		}
		next.Containers = slices.DeleteFunc(next.Containers, func(c string) bool { return c == name })
		converge.ReportProgress(ctx, i+1, len(orphans))
	}
	return next, errors.Join(locked...)
}

// remove stops and removes the orphan name. A surplus replica of a
// service the project still runs (a scale-down) goes as compose stops a
// service's container: its pre_stop hooks first, while it runs, then a
// stop with the service's stop timeout. Other orphans are removed with
// the engine's default timeout.
func (it *orphansItem) remove(ctx context.Context, snap *snapshot, name string) error {
	spec, running := it.surplusOf(snap, name)
	if spec == nil {
		return removeContainer(ctx, it.eng, name, nil)
	}
	if running && len(spec.PreStop) > 0 {
		c := &Container{spec: *spec, name: name, eng: it.eng}
		if err := c.runHooks(ctx, name, "pre_stop", spec.PreStop); err != nil {
			return err
		}
	}
	return removeContainer(ctx, it.eng, name, spec.StopTimeout)
}

// surplusOf returns the spec of the service whose replica the
// orphan name is (by its service label in the walk's snapshot), and
// whether it runs; nil when it is no replica of a service of the project.
func (it *orphansItem) surplusOf(snap *snapshot, name string) (*ContainerSpec, bool) {
	if snap == nil {
		return nil, false
	}
	sum, ok := snap.containers[name]
	if !ok {
		return nil, false
	}
	svc := sum.Labels[LabelService]
	if svc == "" {
		svc = sum.Labels[LabelComposeService]
	}
	for i := range it.p.Containers {
		if s := &it.p.Containers[i]; s.Service == svc {
			return s, sum.State == container.StateRunning
		}
	}
	return nil, false
}

func (it *orphansItem) ApplyDry(_ context.Context, current, target ProjectState) (ProjectState, error) {
	next := current
	next.Containers = slices.DeleteFunc(slices.Clone(current.Containers), func(c string) bool {
		return slices.Contains(current.Orphans(target), c)
	})
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
			if t, ok := r.Target.(ProjectState); ok && r.ID == OrphansID(before.Project) {
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
