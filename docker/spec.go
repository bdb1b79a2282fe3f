package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
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
)

// Sentinel errors of the package. Typed errors below match them.
var (
	// ErrInvalidSpec is matched by every *SpecError.
	ErrInvalidSpec = errors.New("docker: invalid spec")
	// ErrImageMissing means an image is not present locally and may not be
	// pulled (PullNever).
	ErrImageMissing = errors.New("docker: image not present locally")
	// ErrImageInUse means an image marked Absent is still used by a container.
	ErrImageInUse = errors.New("docker: image in use")
	// ErrDependencyTimeout means a depends_on condition was not met in time.
	ErrDependencyTimeout = errors.New("docker: dependency condition not met in time")
	// ErrDependencyFailed means a dependency can no longer meet its
	// condition (for example it exited with a non-zero code).
	ErrDependencyFailed = errors.New("docker: dependency failed")
	// ErrNotOwned means an object with the wanted name exists but was not
	// created by this package, so it is neither changed nor removed.
	ErrNotOwned = errors.New("docker: object not owned by converge")
	// ErrInvalidCompose means compose-go rejected a Compose file (syntax,
	// schema or consistency); the loader's message follows.
	ErrInvalidCompose = errors.New("docker: invalid compose file")
	// ErrUnsupported is matched by *UnsupportedError from the Compose loader.
	ErrUnsupported = errors.New("docker: unsupported compose fields")
)

// SpecError names the object and field of an invalid spec.
type SpecError struct {
	Object string
	Field  string
	Reason string
}

// Error describes the problem, naming its culprit.
func (e *SpecError) Error() string {
	return fmt.Sprintf("docker: %s: %s: %s", e.Object, e.Field, e.Reason)
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
	return 0, fmt.Errorf("docker: unknown depends_on condition %q", s)
}

// UpdateStrategy says in which order a container whose image changed is
// replaced. The zero value is DownloadThenKill.
type UpdateStrategy uint8

const (
	// DownloadThenKill pulls the new image first (as its own graph item)
	// and only then replaces the container: the shortest downtime.
	DownloadThenKill UpdateStrategy = iota
	// KillThenDownload stops and removes the old container before pulling
	// the image, for devices without room for two images.
	KillThenDownload
)

// String returns "download-then-kill" or "kill-then-download".
func (u UpdateStrategy) String() string {
	if u == KillThenDownload {
		return "kill-then-download"
	}
	return "download-then-kill"
}

// PullPolicy says when an image is pulled. The zero value is PullMissing.
type PullPolicy uint8

const (
	// PullMissing pulls only when the image is not present locally.
	PullMissing PullPolicy = iota
	// PullNever never pulls; a missing image is an error (ErrImageMissing).
	PullNever
)

// Dependency is one depends_on entry: wait for Service to meet Condition,
// for at most Timeout (0 means DefaultDependencyTimeout).
type Dependency struct {
	Service   string
	Condition Condition
	Timeout   time.Duration
}

// DefaultDependencyTimeout bounds a depends_on wait whose Timeout is zero.
const DefaultDependencyTimeout = 2 * time.Minute

// Port publishes ContainerPort/Protocol on HostIP:HostPort. Protocol ""
// means tcp; HostPort "" lets the engine choose.
type Port struct {
	HostIP        string
	HostPort      string
	ContainerPort uint16
	Protocol      string
}

// Mount attaches a named volume (Type "volume", Source the engine volume
// name) or a host path (Type "bind") at Target.
type Mount struct {
	Type     string
	Source   string
	Target   string
	ReadOnly bool
}

// NetworkAttachment connects a container to the engine network Name with
// the given DNS aliases.
type NetworkAttachment struct {
	Name    string
	Aliases []string
}

// Healthcheck is a container healthcheck; Test is in Docker form
// (["CMD", ...] or ["CMD-SHELL", "..."]). Zero durations use the engine's
// defaults.
type Healthcheck struct {
	Test        []string
	Interval    time.Duration
	Timeout     time.Duration
	StartPeriod time.Duration
	Retries     int
}

// ContainerSpec is what the user wants of one container. Only the fields
// set are compared with the engine ("compare only what the user
// specified"): an image default the user did not override is never drift.
type ContainerSpec struct {
	// Service is the service name, unique in a project; required.
	Service string
	// Name is the engine container name; "" means "<project>-<service>".
	Name string
	// Image is the image reference; required.
	Image       string
	Command     []string
	Entrypoint  []string
	Env         map[string]string
	Labels      map[string]string
	Ports       []Port
	Mounts      []Mount
	Networks    []NetworkAttachment
	Restart     string
	Healthcheck *Healthcheck
	// StopTimeout is how long a stop waits before killing; nil means the
	// engine default.
	StopTimeout *time.Duration
	Run         RunMode
	DependsOn   []Dependency
	Update      UpdateStrategy
	Pull        PullPolicy
	// SecretEnv lists environment keys whose values are secret on top of
	// those matched by the default pattern (see IsSecretEnv).
	SecretEnv []string
}

