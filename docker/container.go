package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"

	"github.com/convergekit/converge"
)

// Container is the item of one container of a project (see Project.Graph).
// Its state is a ContainerState; it is compared through our labels, so a
// converged container costs no engine call of its own when the project
// item's snapshot is available.
type Container struct {
	spec      ContainerSpec
	name      string
	id        converge.ID // ContainerID, or a ReplicaID
	number    int         // the replica's number, from 1
	project   string
	eng       Engine
	projectID converge.ID
	imageID   converge.ID
	waits     []wait
	poll      time.Duration
	red       redactor
	hashKey   []byte // keys the spec hashes (Project.HashKey)
	space     *space // the engine's free space, for ImageSize
	// bringing is set by Apply before it creates a container whose image
	// the package brought (LabelImageBrought).
	bringing bool
	// composeDir and composeFiles are the project's ComposeDir and its
	// ComposeFiles, comma-separated, for compose's labels.
	composeDir, composeFiles string
	// netContainer is the engine name of the container whose network
	// namespace a "service:NAME" NetworkMode shares, and netID its item.
	netContainer string
	netID        converge.ID
	// serviceDeps are the items of the other services' containers this
	// one depends on, waits for or shares something with.
	serviceDeps []converge.ID
	// links are the engine's "container:alias" of the spec's Links.
	links []string
	// volumesFrom are the engine's "container[:mode]" of VolumesFrom.
	volumesFrom []string
	// shared maps the "service:NAME" of IPC and PID to NAME's engine
	// container name.
	shared map[string]string
}

// restartingContainer is a Container with a dependency that restarts it
// (Dependency.Restart).
type restartingContainer struct{ *Container }

// Refresh restarts the running container when the container of a
// dependency with Restart changed in the walk; other changes need nothing.
// A container that shares the IPC or PID namespace of that dependency
// (service:NAME) is recreated instead, as the engine holds the old
// container's ID: the namespace it named is gone.
func (r *restartingContainer) Refresh(ctx context.Context, current ContainerState, changed []converge.ID) (ContainerState, error) {
	due, recreate := false, false
	for _, d := range r.spec.DependsOn {
		if d.Restart && slices.ContainsFunc(changed, func(id converge.ID) bool { return isServiceItem(id, r.project, d.Service) }) {
			due = true
			recreate = recreate || r.spec.IPC == ServiceNetworkPrefix+d.Service || r.spec.PID == ServiceNetworkPrefix+d.Service
		}
	}
	if !due || !current.Exists || current.Status != string(container.StateRunning) || r.spec.Run != Running {
		return current, nil
	}
	if err := r.preStop(ctx, current); err != nil {
		return current, err
	}
	if !recreate {
		if err := r.stop(ctx, r.name); err != nil {
			return current, err
		}
		return current, r.start(ctx, r.name, nil)
	}
	anon, err := r.anonymousVolumes(ctx, current.ID)
	if err != nil {
		return current, err
	}
	if err := removeContainer(ctx, r.eng, current.ID, r.spec.StopTimeout); err != nil {
		return current, err
	}
	if err := r.create(ctx, r.name, anon, current.ImageID); err != nil {
		return ContainerState{Name: r.name}, err
	}
	if err := r.start(ctx, r.name, nil); err != nil {
		return current, err
	}
	return r.StateCurrent(ctx, nil)
}

type wait struct {
	name string // engine name of the dependency
	dep  Dependency
	red  redactor // the dependency's secrets
}

// DependencyError says which depends_on condition of a container was not
// met. It matches ErrDependencyTimeout or ErrDependencyFailed.
type DependencyError struct {
	// Container is the engine name of the container that waited.
	Container string
	// Dependency is the engine name of the container waited for, and
	// Service its service.
	Dependency string
	Service    string
	Condition  Condition
	Err        error
	// Status and Health are the dependency's engine state and health
	// status ("starting", "healthy", "unhealthy"; "" without a
	// healthcheck) as read by the inspect that ended the wait, the read
	// the message describes; both "" when the dependency could not be
	// read.
	Status, Health string
	// Log is the tail of the dependency's log (see ContainerError.Log), ""
	// when it could not be read.
	Log string
}

// Error describes the problem, naming its culprit: the container that
// waited, the service it waited for and the condition, then the tail of
// the dependency's log.
func (e *DependencyError) Error() string {
	return withLog(fmt.Sprintf("docker: container %s: dependency %s (%s): %s", e.Container, e.Service, e.Condition, reason(e.Err)), e.Log)
}

// Unwrap returns the cause.
func (e *DependencyError) Unwrap() error { return e.Err }

// ErrContainerFailed means a container exited or turned unhealthy right
// after the walk started it. It is matched by *ContainerError.
var ErrContainerFailed = errors.New("docker: container failed")

