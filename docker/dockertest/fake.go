// Package dockertest provides an in-memory fake of the Docker engine calls
// used by package docker, for unit tests without an engine.
//
// The fake keeps containers, images, networks and volumes in memory,
// counts calls per endpoint, can fail write calls at random with a
// transient error, and publishes container events. It imports no testing
// package and its zero value is not usable: create it with New.
//
// Limits: containers run nothing. A started container stays running (and
// healthy when it has a healthcheck) until Kill, Exit or SetHealth say
// otherwise, or an OnStart hook decides; ports are not checked for
// conflicts; pulls succeed only for references registered with Pullable;
// a container's filesystem holds only the paths SetFile put there (per
// container: nothing is shared through volumes).
//
// For tests against a real engine, BuildAppImage builds a tiny test image
// locally (no registry needed), and a Bystander is a project named like
// one a user runs that the tests must leave alone: start it before them,
// check it after.
package dockertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/convergekit/converge/docker"
)

// Endpoint names, as counted by Calls.
const (
	ContainerList    = "ContainerList"
	ContainerInspect = "ContainerInspect"
	ContainerCreate  = "ContainerCreate"
	ContainerStart   = "ContainerStart"
	ContainerStop    = "ContainerStop"
	ContainerRemove  = "ContainerRemove"
	ContainerRename  = "ContainerRename"
	ContainerUnpause = "ContainerUnpause"
	ContainerLogs    = "ContainerLogs"
	// ContainerStatPath looks a path up in a container's filesystem.
	ContainerStatPath = "ContainerStatPath"
	ImageList         = "ImageList"
	ImagePull         = "ImagePull"
	ImageRemove       = "ImageRemove"
	// DistributionInspect asks the registry about a reference.
	DistributionInspect = "DistributionInspect"
	NetworkList         = "NetworkList"
	NetworkCreate       = "NetworkCreate"
	NetworkRemove       = "NetworkRemove"
	NetworkConnect      = "NetworkConnect"
	VolumeList          = "VolumeList"
	VolumeCreate        = "VolumeCreate"
	VolumeRemove        = "VolumeRemove"
	Events              = "Events"
)

// WriteEndpoints are the endpoints that change the engine.
var WriteEndpoints = []string{ContainerCreate, ContainerStart, ContainerStop, ContainerRemove, ContainerRename, ContainerUnpause,
	ImagePull, ImageRemove, NetworkCreate, NetworkRemove, NetworkConnect, VolumeCreate, VolumeRemove}

// ErrTransient is the error injected by FailWrites. It matches
// errdefs.ErrUnavailable.
var ErrTransient = fmt.Errorf("dockertest: injected transient failure: %w", errdefs.ErrUnavailable)

// Container is the fake's record of one container.
type Container struct {
	ID       string
	Name     string
	Config   container.Config
	Host     container.HostConfig
	Status   container.ContainerState
	ExitCode int
	Health   container.HealthStatus // "" when there is no healthcheck
	Networks map[string]*network.EndpointSettings
	ImageID  string
	// Log is what ContainerLogs returns (as standard output).
	Log string
	// Files are the paths ContainerStatPath finds in the container (see
	// SetFile); nil means none.
	Files map[string]bool
}

type img struct {
	id      string
	tags    []string
	digests []string // repository digests, of a pulled image
	size    int64
}

// Engine is the fake engine. It is safe for concurrent use.
type Engine struct {
	mu         sync.Mutex
	seq        int
	containers map[string]*Container // by ID
	images     map[string]*img       // by ID
	pullable   map[string][]int64    // ref -> layer sizes
	published  map[string]string     // ref -> the registry's manifest digest
	networks   map[string]network.Summary
	volumes    map[string]volume.Volume
	calls      map[string]int
	log        []string
	failP      float64
	rng        *rand.Rand
	subs       []*sub

	// OnStart, when set, decides what a start does: it returns the status
	// the container reaches ("running" or "exited") and its exit code.
	OnStart func(c *Container) (container.ContainerState, int)
}

