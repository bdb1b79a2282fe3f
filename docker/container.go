package docker

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
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
	project   string
	eng       Engine
	projectID converge.ID
	imageID   converge.ID
	waits     []wait
	poll      time.Duration
	red       redactor
	hashKey   []byte // keys the spec hashes (Project.HashKey)
}

type wait struct {
	name string
	dep  Dependency
}

// DependencyError says which depends_on condition of a container was not
// met. It matches ErrDependencyTimeout or ErrDependencyFailed.
type DependencyError struct {
	Container  string
	Dependency string
	Condition  Condition
	Err        error
}

// Error describes the problem, naming its culprit.
func (e *DependencyError) Error() string {
	return fmt.Sprintf("docker: container %s: dependency %s (%s): %v", e.Container, e.Dependency, e.Condition, e.Err)
}

// Unwrap returns the cause.
func (e *DependencyError) Unwrap() error { return e.Err }

// ID returns ContainerID(project, service).
func (c *Container) ID() converge.ID { return ContainerID(c.project, c.spec.Service) }

// StateCurrent reads the container from the project's snapshot when this
// walk has one and the container has not been written since; otherwise it
// inspects the container and records drift of user-specified fields.
func (c *Container) StateCurrent(ctx context.Context, deps converge.Deps) (ContainerState, error) {
	if ps, err := converge.DepState[ProjectState](deps, c.projectID); err == nil && ps.snap.usable(c.key()) {
		st := ContainerState{Name: c.name}
		if s, ok := ps.snap.containers[c.name]; ok {
			st = stateFromSummary(s)
		}
		st.snap = ps.snap
		return st, nil
	}
	r, err := c.eng.ContainerInspect(ctx, c.name)
	if errdefs.IsNotFound(err) {
		return ContainerState{Name: c.name}, nil
	}
	if err != nil {
		return ContainerState{}, c.red.err(fmt.Errorf("docker: inspect container %s: %w", c.name, err))
	}
	return stateFromInspect(r, &c.spec), nil
}

func (c *Container) key() string { return "container:" + c.name }

// StateGoal is the container created from the spec, in its run mode, on
// the image ID its image item reached (when it has one).
func (c *Container) StateGoal(_ context.Context, deps converge.Deps) (ContainerState, error) {
	f := c.spec.fields(c.hashKey)
	st := ContainerState{Name: c.name, Exists: true, Image: c.spec.Image, SpecHash: hashFields(c.hashKey, f), Fields: f, Run: c.spec.Run}
	for _, n := range c.spec.Networks {
		st.Networks = append(st.Networks, n.Name)
	}
	sort.Strings(st.Networks)
	st.Networks = slices.Compact(st.Networks)
	if c.imageID != "" {
		if is, err := converge.DepState[ImageState](deps, c.imageID); err == nil {
			st.ImageID = is.ID
		}
	}
	return st, nil
}

// StateClean is the container removed.
func (c *Container) StateClean(context.Context, converge.Deps) (ContainerState, error) {
	return ContainerState{Name: c.name}, nil
}

// Check follows PlanFor: any action other than none is required.
func (c *Container) Check(_ context.Context, current, target ContainerState) (converge.Decision, error) {
	if PlanFor(current, target).Action == ActionNone {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}

// Apply carries out the plan: create, recreate (create under a temporary
// name, stop, remove, rename, start; or for KillThenDownload stop, remove,
// pull, create, start), start, stop or remove. It waits for the
// depends_on conditions before starting anything.
func (c *Container) Apply(ctx context.Context, current, target ContainerState) (ContainerState, error) {
	current.snap.invalidate(c.key())
	plan := PlanFor(current, target)
	if err := c.apply(ctx, plan, current); err != nil {
		switch {
		case described(err): // names its own culprit
		case plan.Action == ActionRecreate:
			err = fmt.Errorf("docker: container %s: recreate: %w", c.name, err)
		default: // the failed step names the action
			err = fmt.Errorf("docker: container %s: %w", c.name, err)
		}
		return current, c.red.err(err)
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
		return ContainerState{Name: current.Name}
	case ActionStop:
		next := current
		next.Status = "exited"
		return next
	case ActionStart:
		next := current
		next.Status, next.ExitCode = "running", 0
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

func (c *Container) apply(ctx context.Context, plan Plan, current ContainerState) error {
	switch plan.Action {
	case ActionNone:
		return nil
	case ActionRemove:
		return removeContainer(ctx, c.eng, c.name, c.spec.StopTimeout)
	case ActionStop:
		return c.stop(ctx, c.name)
	case ActionStart:
		if err := c.waitDeps(ctx); err != nil {
			return err
		}
		if err := c.eng.ContainerStart(ctx, c.name, container.StartOptions{}); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		return nil
	}
	if err := c.waitDeps(ctx); err != nil {
		return err
	}
	if plan.Action == ActionCreate || c.spec.Update == KillThenDownload {
		if plan.Action == ActionRecreate {
			if err := removeContainer(ctx, c.eng, c.name, c.spec.StopTimeout); err != nil {
				return err
			}
		}
		if c.spec.Update == KillThenDownload {
			if err := ensureImage(ctx, c.eng, c.spec.Image, c.spec.Pull); err != nil {
				return err
			}
		}
		if err := c.create(ctx, c.name); err != nil {
			return err
		}
		return c.start(ctx, c.name)
	}
	// Recreate, download-then-kill: the image is already there. A
	// temporary container left by a crash is an orphan the project item
	// removes at the start of every walk.
	tmp := c.name + "_converge_tmp"
	if err := c.create(ctx, tmp); err != nil {
		return err
	}
	if err := removeContainer(ctx, c.eng, current.ID, c.spec.StopTimeout); err != nil {
		return err
	}
	if err := c.eng.ContainerRename(ctx, tmp, c.name); err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	return c.start(ctx, c.name)
}

func (c *Container) start(ctx context.Context, name string) error {
	if c.spec.Run == Stopped {
		return nil
	}
	if err := c.eng.ContainerStart(ctx, name, container.StartOptions{}); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return nil
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

func (c *Container) create(ctx context.Context, name string) error {
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
			StartPeriod: h.StartPeriod, Retries: h.Retries}
	}
	host := &container.HostConfig{}
	if s.Restart != "" {
		rp, err := parseRestart(s.Restart)
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
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.Type(m.Type), Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	var netcfg *network.NetworkingConfig
	if len(s.Networks) > 0 {
		first := s.Networks[0]
		host.NetworkMode = container.NetworkMode(first.Name)
		netcfg = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			first.Name: {Aliases: c.aliases(first)},
		}}
	}
	if _, err := c.eng.ContainerCreate(ctx, cfg, host, netcfg, nil, name); err != nil {
		if errdefs.IsConflict(err) && name == c.name {
			// Our own container with this name would have been in the
			// project's list: the name belongs to someone else.
			return fmt.Errorf("create: %w: %w", ErrNotOwned, err)
		}
		return fmt.Errorf("create: %w", err)
	}
	// API 1.41 attaches one network at create; connect the others.
	for _, n := range s.Networks[min(1, len(s.Networks)):] {
		if err := c.eng.NetworkConnect(ctx, n.Name, name, &network.EndpointSettings{Aliases: c.aliases(n)}); err != nil {
			return fmt.Errorf("connect network %s: %w", n.Name, err)
		}
	}
	return nil
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

func parseRestart(s string) (container.RestartPolicy, error) {
	name, count, _ := cutColon(s)
	rp := container.RestartPolicy{Name: container.RestartPolicyMode(name)}
	switch rp.Name {
	case container.RestartPolicyDisabled, container.RestartPolicyAlways, container.RestartPolicyUnlessStopped:
	case container.RestartPolicyOnFailure:
		if count != "" {
			n, err := strconv.Atoi(count)
			if err != nil || n < 0 {
				return rp, &SpecError{Object: "restart", Field: "Restart", Reason: fmt.Sprintf("bad retry count in %q", s)}
			}
			rp.MaximumRetryCount = n
		}
	default:
		return rp, &SpecError{Object: "restart", Field: "Restart", Reason: fmt.Sprintf("unknown policy %q", s)}
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

func (c *Container) waitOne(ctx context.Context, w wait) error {
	timeout := w.dep.Timeout
	if timeout <= 0 {
		timeout = DefaultDependencyTimeout
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	fail := func(err error) error {
		return &DependencyError{Container: c.name, Dependency: w.name, Condition: w.dep.Condition, Err: err}
	}
	for {
		r, err := c.eng.ContainerInspect(ctx, w.name)
		if err != nil && !errdefs.IsNotFound(err) {
			return fail(err)
		}
		if err == nil && r.State != nil {
			st := r.State
			switch w.dep.Condition {
			case ServiceStarted:
				if st.Running || st.Status == "exited" && st.ExitCode == 0 {
					return nil
				}
			case ServiceHealthy:
				if st.Health == nil {
					return fail(fmt.Errorf("%w: it has no healthcheck", ErrDependencyFailed))
				}
				if st.Health.Status == container.Healthy {
					return nil
				}
				if !st.Running && st.Status != "restarting" && st.Status != "created" {
					return fail(fmt.Errorf("%w: it is %s", ErrDependencyFailed, st.Status))
				}
			case ServiceCompletedSuccessfully:
				if st.Status == "exited" || st.Status == "dead" {
					if st.ExitCode == 0 {
						return nil
					}
					return fail(fmt.Errorf("%w: it exited with code %d", ErrDependencyFailed, st.ExitCode))
				}
			}
		}
		poll := time.NewTimer(c.poll)
		select {
		case <-ctx.Done():
			poll.Stop()
			return fail(ctx.Err())
		case <-deadline.C:
			poll.Stop()
			return fail(fmt.Errorf("%w after %s", ErrDependencyTimeout, timeout))
		case <-poll.C:
		}
	}
}