// ContainerError is a container that failed right after the walk started
// it: it exited (or, run Once, exited non-zero) or turned unhealthy. It
// carries the tail of the container's log.
type ContainerError struct {
	Container string
	Service   string
	// Status is the engine state ("exited", "dead", "running"), ExitCode
	// the exit code of an exited container, Health its health status.
	Status   string
	ExitCode int
	Health   string
	// Log is at most the last LogTailLines lines and LogTailBytes bytes of
	// the container's output, secret values redacted.
	Log string

	// state is the container's state as the read that found the failure
	// saw it: the After state of the failed Apply.
	state *ContainerState
}

// ID returns ContainerID(project, service), or the ReplicaID of a
// replica of a service with Replicas set.
func (c *Container) ID() converge.ID { return c.id }

// StateCurrent reads the container from the project's snapshot when this
// walk has one and the container has not been written since; otherwise it
// inspects the container and records drift of user-specified fields. Either
// way it also looks for the leftover of an interrupted recreate under
// TempName. Right after an Apply of this walk that ended by starting the
// container, it returns what the early-exit watch's inspect read (one poll
// interval after the start, after the Apply's last write, when no leftover
// is left): the walk's verification costs no engine call of its own.
func (c *Container) StateCurrent(ctx context.Context, deps converge.DepStates) (ContainerState, error) {
	ps, perr := converge.DepState[ProjectState](deps, c.projectID)
	if perr == nil {
		if st, ok := takeObserved[ContainerState](ps.snap, c.key()); ok {
			return st, nil
		}
	}
	if perr == nil && ps.snap.usable(c.key()) {
		st := ContainerState{Name: c.name}
		if s, ok := ps.snap.containers[c.name]; ok {
			st = stateFromSummary(s)
		} else if n := ps.snap.adoptable(c.project, c.spec.Service, c.name, c.spec.Replicas != nil); n != "" && c.spec.Name == "" && c.number == 1 {
			st = stateFromSummary(ps.snap.containers[n]) // started by compose under its name
		}
		if s, ok := ps.snap.containers[TempName(c.name)]; ok && s.Labels[LabelOwner] == OwnerValue {
			st.Leftover = Leftover{ID: s.ID, SpecHash: s.Labels[LabelSpecHash]}
		}
		st.snap = ps.snap
		return st, nil
	}
	st := ContainerState{Name: c.name}
	r, err := c.eng.ContainerInspect(ctx, c.name)
	switch {
	case err == nil:
		st = stateFromInspect(r, &c.spec)
	case !errdefs.IsNotFound(err):
		return ContainerState{}, c.red.err(fmt.Errorf("docker: container %s: inspect: %w", c.name, err))
	}
	r, err = c.eng.ContainerInspect(ctx, TempName(c.name))
	switch {
	case err == nil:
		if r.ContainerJSONBase != nil && r.Config != nil && r.Config.Labels[LabelOwner] == OwnerValue &&
			r.Config.Labels[LabelProject] == c.project {
			st.Leftover = Leftover{ID: r.ID, SpecHash: r.Config.Labels[LabelSpecHash]}
		}
	case !errdefs.IsNotFound(err):
		return ContainerState{}, c.red.err(fmt.Errorf("docker: container %s: inspect leftover: %w", c.name, err))
	}
	return st, nil
}

func (c *Container) key() string { return "container:" + c.name }

// StateGoal is the container created from the spec, in its run mode, on
// the image ID its image item reached (when it has one): a container on
// another image ID (the tag moved) is recreated, as is one on an image the
// registry no longer serves under its tag (PullAlways).
func (c *Container) StateGoal(_ context.Context, deps converge.DepStates) (ContainerState, error) {
	f := c.spec.fields(c.hashKey)
	st := ContainerState{Name: c.name, Exists: true, Image: c.spec.Image, SpecHash: hashFields(c.hashKey, f), Fields: f, Run: c.spec.Run,
		UpdateLock: c.spec.UpdateLock, composeHash: c.spec.ComposeHash}
	for _, n := range c.spec.Networks {
		st.Networks = append(st.Networks, n.Name)
	}
	sort.Strings(st.Networks)
	st.Networks = slices.Compact(st.Networks)
	if c.netID != "" {
		// A container sharing the namespace of another is recreated with
		// it, as Compose does (depends_on restart): the old namespace is
		// gone.
		ds, err := converge.DepState[ContainerState](deps, c.netID)
		switch {
		case err != nil || !ds.Exists:
		case ds.ID != "":
			st.netNS = "container:" + ds.ID
		default: // created in this walk: its old container's namespace is gone
			if ps, err := converge.DepState[ProjectState](deps, c.projectID); err == nil && ps.snap != nil {
				if old, ok := ps.snap.containers[c.netContainer]; ok {
					st.staleNetNS = "container:" + old.ID
				}
			}
		}
	}
	st.update = c.spec.Update
	is, ierr := converge.DepState[ImageState](deps, c.imageID)
	if st.update == AutoUpdate {
		st.update = DownloadThenKill
		if ierr == nil && is.short {
			st.update = DeleteThenDownload
		}
	}
	if ierr == nil {
		st.brought = is.brought || is.buildKey != ""
		switch { // a newer image is (or will be) pulled: leave the present one
		case is.Outdated:
			st.staleImage = is.ID
		case is.replaces != "":
			st.staleImage = is.replaces
		default:
			st.ImageID = is.ID
		}
	}
	return st, nil
}