type sub struct {
	ctx context.Context
	f   filters.Args
	ch  chan events.Message
}

// New returns an empty fake engine.
func New() *Engine {
	return &Engine{
		containers: map[string]*Container{},
		images:     map[string]*img{},
		pullable:   map[string][]int64{},
		published:  map[string]string{},
		networks: map[string]network.Summary{
			"bridge": {Name: "bridge", ID: "net-bridge", Driver: "bridge"},
		},
		volumes: map[string]volume.Volume{},
		calls:   map[string]int{},
	}
}

func (e *Engine) nextID(prefix string) string {
	e.seq++
	return fmt.Sprintf("%s%06d", prefix, e.seq)
}

func norm(ref string) string {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.FamiliarString(reference.TagNameOnly(n))
}

// AddImage makes ref present locally and returns its image ID.
func (e *Engine) AddImage(ref string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addImage(norm(ref))
}

func (e *Engine) addImage(ref string) string {
	for _, im := range e.images {
		im.tags = slices.DeleteFunc(im.tags, func(t string) bool { return t == ref })
	}
	id := "sha256:" + e.nextID("img")
	e.images[id] = &img{id: id, tags: []string{ref}}
	return id
}

// SetImageSize sets the size ImageList reports for the local image ref
// (a pulled image's size is the sum of its layers).
func (e *Engine) SetImageSize(ref string, size int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, im := range e.images {
		if slices.Contains(im.tags, norm(ref)) {
			im.size = size
		}
	}
}

// Images returns the tags of every local image, sorted; an untagged image
// is listed by its ID.
func (e *Engine) Images() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, im := range e.images {
		if len(im.tags) == 0 {
			out = append(out, im.id)
		}
		out = append(out, im.tags...)
	}
	sort.Strings(out)
	return out
}

// Pullable lets ImagePull fetch ref, streaming progress for layers of the
// given sizes. Each call publishes a new version of ref, as a push to the
// registry would: DistributionInspect reports a new manifest digest, and
// the next pull makes a new image with that repository digest.
func (e *Engine) Pullable(ref string, layers ...int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pullable[norm(ref)] = layers
	e.published[norm(ref)] = "sha256:" + e.nextID("manifest")
}

// FailWrites makes every write call fail with probability p, before it
// takes effect, with ErrTransient; seed makes the sequence reproducible.
func (e *Engine) FailWrites(p float64, seed uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failP = p
	e.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Calls returns the number of calls per endpoint since New or ResetCalls.
func (e *Engine) Calls() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.calls)
}

// TotalCalls returns the number of calls to all endpoints but Events.
func (e *Engine) TotalCalls() int {
	n := 0
	for k, v := range e.Calls() {
		if k != Events {
			n += v
		}
	}
	return n
}

// WriteCalls returns the number of calls to write endpoints (including
// those that failed).
func (e *Engine) WriteCalls() int {
	c := e.Calls()
	n := 0
	for _, w := range WriteEndpoints {
		n += c[w]
	}
	return n
}

// Log returns the endpoints called since New or ResetCalls, in order
// (Events subscriptions excluded).
func (e *Engine) Log() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

// ResetCalls sets every call count to zero and empties the log.
func (e *Engine) ResetCalls() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.calls)
	e.log = nil
}

// Containers returns a copy of every container, sorted by name.
func (e *Engine) Containers() []Container {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Container
	for _, c := range e.containers {
		cp := *c
		cp.Networks = maps.Clone(c.Networks)
		cp.Files = maps.Clone(c.Files)
		out = append(out, cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Container returns a copy of the container with the given name or ID.
func (e *Engine) Container(nameOrID string) (Container, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.find(nameOrID)
	if c == nil {
		return Container{}, false
	}
	cp := *c
	cp.Files = maps.Clone(c.Files)
	return cp, true
}

// NetworkNames and VolumeNames list what exists, sorted.
func (e *Engine) NetworkNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.networks))
}

// VolumeNames lists the volumes, sorted.
func (e *Engine) VolumeNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.volumes))
}

