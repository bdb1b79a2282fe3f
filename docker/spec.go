package docker

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// Labels the package puts on everything it creates. The engine is the only
// source of current state: ownership and the spec hash live here.
const (
	// LabelOwner marks objects created by this package; its value is OwnerValue.
	LabelOwner = "io.convergekit.owner"
	// OwnerValue is the value of LabelOwner.
	OwnerValue = "converge"
	// LabelProject names the project an object belongs to.
	LabelProject = "io.convergekit.project"
	// LabelService names the service a container runs.
	LabelService = "io.convergekit.service"
	// LabelSpecHash holds the hash of the canonical container spec.
	LabelSpecHash = "io.convergekit.spec-hash"
	// LabelSpecFields holds one short hash per user-specified field, so a
	// changed spec can be explained field by field without inspecting.
	LabelSpecFields = "io.convergekit.spec-fields"
	// LabelUpdateLock holds the path, inside the container, of its update
	// lock file (ContainerSpec.UpdateLock). The package sets it; in a
	// Compose file it is how a service declares its lock.
	LabelUpdateLock = "io.convergekit.update-lock"
)

// Sentinel errors of the package, to match with errors.Is. Typed errors
// below match them. Their text is a bare phrase: the package's errors
// wrap them in a message that reads once ("docker: image app:2: not
// present locally").
var (
	// ErrInvalidSpec is matched by every *SpecError.
	ErrInvalidSpec = errors.New("invalid spec")
	// ErrImageMissing means an image is not present locally and may not be
	// pulled (PullNever).
	ErrImageMissing = errors.New("not present locally")
	// ErrImageInUse means an image marked Absent is still used by a container.
	ErrImageInUse = errors.New("in use")
	// ErrDependencyTimeout means a depends_on condition was not met in time.
	ErrDependencyTimeout = errors.New("condition not met in time")
	// ErrDependencyFailed means a dependency can no longer meet its
	// condition (for example it exited with a non-zero code).
	ErrDependencyFailed = errors.New("dependency failed")
	// ErrNotOwned means an object with the wanted name exists but was not
	// created by this package, so it is neither changed nor removed.
	ErrNotOwned = errors.New("not owned by converge")
	// ErrInvalidCompose means compose-go rejected a Compose file (syntax,
	// schema or consistency); the loader's message follows.
	ErrInvalidCompose = errors.New("invalid compose file")
	// ErrUnsupported is matched by *UnsupportedError from the Compose loader.
	ErrUnsupported = errors.New("unsupported compose fields")
)

// SpecError names the object and field of an invalid spec. The Compose
// loader and Project.Graph return it before any engine call, so an invalid
// value never reaches the engine.
type SpecError struct {
	// Object names what is invalid: "project shop: container 1 (web)",
	// "service web" (Compose), "project shop".
	Object string
	// Service is the service the problem is in; "" for project-level
	// problems.
	Service string
	// Field is the field path: Go names for a Project ("Ports[0].HostPort",
	// "Healthcheck.Interval"), Compose names for a file ("ports[0]",
	// "healthcheck.interval").
	Field  string
	Reason string
}

// Error describes the problem, naming its culprit.
func (e *SpecError) Error() string {
	return fmt.Sprintf("docker: %s: %s: %s", e.Object, e.Field, e.Reason)
}

// objectError is an error about one engine object that already reads
// "docker: <kind> <name>: ...".
type objectError struct {
	kind, name string
	err        error
}

func (e *objectError) Error() string { return fmt.Sprintf("docker: %s %s: %v", e.kind, e.name, e.err) }

func (e *objectError) Unwrap() error { return e.err }

// described reports whether err already reads "docker: <object>: ..." with
// its culprit named, so a caller returns it as it is instead of adding a
// second prefix.
func described(err error) bool {
	var (
		de *DependencyError
		pe *PullError
		se *SpecError
		oe *objectError
		ce *ContainerError
		ie *ImageError
		le *LockError
		sp *SpaceError
		he *HandoverError
	)
	return errors.As(err, &de) || errors.As(err, &pe) || errors.As(err, &se) || errors.As(err, &oe) ||
		errors.As(err, &ce) || errors.As(err, &ie) || errors.As(err, &le) || errors.As(err, &sp) || errors.As(err, &he)
}

// Is makes SpecError match ErrInvalidSpec.
func (e *SpecError) Is(target error) bool { return target == ErrInvalidSpec }

// RunMode is what a container should be doing. The zero value is Running.
type RunMode uint8

const (
	// Running keeps the container running; a stopped one is started.
	Running RunMode = iota
	// Stopped keeps the container created but not running.
	Stopped
	// Once runs the container to completion: exited with code 0 is
	// converged, a non-zero exit is started again.
	Once
)

// String returns "running", "stopped" or "once".
func (m RunMode) String() string {
	switch m {
	case Running:
		return "running"
	case Stopped:
		return "stopped"
	case Once:
		return "once"
	}
	return fmt.Sprintf("runmode(%d)", uint8(m))
}

// Condition is a depends_on condition. The zero value is ServiceStarted.
type Condition uint8

const (
	// ServiceStarted waits until the dependency is running (or has run).
	ServiceStarted Condition = iota
	// ServiceHealthy waits until the dependency's healthcheck reports healthy.
	ServiceHealthy
	// ServiceCompletedSuccessfully waits until the dependency exited with code 0.
	ServiceCompletedSuccessfully
)

var conditionNames = [...]string{"service_started", "service_healthy", "service_completed_successfully"}

// String returns the Compose name of the condition.
func (c Condition) String() string {
	if int(c) < len(conditionNames) {
		return conditionNames[c]
	}
	return fmt.Sprintf("condition(%d)", uint8(c))
}

// ParseCondition parses a Compose condition name; "" means ServiceStarted.
func ParseCondition(s string) (Condition, error) {
	if s == "" {
		return ServiceStarted, nil
	}
	for i, n := range conditionNames {
		if n == s {
			return Condition(i), nil
		}
	}
	return 0, fmt.Errorf("docker: %w: unknown depends_on condition %q", ErrInvalidSpec, s)
}

// UpdateStrategy says in which order a container whose image changed is
// replaced, with the names and meaning of balena's update strategies (the
// label io.balena.update.strategy, LabelUpdateStrategy, sets it from a
// Compose file). The zero value is DownloadThenKill.
type UpdateStrategy uint8

const (
	// DownloadThenKill pulls the new image first (as its own graph item)
	// and only then replaces the container: the shortest downtime.
	DownloadThenKill UpdateStrategy = iota
	// KillThenDownload stops and removes the old container before pulling
	// the image, for devices without room for two running containers.
	KillThenDownload
	// DeleteThenDownload stops and removes the old container, then removes
	// its image (when no other container uses it) before pulling or
	// building the new one: for devices without room for two images.
	DeleteThenDownload
	// HandOver pulls the new image, starts the new container beside the
	// old one (under TempName) and waits until it is healthy (with a
	// healthcheck) or signals that the hand-over is complete by creating
	// HandoverCompleteFile (or HandoverKillMeFile),
	// for at most ContainerSpec.HandoverTimeout; only
	// then is the old container stopped and removed and the new one
	// renamed. A new container with a healthcheck that is not healthy when
	// the timeout passes is removed and the old one keeps running (a
	// *HandoverError); one without a healthcheck that is still running
	// then takes over, as balena's does. Both containers run at once: they
	// must not publish the same host port.
	HandOver
	// AutoUpdate is DownloadThenKill, or DeleteThenDownload when the
	// engine's data root has less free space than the new image needs
	// (see ContainerSpec.ImageSize); where the size is not known it is
	// DownloadThenKill.
	AutoUpdate
)

// String returns the strategy's name, as balena names it:
// "download-then-kill", "kill-then-download", "delete-then-download",
// "hand-over" or "auto".
func (u UpdateStrategy) String() string {
	if int(u) < len(updateNames) {
		return updateNames[u]
	}
	return fmt.Sprintf("updatestrategy(%d)", uint8(u))
}

// ParseUpdateStrategy parses a strategy by its name (see String); ""
// means DownloadThenKill.
func ParseUpdateStrategy(s string) (UpdateStrategy, error) {
	if s == "" {
		return DownloadThenKill, nil
	}
	i := slices.Index(updateNames, s)
	if i < 0 {
		return 0, fmt.Errorf("docker: %w: unknown update strategy %q", ErrInvalidSpec, s)
	}
	return UpdateStrategy(i), nil
}

// HandoverCompleteFile is the file the new container of a HandOver update
// creates (in its own filesystem, or a volume mounted there) to say the
// hand-over is done before its healthcheck says so. Unlike balena, whose
// directory is shared, the old container's file is not looked up: it may
// be left from that container's own hand-over.
const HandoverCompleteFile = "/tmp/balena/handover-complete"

// HandoverKillMeFile is balena's older name of HandoverCompleteFile, also
// looked up.
const HandoverKillMeFile = "/tmp/resin/resin-kill-me"

// DefaultHandoverTimeout bounds a HandOver wait whose HandoverTimeout is
// zero (balena's default).
const DefaultHandoverTimeout = time.Minute

// PullPolicy says when an image is pulled. The zero value is PullMissing.
type PullPolicy uint8

const (
	// PullMissing pulls only when the image is not present locally.
	PullMissing PullPolicy = iota
	// PullNever never pulls; a missing image is an error (ErrImageMissing).
	PullNever
	// PullAlways asks the registry, once per walk and image
	// (DistributionInspect, a read), which image the reference names now,
	// and pulls it when the local image is another one (or missing); the
	// containers on the old image are then recreated. When the registry
	// cannot be asked, a local image is kept.
	PullAlways
	// PullRefresh pulls the image when it is missing, and again when the
	// last pull the package recorded for it is older than
	// ContainerSpec.PullEvery (Compose's pull_policy daily, weekly and
	// every_<duration>). The time of each pull is kept in
	// Project.PullRecords (a converge.Store) under PullRecordKey; a
	// project with a PullRefresh service and no PullRecords is a
	// *SpecError. A present image with no record is pulled once. A pull
	// that brings the image already present recreates nothing; one that
	// brings another image recreates the containers on the old one. The
	// pull is the image item's: it cannot be combined with the
	// KillThenDownload and DeleteThenDownload strategies, whose
	// containers pull their image themselves (a *SpecError).
	PullRefresh
)

// Dependency is one depends_on entry: wait for Service to meet Condition,
// for at most Timeout (0 means DefaultDependencyTimeout).
type Dependency struct {
	Service   string        `json:"service,omitzero"`
	Condition Condition     `json:"condition,omitzero"`
	Timeout   time.Duration `json:"timeout,omitzero,format:units"`
	// Restart restarts the container (stop, then start) after a walk
	// changed the dependency's container, as compose's depends_on
	// "restart: true" does; a restart that was due when the process
	// stopped happens on its next walk (converge.Refresher).
	Restart bool `json:"restart,omitzero"`
}

// DefaultDependencyTimeout bounds a depends_on wait whose Timeout is zero.
const DefaultDependencyTimeout = 2 * time.Minute

// Port publishes ContainerPort/Protocol on HostIP:HostPort. Protocol ""
// means tcp; HostPort "" lets the engine choose.
type Port struct {
	HostIP        string `json:"host_ip,omitzero"`
	HostPort      string `json:"published,omitzero"`
	ContainerPort uint16 `json:"target,omitzero"`
	Protocol      string `json:"protocol,omitzero"`
}

// Mount attaches a named volume (Type "volume", Source the engine volume
// name) or a host path (Type "bind") at Target. A volume without a Source
// is anonymous (Compose "- /data"): the engine creates it, and a
// recreated container keeps its predecessor's, as compose does.
type Mount struct {
	Type     string `json:"type,omitzero"`
	Source   string `json:"source,omitzero"`
	Target   string `json:"target,omitzero"`
	ReadOnly bool   `json:"read_only,omitzero"`
}

// File is a file a container receives before it starts (see
// ContainerSpec.Files). Its content takes part in the spec hash only
// through the keyed hash, never in clear; the content of a Secret file is
// scrubbed from errors like a secret environment value.
type File struct {
	// Target is the absolute path of the file in the container; required.
	Target string `json:"target,omitzero"`
	// Content is what the file holds.
	Content string `json:"content,omitzero"`
	// UID and GID own the file (numeric IDs); "" is root.
	UID string `json:"uid,omitzero"`
	GID string `json:"gid,omitzero"`
	// Mode is the file's permission bits; 0 means 0444, compose's default.
	Mode uint32 `json:"mode,omitzero"`
	// Secret marks a Compose secret (as opposed to a config).
	Secret bool `json:"secret,omitzero"`
}

// NetworkAttachment connects a container to the engine network Name with
// the given DNS aliases.
type NetworkAttachment struct {
	Name    string   `json:"name,omitzero"`
	Aliases []string `json:"aliases,omitempty"`
	// IPv4Address and IPv6Address are static addresses on the network
	// (Compose ipv4_address, ipv6_address); "" lets the engine choose.
	IPv4Address string `json:"ipv4_address,omitzero"`
	IPv6Address string `json:"ipv6_address,omitzero"`
}

// Healthcheck is a container healthcheck; Test is in Docker form
// (["CMD", ...] or ["CMD-SHELL", "..."]). Zero durations use the engine's
// defaults.
type Healthcheck struct {
	Test        []string      `json:"test,omitempty"`
	Interval    time.Duration `json:"interval,omitzero,format:units"`
	Timeout     time.Duration `json:"timeout,omitzero,format:units"`
	StartPeriod time.Duration `json:"start_period,omitzero,format:units"`
	Retries     int           `json:"retries,omitzero"`
	// StartInterval is the interval of the checks during StartPeriod
	// (Compose start_interval; engine API 1.44 or newer); 0 means
	// Interval.
	StartInterval time.Duration `json:"start_interval,omitzero,format:units"`
}

// ContainerSpec is what the user wants of one container. Only the fields
// set are compared with the engine ("compare only what the user
// specified"): an image default the user did not override is never drift.
type ContainerSpec struct {
	// Service is the service name, unique in a project; required.
	Service string `json:"service,omitzero"`
	// Name is the engine container name; "" means "<project>-<service>".
	Name string `json:"container_name,omitzero"`
	// Replicas is how many containers of the service run [scale,
	// deploy.replicas]. Nil runs one, named Name or "<project>-<service>".
	// Set, it runs that many (0 runs none), named as compose names them,
	// "<project>-<service>-1" to "-N", each with its number in
	// LabelComposeContainerNumber; Name is then allowed only with 1.
	// Scaling up creates the missing numbers, scaling down removes the
	// highest numbers first, and a change of the spec recreates every
	// replica, one after the other from number 1, each by the service's
	// update strategy. Each replica is an item of its own (ReplicaID); a
	// service that depends on this one waits for every replica. A fixed
	// host port (Port.HostPort without a range) is refused with more than
	// one replica, as compose refuses it. The count takes no part in the
	// spec hash: scaling leaves the running replicas alone. Setting it
	// renames the service's one container to replica 1, and clearing it
	// renames replica 1 back (the others are removed), without
	// recreating what matches.
	Replicas *int `json:"scale,omitzero"`
	// Image is the image reference; required. With Build it is the tag
	// the build gives the image.
	Image string `json:"image,omitzero"`
	// Build, when set, builds Image from a local context instead of
	// pulling it (Pull is then ignored): the build is an item of the
	// project's graph, before any container is created, and an image
	// built from another context or options than the present one is
	// built again (its containers are recreated on it).
	Build      *Build            `json:"build,omitzero"`
	Command    []string          `json:"command,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Env        map[string]string `json:"environment,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Ports      []Port            `json:"ports,omitempty"`
	Mounts     []Mount           `json:"volumes,omitempty"`
	// Files are put into the container after it is created and before it
	// starts (Compose secrets and configs given by content or by an
	// environment variable, as compose provides them without swarm). The
	// engine must be a ContainerCopier.
	Files []File `json:"files,omitempty"`
	// PostStart hooks run in the container, one after the other, once it
	// started (Compose post_start); PreStop hooks before the package stops
	// or removes it while it runs (Compose pre_stop), on a recreate too. A
	// hook that fails is a *HookError with its output; a failing PreStop
	// leaves the container running. The engine must be a
	// ContainerExecer.
	PostStart []Hook `json:"post_start,omitempty"`
	PreStop   []Hook `json:"pre_stop,omitempty"`
	// Links are legacy links to other services of the project, "SERVICE"
	// or "SERVICE:ALIAS" (Compose links): the engine resolves the alias
	// (the service's name by default) to the service's container on the
	// networks they share. They need a dependency on the service
	// (the Compose loader adds one with Restart, as compose-go does).
	Links []string `json:"links,omitempty"`
	// VolumesFrom mounts the volumes of another service's container,
	// "SERVICE[:ro|rw]", or of any container, "container:NAME[:ro|rw]"
	// (Compose volumes_from); a service is ordered before this one.
	VolumesFrom []string `json:"volumes_from,omitempty"`
	// ExternalLinks are legacy links to containers outside the project,
	// "CONTAINER" or "CONTAINER:ALIAS" (Compose external_links).
	ExternalLinks []string            `json:"external_links,omitempty"`
	Networks      []NetworkAttachment `json:"networks,omitempty"`
	Restart       string              `json:"restart,omitzero"`
	Healthcheck   *Healthcheck        `json:"healthcheck,omitzero"`
	// StopTimeout is how long a stop waits before killing; nil means the
	// engine default.
	StopTimeout *time.Duration `json:"stop_grace_period,omitzero,format:units"`
	Run         RunMode        `json:"run,omitzero"`
	DependsOn   []Dependency   `json:"depends_on,omitempty"`
	Update      UpdateStrategy `json:"update_strategy,omitzero"`
	// HandoverTimeout bounds the wait of a HandOver update for the new
	// container (0 means DefaultHandoverTimeout) [label
	// io.balena.update.handover-timeout, in milliseconds].
	HandoverTimeout time.Duration `json:"handover_timeout,omitzero,format:units"`
	// ImageSize is how many bytes the image needs on the engine's data
	// root, when the program knows it (a fleet server that built the
	// release can say); 0 means unknown. The package reads no registry
	// manifest, and the size of an image it builds is known only after the
	// build, so with 0 no space is checked. With a size, the free space of
	// the engine's data root is checked before anything is stopped, pulled
	// or built (see SpaceError and AutoUpdate).
	ImageSize uint64     `json:"image_size,omitzero"`
	Pull      PullPolicy `json:"pull_policy,omitzero"`
	// PullEvery is, under PullRefresh, how old the last recorded pull
	// may be before the image is pulled again; it must be set with
	// PullRefresh only.
	PullEvery time.Duration `json:"pull_every,omitzero,format:units"`
	// SecretEnv lists environment keys whose values are secret on top of
	// those matched by the default pattern (see IsSecretEnv).
	SecretEnv []string `json:"secret_env,omitempty"`
	// UpdateLock is the absolute path, inside the container, of its update
	// lock file; "" means the container takes no lock. While the file
	// exists the container is not recreated, stopped or removed: the item
	// fails with a *LockError matching converge.ErrLocked, unless the walk
	// is forced (converge.WithForce). The application creates the file
	// (exclusively, as with lockfile(1)) around work that must not be
	// interrupted and removes it when done. The path must be on the
	// container's filesystem, a named volume or a bind mount (not a
	// tmpfs), where the engine can look it up.
	UpdateLock string `json:"update_lock,omitzero"`
	// ComposeHash is compose's own configuration hash of the service
	// (LabelComposeConfigHash), which LoadCompose computes as compose
	// v2 does; it is written on the container so that "docker compose
	// up" on the same file finds the container up to date, and a
	// container compose started with the same hash is adopted without
	// being recreated. It does not take part in the spec hash. "" writes
	// no hash: compose then recreates the container on its next up.
	// LoadCompose leaves it "" for a service with a field it does not
	// carry out (LoadOptions.IgnoreUnsupported), since compose would apply
	// it; for a service with a secret value (IsSecretEnv, a URL's
	// password), since compose's hash is an unkeyed SHA-256 of the whole
	// configuration, against which anyone reading the labels could test
	// a guessed value; and for a service with an env_file or a lifecycle
	// hook, whose form in compose's hash the package does not reproduce.
	// The hash is compose ComposeVersion's: a compose release built on
	// another compose-go may hash a service otherwise, and then recreates
	// it once, as it recreates its own containers after such an upgrade.
	ComposeHash string `json:"compose_hash,omitzero"`

	// The options below are those of the engine's container create (the
	// Compose field of the same meaning is named in brackets). Their zero
	// values leave the engine's default; each one set takes part in the
	// spec hash, so changing it recreates the container. See hostspec.go.

	// CapAdd and CapDrop add and drop Linux capabilities ("NET_ADMIN",
	// "ALL") [cap_add, cap_drop].
	CapAdd  []string `json:"cap_add,omitempty"`
	CapDrop []string `json:"cap_drop,omitempty"`
	// CgroupParent is the parent cgroup [cgroup_parent].
	CgroupParent string `json:"cgroup_parent,omitzero"`
	// CPUShares is the relative CPU weight [cpu_shares]; CPUQuota the CPU
	// time in microseconds per 100ms period [cpu_quota]; CPUs the number
	// of CPUs, fractional [cpus, deploy.resources.limits.cpus]; CPUSet the
	// CPUs allowed ("0-2,4") [cpuset].
	CPUShares int64   `json:"cpu_shares,omitzero"`
	CPUQuota  int64   `json:"cpu_quota,omitzero"`
	CPUs      float64 `json:"cpus,omitzero"`
	CPUSet    string  `json:"cpuset,omitzero"`
	// Devices maps host device nodes into the container [devices].
	Devices []Device `json:"devices,omitempty"`
	// DNS servers, resolver options and search domains [dns, dns_opt,
	// dns_search].
	DNS        []string `json:"dns,omitempty"`
	DNSOptions []string `json:"dns_opt,omitempty"`
	DNSSearch  []string `json:"dns_search,omitempty"`
	// Hostname and Domainname of the container [hostname, domainname].
	Hostname   string `json:"hostname,omitzero"`
	Domainname string `json:"domainname,omitzero"`
	// Expose lists ports exposed without publishing them: "80",
	// "8000-8010", "53/udp" [expose].
	Expose []string `json:"expose,omitempty"`
	// ExtraHosts adds "host:ip" lines to /etc/hosts ("host-gateway" as the
	// IP names the host) [extra_hosts].
	ExtraHosts []string `json:"extra_hosts,omitempty"`
	// GroupAdd adds supplementary groups (names or IDs) [group_add].
	GroupAdd []string `json:"group_add,omitempty"`
	// IPC is the IPC namespace mode: private, shareable, host, none or
	// container:NAME [ipc].
	IPC string `json:"ipc,omitzero"`
	// MacAddress is the container's MAC address on its first network
	// [mac_address].
	MacAddress string `json:"mac_address,omitzero"`
	// Memory is the memory limit and MemoryReservation the soft limit, in
	// bytes [mem_limit, deploy.resources.limits.memory; mem_reservation,
	// deploy.resources.reservations.memory].
	Memory            int64 `json:"mem_limit,omitzero"`
	MemoryReservation int64 `json:"mem_reservation,omitzero"`
	// NetworkMode is "bridge", "host", "none" or "service:NAME" (share the
	// network namespace of the container of service NAME, which then
	// becomes a dependency); "" attaches Networks, or the engine's default
	// bridge [network_mode]. Networks must be empty when it is set.
	NetworkMode string `json:"network_mode,omitzero"`
	// OomKillDisable disables the OOM killer [oom_kill_disable];
	// OomScoreAdj tunes it, from -1000 to 1000 [oom_score_adj].
	OomKillDisable bool `json:"oom_kill_disable,omitzero"`
	OomScoreAdj    int  `json:"oom_score_adj,omitzero"`
	// PID is "host" to share the host's PID namespace; "" keeps the
	// container's own [pid].
	PID string `json:"pid,omitzero"`
	// PidsLimit bounds the number of processes; -1 means unlimited
	// [pids_limit, deploy.resources.limits.pids].
	PidsLimit int64 `json:"pids_limit,omitzero"`
	// Privileged gives the container every capability and device
	// [privileged]; ReadOnly mounts its root filesystem read-only
	// [read_only].
	Privileged bool `json:"privileged,omitzero"`
	ReadOnly   bool `json:"read_only,omitzero"`
	// SecurityOpt sets security options ("no-new-privileges",
	// "apparmor=unconfined", "seccomp=unconfined") [security_opt].
	SecurityOpt []string `json:"security_opt,omitempty"`
	// ShmSize is the size of /dev/shm in bytes [shm_size].
	ShmSize int64 `json:"shm_size,omitzero"`
	// StopSignal is the signal that stops the container ("SIGINT")
	// [stop_signal].
	StopSignal string `json:"stop_signal,omitzero"`
	// Sysctls are namespaced kernel parameters [sysctls].
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Tmpfs mounts a tmpfs at each "path" or "path:options" ("/run:size=1m")
	// [tmpfs].
	Tmpfs []string `json:"tmpfs,omitempty"`
	// Ulimits are resource limits [ulimits].
	Ulimits []Ulimit `json:"ulimits,omitempty"`
	// User runs the process as "user", "uid", "user:group" or "uid:gid"
	// [user].
	User string `json:"user,omitzero"`
	// UsernsMode is "host" to leave user namespace remapping [userns_mode].
	UsernsMode string `json:"userns_mode,omitzero"`
	// WorkingDir is the working directory, an absolute path [working_dir].
	WorkingDir string `json:"working_dir,omitzero"`
	// Platform is the platform of the container ("linux/arm64")
	// [platform].
	Platform string `json:"platform,omitzero"`
	// Runtime is the OCI runtime ("runc", "nvidia") [runtime].
	Runtime string `json:"runtime,omitzero"`
	// Init runs an init process as PID 1 when true; nil leaves the
	// engine's default [init].
	Init *bool `json:"init,omitzero"`
	// Logging selects the log driver and its options; nil leaves the
	// engine's default [logging].
	Logging *Logging `json:"logging,omitzero"`
	// StdinOpen keeps standard input open and Tty allocates a terminal
	// [stdin_open, tty].
	StdinOpen bool `json:"stdin_open,omitzero"`
	Tty       bool `json:"tty,omitzero"`
}

// Redacted replaces secret values in its output: converge.Redacted.
const Redacted = converge.Redacted

// validate checks the spec; object names the container for errors. It
// refuses every value the engine would refuse or misread, so nothing
// invalid is passed to the engine.
func (s *ContainerSpec) validate(object string) error {
	bad := func(field, reason string, args ...any) error {
		return &SpecError{Object: object, Service: s.Service, Field: field, Reason: fmt.Sprintf(reason, args...)}
	}
	switch {
	case s.Service == "":
		return bad("Service", "must not be empty")
	case s.Image == "":
		return bad("Image", "must not be empty")
	case s.Run > Once:
		return bad("Run", "unknown run mode %d", s.Run)
	case s.Update > AutoUpdate:
		return bad("Update", "unknown update strategy %d", s.Update)
	case s.Pull > PullRefresh:
		return bad("Pull", "unknown pull policy %d", s.Pull)
	case s.Pull == PullRefresh && s.PullEvery <= 0:
		return bad("PullEvery", "must be positive under PullRefresh")
	case s.Pull != PullRefresh && s.PullEvery != 0:
		return bad("PullEvery", "is read under PullRefresh only")
	case s.Pull == PullRefresh && s.Update.deferred():
		return bad("Pull", "PullRefresh pulls through the image item, before any container is stopped: it cannot be combined with update strategy %s, whose container pulls its image itself", s.Update)
	case s.StopTimeout != nil && *s.StopTimeout < 0:
		return bad("StopTimeout", "must not be negative")
	case s.HandoverTimeout < 0:
		return bad("HandoverTimeout", "must not be negative")
	case s.Replicas != nil && *s.Replicas < 0:
		return bad("Replicas", "must not be negative")
	case s.Replicas != nil && *s.Replicas > 1 && s.Name != "":
		return bad("Name", "container name %q must be unique: it cannot name %d replicas", s.Name, *s.Replicas)
	}
	if s.Replicas != nil && *s.Replicas > 1 {
		for i, p := range s.Ports {
			if p.HostPort != "" && p.HostPort != "0" && !strings.Contains(p.HostPort, "-") {
				return bad(fmt.Sprintf("Ports[%d].HostPort", i), "host port %s can be published by one of the %d replicas only: give a range or no host port",
					p.HostPort, *s.Replicas)
			}
		}
	}
	if s.Build != nil {
		if field, reason := s.Build.validate(); field != "" {
			return bad(field, "%s", reason)
		}
	}
	if reason := checkUpdateLock(s.UpdateLock); reason != "" {
		return bad("UpdateLock", "%s", reason)
	}
	if _, ok := s.Labels[LabelUpdateLock]; ok {
		return bad("Labels", "%s is set by the package: set UpdateLock instead", LabelUpdateLock)
	}
	for k := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return bad("Env", "bad variable name %q", k)
		}
	}
	if s.Restart != "" {
		if reason := checkRestart(s.Restart); reason != "" {
			return bad("Restart", "%s", reason)
		}
	}
	if h := s.Healthcheck; h != nil {
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"Interval", h.Interval}, {"Timeout", h.Timeout}, {"StartPeriod", h.StartPeriod}, {"StartInterval", h.StartInterval}} {
			if d.v < 0 {
				return bad("Healthcheck."+d.name, "must not be negative")
			}
		}
		if h.Retries < 0 {
			return bad("Healthcheck.Retries", "must not be negative")
		}
	}
	for i, m := range s.Mounts {
		if m.Type != "volume" && m.Type != "bind" {
			return bad(fmt.Sprintf("Mounts[%d].Type", i), "%q is not volume or bind", m.Type)
		}
		if m.Target == "" {
			return bad(fmt.Sprintf("Mounts[%d].Target", i), "is required")
		}
		if m.Type == "bind" && m.Source == "" {
			return bad(fmt.Sprintf("Mounts[%d].Source", i), "is required for a bind mount")
		}
	}
	for kind, hooks := range map[string][]Hook{"PostStart": s.PostStart, "PreStop": s.PreStop} {
		for i, h := range hooks {
			if len(h.Command) == 0 {
				return bad(fmt.Sprintf("%s[%d].Command", kind, i), "is required")
			}
		}
	}
	targets := map[string]bool{}
	for i, f := range s.Files {
		field := fmt.Sprintf("Files[%d].", i)
		switch {
		case !path.IsAbs(f.Target) || path.Clean(f.Target) != f.Target || f.Target == "/":
			return bad(field+"Target", "%q is not an absolute path to a file", f.Target)
		case targets[f.Target]:
			return bad(field+"Target", "%q is given twice", f.Target)
		case f.Mode > 0o7777:
			return bad(field+"Mode", "%#o is not a file mode", f.Mode)
		case s.ReadOnly:
			return bad(field+"Target", "a read-only container cannot receive a file (use a file-based secret, which is bind-mounted)")
		}
		for _, id := range [][2]string{{"UID", f.UID}, {"GID", f.GID}} {
			if n, err := strconv.Atoi(id[1]); id[1] != "" && (err != nil || n < 0) {
				return bad(field+id[0], "%q is not a numeric ID", id[1])
			}
		}
		targets[f.Target] = true
	}
	for i, p := range s.Ports {
		field := fmt.Sprintf("Ports[%d].", i)
		if p.ContainerPort == 0 {
			return bad(field+"ContainerPort", "is required")
		}
		if reason := checkHostPort(p.HostPort); reason != "" {
			return bad(field+"HostPort", "%s", reason)
		}
		if p.HostIP != "" && net.ParseIP(p.HostIP) == nil {
			return bad(field+"HostIP", "%q is not an IP address", p.HostIP)
		}
		switch p.Protocol {
		case "", "tcp", "udp", "sctp":
		default:
			return bad(field+"Protocol", "%q is not tcp, udp or sctp", p.Protocol)
		}
	}
	for i, n := range s.Networks {
		if n.Name == "" {
			return bad(fmt.Sprintf("Networks[%d].Name", i), "is required")
		}
	}
	if err := s.validateHost(bad); err != nil {
		return err
	}
	for i, d := range s.DependsOn {
		if d.Condition > ServiceCompletedSuccessfully {
			return bad(fmt.Sprintf("DependsOn[%d].Condition", i), "unknown condition %d", d.Condition)
		}
		if d.Timeout < 0 {
			return bad(fmt.Sprintf("DependsOn[%d].Timeout", i), "must not be negative")
		}
	}
	return nil
}