// StateClean is the container removed.
func (c *Container) StateClean(context.Context, converge.DepStates) (ContainerState, error) {
	return ContainerState{Name: c.name}, nil
}

// Check follows PlanFor: any action other than none is required, so a
// paused container that should run, or a leftover of an interrupted
// recreate, is not converged.
func (c *Container) Check(_ context.Context, current, target ContainerState) (converge.Decision, error) {
	if PlanFor(current, target).Action == ActionNone {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}

// Apply carries out the plan: create, recreate (create under TempName,
// stop, remove, rename, start; for KillThenDownload stop, remove, pull,
// create, start; for DeleteThenDownload stop, remove, remove the old image,
// pull, create, start; for HandOver create under TempName, start, wait
// for the hand-over, stop and remove the old, rename), adopt a leftover of an interrupted recreate, start,
// unpause, stop or remove. Before a recreate, stop or remove of a
// container with an update lock (current.UpdateLock) it looks the lock
// file up, and while it exists fails with a *LockError, changing nothing,
// unless ctx is forced (converge.Forced). It waits for the depends_on
// conditions before starting anything, and watches a container it started
// for one poll interval: one that exits (or turns unhealthy) in that time
// fails with a *ContainerError carrying the tail of its log.
func (c *Container) Apply(ctx context.Context, current, target ContainerState) (ContainerState, error) {
	current.snap.invalidate(c.key())
	plan := PlanFor(current, target)
	if err := c.apply(ctx, plan, current, target); err != nil {
		switch {
		case described(err): // names its own culprit
		case plan.Action == ActionRecreate:
			err = fmt.Errorf("docker: container %s: recreate: %w", c.name, err)
		default: // the failed step names the action
			err = fmt.Errorf("docker: container %s: %w", c.name, err)
		}
		after := current
		if ce := (*ContainerError)(nil); errors.As(err, &ce) && ce.state != nil {
			// The read that found the failure is the state the report
			// shows with it, so both say the same (unhealthy, exited).
			after = *ce.state
		}
		return after, c.red.err(err)
	}
	return simulate(current, target, plan), nil
}

// ApplyDry returns the state Apply would reach, calling no engine endpoint.
func (c *Container) ApplyDry(_ context.Context, current, target ContainerState) (ContainerState, error) {
	return simulate(current, target, PlanFor(current, target)), nil
}

func simulate(current, target ContainerState, plan Plan) ContainerState {
	switch plan.Action {
	case ActionNone:
		return current
	case ActionRemove:
		if plan.Container != current.Name { // the leftover only
			next := current
			next.Leftover = Leftover{}
			return next
		}
		return ContainerState{Name: current.Name}
	case ActionStop:
		next := current
		next.Status, next.Paused = "exited", false
		return next
	case ActionStart, ActionUnpause:
		next := current
		next.Status, next.ExitCode, next.Paused = "running", 0, false
		next.Leftover = Leftover{}
		return next
	case ActionRename:
		next := current
		next.Name = target.Name
		if renameStarts(current, target) {
			next.Status, next.ExitCode = "running", 0
		}
		return next
	}
	next := target
	next.Status = "running"
	if target.Run == Stopped {
		next.Status = "created"
	}
	next.Run = 0
	return next
}

func (c *Container) apply(ctx context.Context, plan Plan, current, target ContainerState) error {
	switch {
	case !current.Exists:
	case plan.Action == ActionRecreate, plan.Action == ActionStop, plan.Action == ActionRemove && plan.Container == c.name:
		if err := checkLock(ctx, c.eng, c.name, current.UpdateLock, plan.Action); err != nil {
			return err
		}
	}
	left := current.Leftover
	adoptable := left.ID != "" && (plan.Action == ActionAdopt || plan.Action == ActionRecreate) &&
		left.SpecHash == hashFields(c.hashKey, c.spec.fields(c.hashKey))
	if left.ID != "" && !adoptable {
		if err := removeContainer(ctx, c.eng, left.ID, c.spec.StopTimeout); err != nil {
			return fmt.Errorf("leftover %s: %w", TempName(c.name), err)
		}
	}
	switch plan.Action {
	case ActionNone:
		return nil
	case ActionRemove:
		if plan.Container != c.name || !current.Exists { // the leftover only, removed above
			return nil
		}
		if err := c.preStop(ctx, current); err != nil {
			return err
		}
		return removeContainer(ctx, c.eng, c.name, c.spec.StopTimeout)
	case ActionStop:
		if current.Paused {
			if err := c.unpause(ctx); err != nil {
				return err
			}
		}
		if err := c.preStop(ctx, current); err != nil {
			return err
		}
		return c.stop(ctx, c.name)
	case ActionUnpause:
		return c.unpause(ctx)
	case ActionStart:
		if err := c.waitDeps(ctx); err != nil {
			return err
		}
		return c.start(ctx, c.name, current.snap)
	case ActionAdopt:
		if err := c.waitDeps(ctx); err != nil {
			return err
		}
		if err := c.eng.ContainerRename(ctx, left.ID, c.name); err != nil {
			return fmt.Errorf("rename: %w", err)
		}
		return c.start(ctx, c.name, current.snap)
	case ActionRename:
		if err := c.eng.ContainerRename(ctx, current.ID, c.name); err != nil {
			return fmt.Errorf("rename %s: %w", current.Name, err)
		}
		if !renameStarts(current, target) {
			return nil
		}
		if err := c.waitDeps(ctx); err != nil {
			return err
		}
		return c.start(ctx, c.name, current.snap)
	}
	if err := c.waitDeps(ctx); err != nil {
		return err
	}
	var anon map[string]string
	if current.Exists && !adoptable {
		var err error
		if anon, err = c.anonymousVolumes(ctx, current.ID); err != nil {
			return err
		}
	}
	strategy := target.update
	// The image is known as brought when its item pulled or built it, or
	// the container replaced ran on it and knew.
	c.bringing = target.brought || current.brought && current.ImageID != "" && current.ImageID == target.ImageID
	imageID := target.ImageID
	if !adoptable && (plan.Action == ActionCreate || strategy.deferred()) {
		if strategy.deferred() {
			if err := c.checkSpace(ctx, strategy, current, target); err != nil {
				return err
			}
		}
		if plan.Action == ActionRecreate {
			if err := c.preStop(ctx, current); err != nil {
				return err
			}
			old := current.ID // compose may have named it otherwise
			if old == "" {
				old = c.name
			}
			if err := removeContainer(ctx, c.eng, old, c.spec.StopTimeout); err != nil {
				return err
			}
			if strategy == DeleteThenDownload {
				if err := c.deleteOldImage(ctx, current, target); err != nil {
					return err
				}
			}
		}
		if strategy.deferred() {
			// A newer image in the registry (PullAlways) is pulled even
			// though the old one is present.
			refresh := target.staleImage != ""
			id, pulled, err := ensureImage(ctx, c.eng, c.spec.Image, c.spec.Pull, []string{c.spec.Service}, refresh)
			if err != nil {
				return err
			}
			imageID = id
			c.bringing = pulled || target.brought || current.brought && current.ImageID == id
		}
		if err := c.create(ctx, c.name, anon, imageID); err != nil {
			return err
		}
		return c.start(ctx, c.name, current.snap)
	}
	// Recreate, download-then-kill (or adopting the new container an
	// interrupted recreate left): the image is already there.
	tmp := left.ID
	if !adoptable {
		tmp = TempName(c.name)
		if err := c.create(ctx, tmp, anon, imageID); err != nil {
			return err
		}
		if strategy == HandOver {
			if err := c.handOver(ctx, tmp); err != nil {
				return err
			}
			return c.replace(ctx, current, tmp)
		}
	}
	if err := c.replace(ctx, current, tmp); err != nil {
		return err
	}
	return c.start(ctx, c.name, current.snap)
}

// replace puts the new container tmp in the place of current: its
// pre_stop hooks, its removal, and the rename of tmp to the name.
func (c *Container) replace(ctx context.Context, current ContainerState, tmp string) error {
	if err := c.preStop(ctx, current); err != nil {
		return err
	}
	if err := removeContainer(ctx, c.eng, current.ID, c.spec.StopTimeout); err != nil {
		return err
	}
	if err := c.eng.ContainerRename(ctx, tmp, c.name); err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	return nil
}

// start starts the container (unless it should stay stopped) and watches
// it for one poll interval. It is the last step of every Apply that calls
// it, so when the watch passes, what its inspect read is the container's
// state after the Apply: it is recorded in snap (when the walk has one) for
// the verification.
func (c *Container) start(ctx context.Context, name string, snap *snapshot) error {
	if c.spec.Run == Stopped {
		return nil
	}
	if err := c.eng.ContainerStart(ctx, name, container.StartOptions{}); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if err := c.runHooks(ctx, name, "post_start", c.spec.PostStart); err != nil {
		return err
	}
	r, err := c.settle(ctx, name)
	if err == nil && r.ContainerJSONBase != nil {
		snap.observe(c.key(), stateFromInspect(r, &c.spec))
	}
	return err
}

func (c *Container) unpause(ctx context.Context) error {
	if err := c.eng.ContainerUnpause(ctx, c.name); err != nil {
		return fmt.Errorf("unpause: %w", err)
	}
	return nil
}

// settle waits one poll interval after a start and fails with a
// *ContainerError when the container exited (with a non-zero code, for a
// container run Once) or turned unhealthy. It returns what its inspect
// read.
func (c *Container) settle(ctx context.Context, name string) (container.InspectResponse, error) {
	t := time.NewTimer(c.poll)
	select {
	case <-ctx.Done():
		t.Stop()
		return container.InspectResponse{}, ctx.Err()
	case <-t.C:
	}
	r, err := c.eng.ContainerInspect(ctx, name)
	if err != nil {
		return r, fmt.Errorf("inspect after start: %w", err)
	}
	if r.ContainerJSONBase == nil || r.State == nil {
		return r, nil
	}
	st := r.State
	exited := st.Status == container.StateExited || st.Status == container.StateDead
	health := ""
	if st.Health != nil {
		health = string(st.Health.Status)
	}
	if exited && (c.spec.Run != Once || st.ExitCode != 0) || health == container.Unhealthy {
		read := stateFromInspect(r, &c.spec)
		return r, &ContainerError{Container: c.name, Service: c.spec.Service, Status: string(st.Status), ExitCode: st.ExitCode,
			Health: health, Log: logTail(ctx, c.eng, name, c.red), state: &read}
	}
	return r, nil
}

func (c *Container) stop(ctx context.Context, name string) error {
	opts := container.StopOptions{}
	if c.spec.StopTimeout != nil {
		s := int(c.spec.StopTimeout.Seconds())
		opts.Timeout = &s
	}
	if err := c.eng.ContainerStop(ctx, name, opts); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}

// ContainerCopier is the ability to copy files into a container, which
// *client.Client has. The Engine of a project whose containers have Files
// must have it; an engine without it fails their creation with
// ErrCannotCopy.
type ContainerCopier interface {
	CopyToContainer(ctx context.Context, containerID, dstPath string, content io.Reader, options container.CopyToContainerOptions) error
}

// ErrCannotCopy means a container has Files but the Engine has no
// CopyToContainer method (see ContainerCopier).
var ErrCannotCopy = errors.New("the engine cannot copy files into containers")

// copyFiles puts the spec's Files into the created container name, in one
// tar stream, as compose does for secrets and configs without swarm.
func (c *Container) copyFiles(ctx context.Context, name string) error {
	if len(c.spec.Files) == 0 {
		return nil
	}
	cp, ok := c.eng.(ContainerCopier)
	if !ok {
		return ErrCannotCopy
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	owned := false
	for _, f := range c.spec.Files {
		mode := int64(f.Mode)
		if mode == 0 {
			mode = 0o444
		}
		uid, _ := strconv.Atoi(f.UID)
		gid, _ := strconv.Atoi(f.GID)
		owned = owned || f.UID != "" || f.GID != ""
		hdr := &tar.Header{Name: strings.TrimPrefix(f.Target, "/"), Mode: mode, Size: int64(len(f.Content)),
			Uid: uid, Gid: gid, Typeflag: tar.TypeReg, ModTime: time.Now(), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("files: %w", err)
		}
		if _, err := io.WriteString(tw, f.Content); err != nil {
			return fmt.Errorf("files: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("files: %w", err)
	}
	if err := cp.CopyToContainer(ctx, name, "/", &buf, container.CopyToContainerOptions{CopyUIDGID: owned}); err != nil {
		return fmt.Errorf("copy files: %w", err)
	}
	return nil
}

// anonymousVolumes returns, by target, the engine volumes of the
// container id mounted where the spec mounts an anonymous volume, so its
// successor keeps them, as compose does; nil when the spec has none.
func (c *Container) anonymousVolumes(ctx context.Context, id string) (map[string]string, error) {
	var out map[string]string
	for _, m := range c.spec.Mounts {
		if m.Type != "volume" || m.Source != "" {
			continue
		}
		if out == nil {
			r, err := c.eng.ContainerInspect(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("inspect: %w", err)
			}
			out = map[string]string{}
			for _, mp := range r.Mounts {
				if mp.Type == mount.TypeVolume && mp.Name != "" {
					out[mp.Destination] = mp.Name
				}
			}
		}
	}
	return out, nil
}

// create creates the container under name; anon names, by target, the
// volumes its anonymous mounts reuse (see anonymousVolumes); imageID is
// the ID of the image it runs, for compose's label ("" when unknown).
func (c *Container) create(ctx context.Context, name string, anon map[string]string, imageID string) error {
	s := &c.spec
	f := s.fields(c.hashKey)
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	labels[LabelOwner] = OwnerValue
	labels[LabelProject] = c.project
	labels[LabelService] = s.Service
	labels[LabelSpecHash] = hashFields(c.hashKey, f)
	labels[LabelSpecFields] = encodeFields(f)
	if s.UpdateLock != "" {
		labels[LabelUpdateLock] = s.UpdateLock
	}
	if c.bringing {
		labels[LabelImageBrought] = "true"
	}
	c.composeLabels(labels, name, imageID)
	cfg := &container.Config{
		Image:      s.Image,
		Cmd:        s.Command,
		Entrypoint: s.Entrypoint,
		Labels:     labels,
	}
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cfg.Env = append(cfg.Env, k+"="+s.Env[k])
	}
	if s.StopTimeout != nil {
		t := int(s.StopTimeout.Seconds())
		cfg.StopTimeout = &t
	}
	if h := s.Healthcheck; h != nil {
		cfg.Healthcheck = &container.HealthConfig{Test: h.Test, Interval: h.Interval, Timeout: h.Timeout,
			StartPeriod: h.StartPeriod, Retries: h.Retries, StartInterval: h.StartInterval}
	}
	host := &container.HostConfig{}
	if s.Restart != "" {
		rp, err := parseRestart(s.Restart, "container "+c.name)
		if err != nil {
			return err
		}
		host.RestartPolicy = rp
	}
	if len(s.Ports) > 0 {
		cfg.ExposedPorts = nat.PortSet{}
		host.PortBindings = nat.PortMap{}
		for _, p := range s.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = "tcp"
			}
			port := nat.Port(strconv.Itoa(int(p.ContainerPort)) + "/" + proto)
			cfg.ExposedPorts[port] = struct{}{}
			host.PortBindings[port] = append(host.PortBindings[port], nat.PortBinding{HostIP: p.HostIP, HostPort: p.HostPort})
		}
	}
	for _, m := range s.Mounts {
		src := m.Source
		if m.Type == "volume" && src == "" {
			src = anon[m.Target]
		}
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.Type(m.Type), Source: src, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	platform := s.hostOptions(cfg, host, c.netContainer)
	if len(s.Networks) == 0 {
		host.Links = slices.Clone(c.links) // the default bridge's legacy links
	}
	host.VolumesFrom = slices.Clone(c.volumesFrom)
	if strings.HasPrefix(s.IPC, ServiceNetworkPrefix) {
		host.IpcMode = container.IpcMode("container:" + c.shared[s.IPC])
	}
	if strings.HasPrefix(s.PID, ServiceNetworkPrefix) {
		host.PidMode = container.PidMode("container:" + c.shared[s.PID])
	}
	var netcfg *network.NetworkingConfig
	if len(s.Networks) > 0 {
		first := s.Networks[0]
		host.NetworkMode = container.NetworkMode(first.Name)
		netcfg = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			first.Name: c.endpoint(first),
		}}
	}
	var attached []string
	for attempt := 1; ; attempt++ {
		_, err := c.eng.ContainerCreate(ctx, cfg, host, netcfg, platform, name)
		if err == nil {
			if len(s.Networks) > 0 {
				attached = []string{s.Networks[0].Name}
			}
			break
		}
		if !errdefs.IsConflict(err) {
			return fmt.Errorf("create: %w", err)
		}
		holder, err := c.nameTaken(ctx, name, labels[LabelSpecHash], err, attempt)
		if err != nil {
			return err
		}
		if holder != nil { // adopted
			attached = slices.Collect(maps.Keys(holder.NetworkSettings.Networks))
			break
		}
	}
	if err := c.copyFiles(ctx, name); err != nil {
		// A container without its files must not be adopted later.
		_ = c.eng.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
		return err
	}
	// API 1.41 attaches one network at create; connect the others.
	for _, n := range s.Networks {
		if slices.Contains(attached, n.Name) {
			continue
		}
		if err := c.eng.NetworkConnect(ctx, n.Name, name, c.endpoint(n)); err != nil {
			return fmt.Errorf("connect network %s: %w", n.Name, err)
		}
	}
	return nil
}

// createAttempts bounds how often create tries a name that a container of
// the project held and that was freed (removed, or not yet readable).
const createAttempts = 3

// nameTaken handles a create refused because a container holds name (the
// engine's error is conflict). Listing the project's containers at the start of
// the walk did not show it: a create another walk had sent was carried out
// after that list (a cancelled walk, another process), or someone else's
// container has the name. It inspects the holder:
//
//   - one of the project's own containers (LabelOwner and LabelProject)
//     with the spec hash specHash is adopted: it is returned, and the
//     caller goes on with it as if it had created it;
//   - one of the project's own containers with another spec is removed
//     (unless its update lock is held) and nil is returned: create again;
//   - a holder that is gone (removed meanwhile, or still being created and
//     not yet readable) returns nil after one poll interval: create again,
//     createAttempts times at most;
//   - anyone else's container fails with ErrNotOwned, naming the holder.
func (c *Container) nameTaken(ctx context.Context, name, specHash string, conflict error, attempt int) (*container.InspectResponse, error) {
	r, err := c.eng.ContainerInspect(ctx, name)
	switch {
	case errdefs.IsNotFound(err) && attempt < createAttempts:
		t := time.NewTimer(c.poll)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("create: %w", ctx.Err())
		case <-t.C:
		}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("create: %w", conflict)
	case r.ContainerJSONBase == nil || r.Config == nil:
		return nil, fmt.Errorf("create: %w", conflict)
	}
	id := r.ID
	if len(id) > 12 {
		id = id[:12]
	}
	lbl := r.Config.Labels
	if !ownedLabels(lbl, c.project) {
		return nil, &causeError{msg: fmt.Sprintf("create: the name is taken by container %s, which converge does not own for project %s", id, c.project),
			err: errors.Join(ErrNotOwned, conflict)}
	}
	if lbl[LabelSpecHash] == specHash {
		if r.NetworkSettings == nil {
			r.NetworkSettings = &container.NetworkSettings{}
		}
		return &r, nil
	}
	if attempt >= createAttempts {
		return nil, fmt.Errorf("create: %w", conflict)
	}
	if err := checkLock(ctx, c.eng, name, lbl[LabelUpdateLock], ActionRecreate); err != nil {
		return nil, err
	}
	if err := removeContainer(ctx, c.eng, r.ID, c.spec.StopTimeout); err != nil {
		return nil, fmt.Errorf("container %s in the way: %w", id, err)
	}
	return nil, nil
}