// Kill makes a running container exit with code 137, as docker kill does.
func (e *Engine) Kill(name string) { e.Exit(name, 137) }

// Exit makes a container exit with code.
func (e *Engine) Exit(name string, code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.find(name); c != nil {
		c.Status, c.ExitCode = "exited", code
		e.publish(c, "die")
	}
}

// SetHealth sets the health status of a container.
func (e *Engine) SetHealth(name string, h container.HealthStatus) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.find(name); c != nil {
		c.Health = h
	}
}

// Pause pauses a running container, as docker pause does.
func (e *Engine) Pause(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.find(name); c != nil && c.Status == "running" {
		c.Status = "paused"
		e.publish(c, "pause")
	}
}

// Tamper changes a container behind the project's back: f may edit it.
func (e *Engine) Tamper(name string, f func(c *Container)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.find(name); c != nil {
		f(c)
	}
}

// SetFile makes path exist (present true) or not in the filesystem of the
// container with the given name or ID, as an application writing or
// removing a file would: ContainerStatPath finds it. It is how tests hold
// and release an update lock (docker.ContainerSpec.UpdateLock).
func (e *Engine) SetFile(nameOrID, path string, present bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.find(nameOrID); c != nil {
		if c.Files == nil {
			c.Files = map[string]bool{}
		}
		if present {
			c.Files[path] = true
		} else {
			delete(c.Files, path)
		}
	}
}

// call counts a call and, for a write, maybe fails it.
func (e *Engine) call(ctx context.Context, name string, write bool) error {
	e.calls[name]++
	e.log = append(e.log, name)
	if err := ctx.Err(); err != nil {
		return err
	}
	if write && e.failP > 0 && e.rng.Float64() < e.failP {
		return fmt.Errorf("%s: %w", name, ErrTransient)
	}
	return nil
}

func (e *Engine) find(nameOrID string) *Container {
	nameOrID = strings.TrimPrefix(nameOrID, "/")
	if c, ok := e.containers[nameOrID]; ok {
		return c
	}
	for _, c := range e.containers {
		if c.Name == nameOrID {
			return c
		}
	}
	return nil
}

func notFound(what, name string) error {
	return fmt.Errorf("No such %s: %s: %w", what, name, errdefs.ErrNotFound)
}

func conflict(format string, a ...any) error {
	return fmt.Errorf(format+": %w", append(a, errdefs.ErrConflict)...)
}

func (e *Engine) status(c *Container) string {
	switch c.Status {
	case "running":
		s := "Up 1 second"
		switch c.Health {
		case container.Healthy:
			s += " (healthy)"
		case container.Unhealthy:
			s += " (unhealthy)"
		case container.Starting:
			s += " (health: starting)"
		}
		return s
	case "paused":
		return "Up 1 second (Paused)"
	case "exited":
		return fmt.Sprintf("Exited (%d) 1 second ago", c.ExitCode)
	}
	return "Created"
}

func (e *Engine) imageRef(c *Container) string { return c.Config.Image }