// checkUpdateLock returns why an update lock path is invalid, or "": it
// must be "" or a clean absolute path to a file.
func checkUpdateLock(p string) string {
	if p != "" && (!path.IsAbs(p) || path.Clean(p) != p || p == "/") {
		return fmt.Sprintf("%q is not a clean absolute path to a file", p)
	}
	return ""
}

// checkHostPort returns why a published host port ("", "8080" or a range
// "8000-8010") is invalid, or "".
func checkHostPort(v string) string {
	if v == "" {
		return ""
	}
	lo, hi, isRange := strings.Cut(v, "-")
	a, errA := strconv.ParseUint(lo, 10, 16)
	b, errB := a, error(nil)
	if isRange {
		b, errB = strconv.ParseUint(hi, 10, 16)
	}
	if errA != nil || errB != nil || b < a {
		return fmt.Sprintf("%q is not a port (0-65535) or a port range", v)
	}
	return ""
}

// checkRestart returns why a restart policy ("no", "always",
// "unless-stopped", "on-failure[:N]") is invalid, or "".
func checkRestart(v string) string {
	name, count, hasCount := strings.Cut(v, ":")
	switch name {
	case "no", "always", "unless-stopped":
		if !hasCount {
			return ""
		}
	case "on-failure":
		if n, err := strconv.Atoi(count); !hasCount || err == nil && n >= 0 {
			return ""
		}
		return fmt.Sprintf("bad retry count in %q", v)
	}
	return fmt.Sprintf("unknown policy %q (want no, always, unless-stopped or on-failure[:N])", v)
}