// endpoint is the endpoint of the container on network n: its aliases and
// static addresses.
func (c *Container) endpoint(n NetworkAttachment) *network.EndpointSettings {
	// Links on a user-defined network live on its endpoint.
	ep := &network.EndpointSettings{Aliases: c.aliases(n), Links: slices.Clone(c.links)}
	if n.IPv4Address != "" || n.IPv6Address != "" {
		ep.IPAMConfig = &network.EndpointIPAMConfig{IPv4Address: n.IPv4Address, IPv6Address: n.IPv6Address}
	}
	return ep
}

// aliases are the user's aliases plus the service name, so services find
// each other by name as under Compose.
func (c *Container) aliases(n NetworkAttachment) []string {
	a := slices.Clone(n.Aliases)
	if !slices.Contains(a, c.spec.Service) {
		a = append(a, c.spec.Service)
	}
	return a
}

// parseRestart parses a restart policy; object names its container in a
// *SpecError.
func parseRestart(s, object string) (container.RestartPolicy, error) {
	name, count, _ := cutColon(s)
	rp := container.RestartPolicy{Name: container.RestartPolicyMode(name)}
	switch rp.Name {
	case container.RestartPolicyDisabled, container.RestartPolicyAlways, container.RestartPolicyUnlessStopped:
	case container.RestartPolicyOnFailure:
		if count != "" {
			n, err := strconv.Atoi(count)
			if err != nil || n < 0 {
				return rp, &SpecError{Object: object, Field: "Restart", Reason: fmt.Sprintf("bad retry count in %q", s)}
			}
			rp.MaximumRetryCount = n
		}
	default:
		return rp, &SpecError{Object: object, Field: "Restart", Reason: fmt.Sprintf("unknown policy %q", s)}
	}
	return rp, nil
}