func (e *Engine) matches(c *Container, f filters.Args) bool {
	if f.Contains("label") && !f.MatchKVList("label", c.Config.Labels) {
		return false
	}
	if f.Contains("name") && !f.Match("name", c.Name) {
		return false
	}
	if f.Contains("ancestor") {
		ok := false
		for _, a := range f.Get("ancestor") {
			if norm(a) == norm(c.Config.Image) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// ContainerList implements docker.Engine.
func (e *Engine) ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ContainerList, false); err != nil {
		return nil, err
	}
	var out []container.Summary
	for _, c := range e.containers {
		if !opts.All && c.Status != "running" {
			continue
		}
		if !e.matches(c, opts.Filters) {
			continue
		}
		s := container.Summary{ID: c.ID, Names: []string{"/" + c.Name}, Image: e.imageRef(c), ImageID: c.ImageID,
			Labels: maps.Clone(c.Config.Labels), State: c.Status, Status: e.status(c),
			NetworkSettings: &container.NetworkSettingsSummary{Networks: map[string]*network.EndpointSettings{}}}
		for n, ep := range c.Networks {
			cp := *ep
			s.NetworkSettings.Networks[n] = &cp
		}
		for _, m := range c.Host.Mounts {
			mp := container.MountPoint{Type: m.Type, Source: m.Source, Destination: m.Target, RW: !m.ReadOnly}
			if m.Type == "volume" {
				mp.Name = m.Source
			}
			s.Mounts = append(s.Mounts, mp)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Names[0] < out[j].Names[0] })
	return out, nil
}

// ContainerInspect implements docker.Engine.
func (e *Engine) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ContainerInspect, false); err != nil {
		return container.InspectResponse{}, err
	}
	c := e.find(id)
	if c == nil {
		return container.InspectResponse{}, notFound("container", id)
	}
	cfg := c.Config
	cfg.Labels = maps.Clone(c.Config.Labels)
	host := c.Host
	st := &container.State{Status: c.Status, Running: c.Status == "running" || c.Status == "paused",
		Paused: c.Status == "paused", ExitCode: c.ExitCode}
	if c.Health != "" {
		st.Health = &container.Health{Status: c.Health}
	}
	nets := map[string]*network.EndpointSettings{}
	for n, ep := range c.Networks {
		cp := *ep
		nets[n] = &cp
	}
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: c.ID, Name: "/" + c.Name, State: st, Image: c.ImageID, HostConfig: &host},
		Config:            &cfg,
		NetworkSettings:   &container.NetworkSettings{Networks: nets},
	}, nil
}

// ContainerCreate implements docker.Engine.
func (e *Engine) ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig, nc *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ContainerCreate, true); err != nil {
		return container.CreateResponse{}, err
	}
	if name != "" && e.find(name) != nil {
		return container.CreateResponse{}, conflict("container name %q is already in use", name)
	}
	imageID := ""
	for _, im := range e.images {
		if slices.Contains(im.tags, norm(cfg.Image)) {
			imageID = im.id
		}
	}
	if imageID == "" {
		return container.CreateResponse{}, notFound("image", cfg.Image)
	}
	c := &Container{ID: e.nextID("c"), Name: name, Config: *cfg, ImageID: imageID, Status: "created",
		Networks: map[string]*network.EndpointSettings{}}
	c.Config.Labels = maps.Clone(cfg.Labels)
	if host != nil {
		c.Host = *host
	}
	if c.Name == "" {
		c.Name = "auto_" + c.ID
	}
	mode := string(c.Host.NetworkMode)
	if mode == "" || mode == "default" {
		mode = "bridge"
	}
	if _, ok := e.networks[mode]; !ok {
		return container.CreateResponse{}, notFound("network", mode)
	}
	ep := &network.EndpointSettings{NetworkID: e.networks[mode].ID}
	if nc != nil && nc.EndpointsConfig[mode] != nil {
		ep.Aliases = slices.Clone(nc.EndpointsConfig[mode].Aliases)
	}
	c.Networks[mode] = ep
	for _, m := range c.Host.Mounts {
		if m.Type == "volume" {
			if _, ok := e.volumes[m.Source]; !ok {
				e.volumes[m.Source] = volume.Volume{Name: m.Source, Driver: "local"}
			}
		}
	}
	e.containers[c.ID] = c
	e.publish(c, "create")
	return container.CreateResponse{ID: c.ID}, nil
}

// ContainerStart implements docker.Engine.
func (e *Engine) ContainerStart(ctx context.Context, id string, _ container.StartOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ContainerStart, true); err != nil {
		return err
	}
	c := e.find(id)
	if c == nil {
		return notFound("container", id)
	}
	for n := range c.Networks {
		if _, ok := e.networks[n]; !ok {
			return notFound("network", n)
		}
	}
	c.Status, c.ExitCode = "running", 0
	if c.Config.Healthcheck != nil && len(c.Config.Healthcheck.Test) > 0 && c.Config.Healthcheck.Test[0] != "NONE" {
		c.Health = container.Healthy
	}
	if e.OnStart != nil {
		c.Status, c.ExitCode = e.OnStart(c)
	}
	e.publish(c, "start")
	return nil
}

// ContainerStop implements docker.Engine.
func (e *Engine) ContainerStop(ctx context.Context, id string, _ container.StopOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ContainerStop, true); err != nil {
		return err
	}
	c := e.find(id)
	if c == nil {
		return notFound("container", id)
	}
	if c.Status == "running" {
		c.Status, c.ExitCode = "exited", 0
		e.publish(c, "die")
	}
	return nil
}

// ContainerRemove implements docker.Engine.
func (e *Engine) ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ContainerRemove, true); err != nil {
		return err
	}
	c := e.find(id)
	if c == nil {
		return notFound("container", id)
	}
	if c.Status == "running" && !opts.Force {
		return conflict("container %s is running", c.Name)
	}
	delete(e.containers, c.ID)
	e.publish(c, "destroy")
	return nil
}

// ContainerRename implements docker.Engine.
func (e *Engine) ContainerRename(ctx context.Context, id, newName string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ContainerRename, true); err != nil {
		return err
	}
	c := e.find(id)
	if c == nil {
		return notFound("container", id)
	}
	if o := e.find(newName); o != nil && o != c {
		return conflict("container name %q is already in use", newName)
	}
	c.Name = strings.TrimPrefix(newName, "/")
	e.publish(c, "rename")
	return nil
}

// ContainerUnpause implements docker.Engine.
func (e *Engine) ContainerUnpause(ctx context.Context, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ContainerUnpause, true); err != nil {
		return err
	}
	c := e.find(id)
	if c == nil {
		return notFound("container", id)
	}
	if c.Status != "paused" {
		return conflict("container %s is not paused", c.Name)
	}
	c.Status = "running"
	e.publish(c, "unpause")
	return nil
}

// ContainerLogs implements docker.Engine: it returns the container's Log as
// standard output, in the engine's multiplexed format, honouring Tail.
func (e *Engine) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ContainerLogs, false); err != nil {
		return nil, err
	}
	c := e.find(id)
	if c == nil {
		return nil, notFound("container", id)
	}
	lines := strings.SplitAfter(c.Log, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if n, err := strconv.Atoi(opts.Tail); err == nil && n >= 0 && n < len(lines) {
		lines = lines[len(lines)-n:]
	}
	var buf bytes.Buffer
	_, _ = stdcopy.NewStdWriter(&buf, stdcopy.Stdout).Write([]byte(strings.Join(lines, "")))
	return io.NopCloser(&buf), nil
}

// ContainerStatPath implements docker.Engine: a path set with SetFile is
// found (as a regular file); any other is not found, as is a container
// that does not exist.
func (e *Engine) ContainerStatPath(ctx context.Context, id, path string) (container.PathStat, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ContainerStatPath, false); err != nil {
		return container.PathStat{}, err
	}
	c := e.find(id)
	if c == nil {
		return container.PathStat{}, notFound("container", id)
	}
	if !c.Files[path] {
		return container.PathStat{}, fmt.Errorf("Could not find the file %s in container %s: %w", path, c.Name, errdefs.ErrNotFound)
	}
	return container.PathStat{Name: path[strings.LastIndexByte(path, '/')+1:], Mode: 0o644}, nil
}

// DistributionInspect implements docker.Engine: references registered with
// Pullable exist in the registry, others do not.
func (e *Engine) DistributionInspect(ctx context.Context, ref, _ string) (registry.DistributionInspect, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, DistributionInspect, false); err != nil {
		return registry.DistributionInspect{}, err
	}
	d, ok := e.published[norm(ref)]
	if !ok {
		return registry.DistributionInspect{}, fmt.Errorf("manifest for %s: %w", ref, errdefs.ErrNotFound)
	}
	return registry.DistributionInspect{Descriptor: ocispec.Descriptor{Digest: digest.Digest(d)}}, nil
}