// fields returns one short hash per field the user specified, keyed with
// key (see Project.HashKey). Secret values only ever leave here hashed.
func (s *ContainerSpec) fields(key []byte) map[string]string {
	f := map[string]string{"image": short(key, s.Image)}
	put := func(k string, v any, set bool) {
		if set {
			b, _ := json.Marshal(v)
			f[k] = short(key, string(b))
		}
	}
	put("command", s.Command, len(s.Command) > 0)
	put("entrypoint", s.Entrypoint, len(s.Entrypoint) > 0)
	for k, v := range s.Env {
		f["env."+k] = short(key, v)
	}
	for k, v := range s.Labels {
		f["label."+k] = short(key, v)
	}
	ports := slices.Clone(s.Ports)
	sort.Slice(ports, func(i, j int) bool { return fmt.Sprint(ports[i]) < fmt.Sprint(ports[j]) })
	put("ports", hashShapes(ports, func(p Port) hashPort { return hashPort(p) }), len(ports) > 0)
	mounts := slices.Clone(s.Mounts)
	sort.Slice(mounts, func(i, j int) bool { return mounts[i].Target < mounts[j].Target })
	put("mounts", hashShapes(mounts, func(m Mount) hashMount { return hashMount(m) }), len(mounts) > 0)
	// The hashed shape of an attachment stays name and aliases, so the
	// hash of a container without static addresses does not change (see
	// hostFields for the addresses).
	type hashedAttachment struct {
		Name    string
		Aliases []string
	}
	nets := make([]hashedAttachment, len(s.Networks))
	for i, n := range s.Networks {
		a := slices.Clone(n.Aliases)
		slices.Sort(a)
		nets[i] = hashedAttachment{Name: n.Name, Aliases: a}
	}
	sort.Slice(nets, func(i, j int) bool { return nets[i].Name < nets[j].Name })
	put("networks", nets, len(nets) > 0)
	put("restart", s.Restart, s.Restart != "")
	put("healthcheck", hashShape(s.Healthcheck, func(h Healthcheck) hashHealthcheck { return hashHealthcheck(h) }), s.Healthcheck != nil)
	put("stop-timeout", s.StopTimeout, s.StopTimeout != nil)
	put("update-lock", s.UpdateLock, s.UpdateLock != "")
	put("post-start", s.PostStart, len(s.PostStart) > 0)
	put("links", s.Links, len(s.Links) > 0)
	put("volumes-from", s.VolumesFrom, len(s.VolumesFrom) > 0)
	put("external-links", s.ExternalLinks, len(s.ExternalLinks) > 0)
	put("pre-stop", s.PreStop, len(s.PreStop) > 0)
	for _, file := range s.Files {
		b, _ := json.Marshal(file)
		f["file."+file.Target] = short(key, string(b))
	}
	s.hostFields(put)
	return f
}

// short is a 12-hex-digit HMAC-SHA256 prefix of v under key: enough to
// tell values apart, too short to carry them, and useless for testing a
// guessed value without the key.
func short(key []byte, v string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil)[:6])
}

// specHashScheme prefixes LabelSpecHash values. A container whose hash
// lacks it was labelled by an older version with unkeyed SHA-256 hashes; it
// is recreated once, so no unkeyed hash stays on the engine.
const specHashScheme = "hmac-sha256:"

// hashFields is the canonical spec hash: HMAC-SHA256 under key over the
// sorted fields, prefixed with specHashScheme.
func hashFields(key []byte, f map[string]string) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := hmac.New(sha256.New, key)
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, f[k])
	}
	return specHashScheme + hex.EncodeToString(h.Sum(nil))
}

// projectHashKey returns the key of a project's spec hashes: HashKey, or when it
// is empty the documented default derived from the project name.
func projectHashKey(p *Project) []byte {
	if len(p.HashKey) > 0 {
		return slices.Clone(p.HashKey)
	}
	k := sha256.Sum256([]byte("converge docker spec hash\x00" + p.Name))
	return k[:]
}

func encodeFields(f map[string]string) string {
	b, _ := json.Marshal(f) // map keys are sorted
	return string(b)
}

func decodeFields(s string) map[string]string {
	if s == "" {
		return nil
	}
	var f map[string]string
	if json.Unmarshal([]byte(s), &f) != nil {
		return nil
	}
	return f
}

// redactor replaces every secret value of a spec in a string: the values
// of secret environment keys (IsSecretEnv) and the passwords of URLs with
// credentials anywhere in the spec (DATABASE_URL=postgres://u:pw@db, a
// command argument). Its string method also scrubs the password of any
// other URL-shaped text, so an engine message quoting a URL leaks nothing.
type redactor []string

func newRedactor(s *ContainerSpec) redactor {
	var r redactor
	add := func(v string) {
		if v != "" && !slices.Contains(r, v) {
			r = append(r, v)
		}
	}
	for k, v := range s.Env {
		if IsSecretEnv(k, s.SecretEnv) {
			add(v)
		}
		for _, pw := range urlPasswords(v) {
			add(pw)
		}
	}
	for _, h := range slices.Concat(s.PostStart, s.PreStop) {
		for k, v := range h.Env {
			if IsSecretEnv(k, s.SecretEnv) {
				add(v)
			}
		}
	}
	for _, f := range s.Files {
		if f.Secret {
			add(f.Content)
			add(strings.TrimSpace(f.Content))
		}
	}
	var values []string
	values = append(values, s.Command...)
	values = append(values, s.Entrypoint...)
	for _, v := range s.Labels {
		values = append(values, v)
	}
	if s.Healthcheck != nil {
		values = append(values, s.Healthcheck.Test...)
	}
	for _, v := range values {
		for _, pw := range urlPasswords(v) {
			add(pw)
		}
	}
	// Longest first so a secret containing another is replaced whole.
	sort.Slice(r, func(i, j int) bool { return len(r[i]) > len(r[j]) })
	return r
}

// urlPasswords returns the passwords of the URLs with credentials in v.
func urlPasswords(v string) []string { return converge.URLPasswords(v) }

// redactURLs replaces the password of every URL with credentials in s
// (converge.RedactURLs). The package applies it, with the values of secret
// environment keys, to every error it returns about a container.
func redactURLs(s string) string { return converge.RedactURLs(s) }

func (r redactor) string(s string) string {
	for _, v := range r {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	return redactURLs(s)
}