func cutColon(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// waitDeps waits for every depends_on condition, each within its timeout.
func (c *Container) waitDeps(ctx context.Context) error {
	for _, w := range c.waits {
		if err := c.waitOne(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// waitOne polls the dependency until its condition holds. It ends at once,
// with ErrDependencyFailed, when the dependency can no longer meet it: it
// exited when it must run, turned unhealthy, or has no healthcheck to wait
// for.
func (c *Container) waitOne(ctx context.Context, w wait) error {
	timeout := w.dep.Timeout
	if timeout <= 0 {
		timeout = DefaultDependencyTimeout
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var status, health string // of the last read of the dependency
	var wasStarting bool      // an earlier read of this wait found it starting
	fail := func(err error) error {
		de := &DependencyError{Container: c.name, Dependency: w.name, Service: w.dep.Service, Condition: w.dep.Condition, Err: err,
			Status: status, Health: health}
		if ctx.Err() == nil {
			de.Log = logTail(ctx, c.eng, w.name, w.red)
		}
		return de
	}
	failed := func(format string, a ...any) error {
		return fail(&causeError{msg: fmt.Sprintf(format, a...), err: ErrDependencyFailed})
	}
	for {
		r, err := c.eng.ContainerInspect(ctx, w.name)
		if err != nil && !errdefs.IsNotFound(err) {
			return fail(err)
		}
		status, health = "", ""
		if err == nil && r.State != nil {
			st := r.State
			status = string(st.Status)
			if st.Health != nil {
				health = string(st.Health.Status)
			}
			stopped := st.Status == container.StateExited || st.Status == container.StateDead
			switch w.dep.Condition {
			case ServiceStarted:
				switch {
				case st.Running || stopped && st.ExitCode == 0:
					return nil
				case stopped:
					return failed("it exited with code %d", st.ExitCode)
				}
			case ServiceHealthy:
				switch {
				case st.Health == nil:
					return failed("it has no healthcheck")
				case st.Health.Status == container.Healthy:
					return nil
				case st.Health.Status == container.Unhealthy && wasStarting:
					// The walk's report may show it starting, as it was when
					// its item finished: say that it changed since.
					return failed("it turned unhealthy during the wait (it was starting)")
				case st.Health.Status == container.Unhealthy:
					return failed("it is unhealthy")
				case stopped:
					return failed("it exited with code %d", st.ExitCode)
				case !st.Running && st.Status != container.StateRestarting && st.Status != container.StateCreated:
					return failed("it is %s", st.Status)
				}
			case ServiceCompletedSuccessfully:
				if stopped {
					if st.ExitCode == 0 {
						return nil
					}
					return failed("it exited with code %d", st.ExitCode)
				}
			}
			wasStarting = wasStarting || health == string(container.Starting)
		}
		poll := time.NewTimer(c.poll)
		select {
		case <-ctx.Done():
			poll.Stop()
			return fail(ctx.Err())
		case <-deadline.C:
			poll.Stop()
			return fail(&causeError{msg: fmt.Sprintf("timed out after %s", timeout), err: ErrDependencyTimeout})
		case <-poll.C:
		}
	}
}

// LockError is a change refused because the update lock of a container
// is held (see ContainerSpec.UpdateLock): its lock file exists. It matches
// converge.ErrLocked, so a converge.TargetReconciler retries the pass with
// backoff, and TriggerForced goes past it.
type LockError struct {
	// Container is the engine name of the container.
	Container string
	// Lock is the path of the lock file inside the container.
	Lock string
	// Action is what was refused: ActionRecreate, ActionStop or
	// ActionRemove.
	Action Action
}

// Error names the container, the lock and the refused action.
func (e *LockError) Error() string {
	done := map[Action]string{ActionRecreate: "recreated", ActionStop: "stopped", ActionRemove: "removed"}[e.Action]
	if done == "" {
		done = string(e.Action)
	}
	return fmt.Sprintf("docker: container %s: update lock %s is held, so it is not %s (a forced pass goes past it)", e.Container, e.Lock, done)
}

// Unwrap returns converge.ErrLocked.
func (e *LockError) Unwrap() error { return converge.ErrLocked }

// checkLock returns a *LockError when the update lock file lock of the
// container name exists, nil when it does not, when lock is "" or when ctx
// is forced; an engine failure is returned as it is, so a lock that cannot
// be read is never taken as released.
func checkLock(ctx context.Context, eng Engine, name, lock string, action Action) error {
	if lock == "" || converge.Forced(ctx) {
		return nil
	}
	_, err := eng.ContainerStatPath(ctx, name, lock)
	switch {
	case err == nil:
		return &LockError{Container: name, Lock: lock, Action: action}
	case errdefs.IsNotFound(err):
		return nil
	}
	return fmt.Errorf("update lock %s: %w", lock, err)
}

// Bounds of the log tail an error carries.
const (
	// LogTailLines is the most lines of a container's log an error carries.
	LogTailLines = 20
	// LogTailBytes is the most bytes of a container's log an error carries.
	LogTailBytes = 4 << 10
)

// logTail returns the last lines of a container's output (standard output
// and error), bounded by LogTailLines and LogTailBytes, with secret values
// redacted; "" when the log cannot be read.
func logTail(ctx context.Context, eng Engine, name string, red redactor) string {
	rc, err := eng.ContainerLogs(ctx, name, container.LogsOptions{ShowStdout: true, ShowStderr: true,
		Tail: strconv.Itoa(LogTailLines)})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, io.LimitReader(rc, 1<<20)); err != nil && buf.Len() == 0 {
		return ""
	}
	out := buf.Bytes()
	if len(out) > LogTailBytes {
		out = out[len(out)-LogTailBytes:]
		if i := bytes.IndexByte(out, '\n'); i >= 0 {
			out = out[i+1:]
		}
	}
	return red.string(strings.TrimRight(string(out), "\n"))
}

// withLog appends a log tail to a message.
func withLog(msg, log string) string {
	if log == "" {
		return msg
	}
	return msg + "; last lines of its log:\n" + log
}

// causeError is a cause with its own message that matches err (often a
// sentinel) without repeating the sentinel's text.
type causeError struct {
	msg string
	err error
}

func (e *causeError) Error() string { return e.msg }
func (e *causeError) Unwrap() error { return e.err }

// reason is the message of a cause inside one of the package's errors,
// without a second package prefix.
func reason(err error) string {
	if err == nil {
		return ""
	}
	return strings.TrimPrefix(err.Error(), "docker: ")
}

// Error describes the failure and shows the log tail.
func (e *ContainerError) Error() string {
	what := fmt.Sprintf("exited with code %d", e.ExitCode)
	switch {
	case e.Health == container.Unhealthy && e.Status != string(container.StateExited) && e.Status != string(container.StateDead):
		what = "turned unhealthy"
	case e.Status == string(container.StateDead):
		what = "died"
	}
	return withLog(fmt.Sprintf("docker: container %s: %s right after it was started", e.Container, what), e.Log)
}

// Is makes ContainerError match ErrContainerFailed.
func (e *ContainerError) Is(target error) bool { return target == ErrContainerFailed }