// ImageList implements docker.Engine.
func (e *Engine) ImageList(ctx context.Context, opts image.ListOptions) ([]image.Summary, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ImageList, false); err != nil {
		return nil, err
	}
	refs := opts.Filters.Get("reference")
	var out []image.Summary
	for _, im := range e.images {
		if len(im.tags) == 0 {
			continue
		}
		ok := len(refs) == 0
		for _, r := range refs {
			if slices.Contains(im.tags, norm(r)) {
				ok = true
			}
		}
		if ok {
			out = append(out, image.Summary{ID: im.id, RepoTags: slices.Clone(im.tags), RepoDigests: slices.Clone(im.digests), Size: im.size})
		}
	}
	return out, nil
}

// ImagePull implements docker.Engine: it streams progress for the layers
// registered with Pullable and then tags a new image.
func (e *Engine) ImagePull(ctx context.Context, ref string, _ image.PullOptions) (io.ReadCloser, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ImagePull, true); err != nil {
		return nil, err
	}
	layers, ok := e.pullable[norm(ref)]
	if !ok {
		return nil, fmt.Errorf("pull access denied for %s: %w", ref, errdefs.ErrNotFound)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i, size := range layers {
		id := fmt.Sprintf("layer%d", i)
		for _, cur := range []int64{size / 2, size} {
			_ = enc.Encode(map[string]any{"status": "Downloading", "id": id,
				"progressDetail": map[string]int64{"current": cur, "total": size}})
		}
	}
	_ = enc.Encode(map[string]any{"status": "Status: Downloaded newer image for " + ref})
	n := norm(ref)
	repo := n
	if i := strings.LastIndexByte(n, ':'); i > strings.LastIndexByte(n, '/') {
		repo = n[:i]
	}
	rd := repo + "@" + e.published[n]
	for _, im := range e.images {
		if slices.Contains(im.digests, rd) { // up to date: the tag points to it
			for _, o := range e.images {
				o.tags = slices.DeleteFunc(o.tags, func(t string) bool { return t == n })
			}
			im.tags = append(im.tags, n)
			return io.NopCloser(&buf), nil
		}
	}
	id := e.addImage(n)
	e.images[id].digests = []string{rd}
	for _, l := range layers {
		e.images[id].size += l
	}
	return io.NopCloser(&buf), nil
}

// ImageRemove implements docker.Engine.
func (e *Engine) ImageRemove(ctx context.Context, ref string, _ image.RemoveOptions) ([]image.DeleteResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, ImageRemove, true); err != nil {
		return nil, err
	}
	for id, im := range e.images {
		if slices.Contains(im.tags, norm(ref)) || id == ref {
			for _, c := range e.containers {
				if c.ImageID == id {
					return nil, conflict("image %s is used by container %s", ref, c.Name)
				}
			}
			delete(e.images, id)
			return []image.DeleteResponse{{Deleted: id}}, nil
		}
	}
	return nil, notFound("image", ref)
}

// NetworkList implements docker.Engine.
func (e *Engine) NetworkList(ctx context.Context, opts network.ListOptions) ([]network.Summary, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, NetworkList, false); err != nil {
		return nil, err
	}
	var out []network.Summary
	for _, n := range e.networks {
		if opts.Filters.Contains("name") && !opts.Filters.Match("name", n.Name) {
			continue
		}
		if opts.Filters.Contains("label") && !opts.Filters.MatchKVList("label", n.Labels) {
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

// NetworkCreate implements docker.Engine.
func (e *Engine) NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, NetworkCreate, true); err != nil {
		return network.CreateResponse{}, err
	}
	if _, ok := e.networks[name]; ok {
		return network.CreateResponse{}, conflict("network with name %s already exists", name)
	}
	id := e.nextID("net")
	e.networks[name] = network.Summary{Name: name, ID: id, Driver: opts.Driver, Internal: opts.Internal, Labels: maps.Clone(opts.Labels)}
	return network.CreateResponse{ID: id}, nil
}

// NetworkRemove implements docker.Engine.
func (e *Engine) NetworkRemove(ctx context.Context, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, NetworkRemove, true); err != nil {
		return err
	}
	for name, n := range e.networks {
		if n.ID == id || name == id {
			for _, c := range e.containers {
				if _, ok := c.Networks[name]; ok && c.Status == "running" {
					return conflict("network %s has active endpoints", name)
				}
			}
			delete(e.networks, name)
			return nil
		}
	}
	return notFound("network", id)
}

// NetworkConnect implements docker.Engine.
func (e *Engine) NetworkConnect(ctx context.Context, netID, id string, cfg *network.EndpointSettings) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, NetworkConnect, true); err != nil {
		return err
	}
	c := e.find(id)
	if c == nil {
		return notFound("container", id)
	}
	n, ok := e.networks[netID]
	if !ok {
		return notFound("network", netID)
	}
	ep := &network.EndpointSettings{NetworkID: n.ID}
	if cfg != nil {
		ep.Aliases = slices.Clone(cfg.Aliases)
	}
	c.Networks[netID] = ep
	return nil
}

// VolumeList implements docker.Engine.
func (e *Engine) VolumeList(ctx context.Context, opts volume.ListOptions) (volume.ListResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, VolumeList, false); err != nil {
		return volume.ListResponse{}, err
	}
	var out volume.ListResponse
	for _, v := range e.volumes {
		if opts.Filters.Contains("name") && !opts.Filters.Match("name", v.Name) {
			continue
		}
		if opts.Filters.Contains("label") && !opts.Filters.MatchKVList("label", v.Labels) {
			continue
		}
		cp := v
		out.Volumes = append(out.Volumes, &cp)
	}
	return out, nil
}

// VolumeCreate implements docker.Engine.
func (e *Engine) VolumeCreate(ctx context.Context, opts volume.CreateOptions) (volume.Volume, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, VolumeCreate, true); err != nil {
		return volume.Volume{}, err
	}
	if v, ok := e.volumes[opts.Name]; ok {
		return v, nil // the engine returns the existing volume
	}
	v := volume.Volume{Name: opts.Name, Driver: opts.Driver, Labels: maps.Clone(opts.Labels)}
	e.volumes[opts.Name] = v
	return v, nil
}

// VolumeRemove implements docker.Engine.
func (e *Engine) VolumeRemove(ctx context.Context, name string, _ bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(ctx, VolumeRemove, true); err != nil {
		return err
	}
	if _, ok := e.volumes[name]; !ok {
		return notFound("volume", name)
	}
	for _, c := range e.containers {
		for _, m := range c.Host.Mounts {
			if m.Type == "volume" && m.Source == name {
				return conflict("volume %s is in use", name)
			}
		}
	}
	delete(e.volumes, name)
	return nil
}

// Events implements docker.Engine: container events matching the filters
// (type, label, event) are delivered until ctx is cancelled. A slow reader
// loses events rather than blocking the engine.
func (e *Engine) Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls[Events]++
	s := &sub{ctx: ctx, f: opts.Filters, ch: make(chan events.Message, 64)}
	e.subs = append(e.subs, s)
	errs := make(chan error, 1)
	go func() {
		<-ctx.Done()
		e.mu.Lock()
		e.subs = slices.DeleteFunc(e.subs, func(x *sub) bool { return x == s })
		e.mu.Unlock()
		errs <- ctx.Err()
	}()
	return s.ch, errs
}

func (e *Engine) publish(c *Container, action string) {
	m := events.Message{Type: events.ContainerEventType, Action: events.Action(action),
		Actor: events.Actor{ID: c.ID, Attributes: map[string]string{"name": c.Name}}, Time: time.Now().Unix()}
	for k, v := range c.Config.Labels {
		m.Actor.Attributes[k] = v
	}
	for _, s := range e.subs {
		if s.f.Contains("type") && !s.f.ExactMatch("type", string(m.Type)) {
			continue
		}
		if s.f.Contains("event") && !s.f.ExactMatch("event", action) {
			continue
		}
		if s.f.Contains("label") && !s.f.MatchKVList("label", c.Config.Labels) {
			continue
		}
		select {
		case s.ch <- m:
		default:
		}
	}
}

var _ docker.Engine = (*Engine)(nil)