var secretKey = regexp.MustCompile(`(?i)(PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH)`)

// IsSecretEnv reports whether the environment key is secret: it matches the
// default pattern (PASSWORD, SECRET, TOKEN, API_KEY, PRIVATE_KEY,
// CREDENTIAL, AUTH, case-insensitive) or is listed in extra.
func IsSecretEnv(key string, extra []string) bool {
	return secretKey.MatchString(key) || slices.Contains(extra, key)
}

// Redacted replaces secret values in its output.
const Redacted = "[redacted]"

// validate checks the spec; object names the container for errors.
func (s *ContainerSpec) validate(object string) error {
	switch {
	case s.Service == "":
		return &SpecError{Object: object, Field: "Service", Reason: "must not be empty"}
	case s.Image == "":
		return &SpecError{Object: object, Field: "Image", Reason: "must not be empty"}
	case s.Run > Once:
		return &SpecError{Object: object, Field: "Run", Reason: "unknown run mode"}
	}
	for _, m := range s.Mounts {
		if m.Type != "volume" && m.Type != "bind" {
			return &SpecError{Object: object, Field: "Mounts", Reason: fmt.Sprintf("type %q is not volume or bind", m.Type)}
		}
		if m.Target == "" || m.Source == "" {
			return &SpecError{Object: object, Field: "Mounts", Reason: "source and target are required"}
		}
	}
	for _, p := range s.Ports {
		if p.ContainerPort == 0 {
			return &SpecError{Object: object, Field: "Ports", Reason: "container port is required"}
		}
	}
	for _, n := range s.Networks {
		if n.Name == "" {
			return &SpecError{Object: object, Field: "Networks", Reason: "network name is required"}
		}
	}
	return nil
}

// fields returns one short hash per field the user specified. Secret
// values only ever leave here hashed.
func (s *ContainerSpec) fields() map[string]string {
	f := map[string]string{"image": short(s.Image)}
	put := func(k string, v any, set bool) {
		if set {
			b, _ := json.Marshal(v)
			f[k] = short(string(b))
		}
	}
	put("command", s.Command, len(s.Command) > 0)
	put("entrypoint", s.Entrypoint, len(s.Entrypoint) > 0)
	for k, v := range s.Env {
		f["env."+k] = short(v)
	}
	for k, v := range s.Labels {
		f["label."+k] = short(v)
	}
	ports := slices.Clone(s.Ports)
	sort.Slice(ports, func(i, j int) bool { return fmt.Sprint(ports[i]) < fmt.Sprint(ports[j]) })
	put("ports", ports, len(ports) > 0)
	mounts := slices.Clone(s.Mounts)
	sort.Slice(mounts, func(i, j int) bool { return mounts[i].Target < mounts[j].Target })
	put("mounts", mounts, len(mounts) > 0)
	nets := make([]NetworkAttachment, len(s.Networks))
	for i, n := range s.Networks {
		a := slices.Clone(n.Aliases)
		slices.Sort(a)
		nets[i] = NetworkAttachment{Name: n.Name, Aliases: a}
	}
	sort.Slice(nets, func(i, j int) bool { return nets[i].Name < nets[j].Name })
	put("networks", nets, len(nets) > 0)
	put("restart", s.Restart, s.Restart != "")
	put("healthcheck", s.Healthcheck, s.Healthcheck != nil)
	put("stop-timeout", s.StopTimeout, s.StopTimeout != nil)
	return f
}

// short is a 12-hex-digit SHA-256 prefix: enough to tell values apart,
// too short to carry them.
func short(v string) string {
	h := sha256.Sum256([]byte(v))
	return hex.EncodeToString(h[:6])
}

// hashFields is the canonical spec hash: SHA-256 over the sorted fields.
func hashFields(f map[string]string) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, f[k])
	}
	return hex.EncodeToString(h.Sum(nil))
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

// redactor replaces every secret value of a spec in a string.
type redactor []string

func newRedactor(s *ContainerSpec) redactor {
	var r redactor
	for k, v := range s.Env {
		if v != "" && IsSecretEnv(k, s.SecretEnv) {
			r = append(r, v)
		}
	}
	// Longest first so a secret containing another is replaced whole.
	sort.Slice(r, func(i, j int) bool { return len(r[i]) > len(r[j]) })
	return r
}

func (r redactor) string(s string) string {
	for _, v := range r {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	return s
}

// err returns err with secret values replaced, keeping errors.Is working.
func (r redactor) err(err error) error {
	if err == nil || len(r) == 0 {
		return err
	}
	msg := err.Error()
	if red := r.string(msg); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }

// Is matches what the wrapped error matches, without exposing it through
// Unwrap (whose message would carry the secret).
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }
