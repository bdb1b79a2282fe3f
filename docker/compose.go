package docker

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/interpolation"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"
)

// LoadOptions tune LoadCompose. The zero value loads a file that names its
// project, with no interpolation variables, rejecting unsupported fields.
type LoadOptions struct {
	// ProjectName overrides the file's top-level name.
	ProjectName string
	// WorkingDir resolves relative bind mounts; "" means the current directory.
	WorkingDir string
	// Env holds the variables for ${VAR} interpolation.
	Env map[string]string
	// IgnoreUnsupported loads a file with unsupported fields, listing them
	// in Project.Unsupported, instead of failing with *UnsupportedError.
	IgnoreUnsupported bool
	// DependencyTimeout bounds every depends_on wait that has no
	// x-timeout of its own; 0 means DefaultDependencyTimeout.
	DependencyTimeout time.Duration
	// HashKey becomes Project.HashKey: the key of the spec hashes in the
	// containers' labels. Nil derives one from the project name.
	HashKey []byte
	// EnvFileDirs are directories outside WorkingDir from which a
	// service's env_file may be read. By default env_file is read only
	// from inside WorkingDir (through os.Root, so neither ".." nor a
	// symbolic link leads out of it); a file elsewhere is a *SpecError.
	EnvFileDirs []string
}

// UnsupportedError lists the Compose fields set in a file that the loader
// does not carry out, as "services.<name>.<field>". It matches
// ErrUnsupported.
type UnsupportedError struct {
	Fields []string
	// Reasons says, for the fields refused by design, why they are not
	// carried out (keyed by the entry of Fields); other fields are not
	// implemented yet.
	Reasons map[string]string
}

// Error describes the problem, naming its culprit.
func (e *UnsupportedError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f
		if r := e.Reasons[f]; r != "" {
			parts[i] += " (" + r + ")"
		}
	}
	return "docker: compose: unsupported fields: " + strings.Join(parts, ", ")
}

// hooksFromCompose returns Compose lifecycle hooks as Hooks; a variable
// without a value takes the project's, as the service's do.
func hooksFromCompose(hooks []types.ServiceHook, env types.Mapping) []Hook {
	var out []Hook
	for _, h := range hooks {
		hook := Hook{Command: slices.Clone([]string(h.Command)), User: h.User, Privileged: h.Privileged, WorkingDir: h.WorkingDir}
		for k, v := range h.Environment.Resolve(env.Resolve) {
			if v != nil {
				if hook.Env == nil {
					hook.Env = map[string]string{}
				}
				hook.Env[k] = *v
			}
		}
		out = append(out, hook)
	}
	return out
}

// fileRef is a service's reference to a top-level secret or config.
type fileRef struct {
	kind string // "secrets" or "configs"
	ref  types.FileReferenceConfig
	obj  types.FileObjectConfig
}

// filesFromCompose carries a service's secrets and configs into spec as
// compose does without swarm: a file-based one is bind-mounted read-only,
// one given by content or by an environment variable becomes a File
// copied in before the container starts. A secret's target defaults to
// /run/secrets/<source> (a relative one is under /run/secrets), a
// config's to /<source>. A variable is looked up where compose-go resolved
// it (the variables of the file that declares the object, an include's
// env_file included), then in env. It returns the fields it does not carry
// out; an unset variable is a *SpecError naming it, never its value.
func filesFromCompose(refs []fileRef, env types.Mapping, spec *ContainerSpec, prefix string) ([]string, error) {
	var unsupported []string
	for _, r := range refs {
		field := prefix + r.kind + "." + r.ref.Source + "."
		target := r.ref.Target
		switch {
		case r.kind == "secrets" && target == "":
			target = "/run/secrets/" + r.ref.Source
		case r.kind == "secrets" && !path.IsAbs(target):
			target = "/run/secrets/" + target
		case target == "":
			target = "/" + r.ref.Source
		}
		target = path.Clean("/" + target)
		if bool(r.obj.External) {
			continue // refused at the top level
		}
		if r.obj.File != "" {
			unsupported = append(unsupported, setFields(field, r.ref, "Source", "Target")...)
			spec.Mounts = append(spec.Mounts, Mount{Type: "bind", Source: r.obj.File, Target: target, ReadOnly: true})
			continue
		}
		content := r.obj.Content
		if r.obj.Environment != "" {
			v, ok := env[r.obj.Environment]
			if r.obj.Content != "" {
				// compose-go resolved the variable where the object was
				// declared (an included file, with the variables of
				// the include's env_file) into its content.
				v, ok = r.obj.Content, true
			}
			if !ok {
				return nil, &SpecError{Object: "service " + spec.Service, Service: spec.Service, Field: r.kind + "." + r.ref.Source,
					Reason: fmt.Sprintf("environment variable %s is not set", r.obj.Environment)}
			}
			content = v
		}
		f := File{Target: target, Content: content, UID: r.ref.UID, GID: r.ref.GID, Secret: r.kind == "secrets"}
		if r.ref.Mode != nil {
			f.Mode = uint32(*r.ref.Mode)
		}
		spec.Files = append(spec.Files, f)
	}
	return unsupported, nil
}

// noEffectService are the Compose service fields accepted that have no
// effect on a deployment, with the reason given in Project.NoEffect.
var noEffectService = map[string]string{
	"develop": "read by compose watch and compose up --watch only (a development loop); compose up, as converge, changes nothing for it",
}

// refusedService are the Compose service fields refused by design, with
// the reason given in UnsupportedError.Reasons.
var refusedService = map[string]string{
	"attach":              "it chooses which logs compose up prints; converge prints none",
	"models":              "models run in Docker Model Runner, not on the engine converge drives",
	"provider":            "a provider service runs a compose plugin instead of a container; converge runs containers only",
	"uid":                 "a file-based secret or config is bind-mounted: it keeps the host file's owner and mode (compose ignores them too)",
	"gid":                 "a file-based secret or config is bind-mounted: it keeps the host file's owner and mode (compose ignores them too)",
	"mode":                "a file-based secret or config is bind-mounted: it keeps the host file's owner and mode (compose ignores them too)",
	"external":            "an external secret or config lives in a swarm, which converge does not use",
	"additional_contexts": "named build contexts need BuildKit's session API, which the engine's build endpoint used here lacks",
	"volumes(image)":      "a volume of type image needs engine API 1.48 (Docker Engine 28.0) or later; not carried yet",
	"image":               "a volume of type image needs engine API 1.48 (Docker Engine 28.0) or later; not carried yet",
	"interface_name":      "a network interface's name needs engine API 1.49 (Docker Engine 28.1) or later; not carried yet",
	"platforms":           "more than one platform makes a multi-platform image, which needs buildx (BuildKit); the engine's classic build endpoint builds one platform",
}

// refusalReasons returns the reasons of the refused-by-design fields in
// fields, nil when none.
func refusalReasons(fields []string) map[string]string {
	var out map[string]string
	for _, f := range fields {
		if r := refusedService[f[strings.LastIndex(f, ".")+1:]]; r != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[f] = r
		}
	}
	return out
}

// Is makes UnsupportedError match ErrUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Fields of the Compose service model that the loader carries out. Every
// other field that is set is reported as unsupported.
var supportedService = map[string]bool{
	"Name": true, "Restart": true, "Scale": true, "ContainerName": true, "Extensions": true,
	"ContainerSpec": true, "WorkloadSpec": true,
	// Fields with no effect on a deployment (noEffectService), listed in
	// Project.NoEffect.
	"Develop": true,
	// ContainerSpec
	"Command": true, "Entrypoint": true, "Environment": true, "Image": true, "Labels": true,
	"CustomLabels": true, "EnvFiles": true, "Secrets": true, "Configs": true, "PostStart": true, "PreStop": true, "Links": true, "VolumesFrom": true, "ExternalLinks": true, "Networks": true, "StopGracePeriod": true, "Volumes": true, "PullPolicy": true,
	// WorkloadSpec
	"DependsOn": true, "HealthCheck": true, "Ports": true,
}

func init() {
	for _, f := range hostServiceFields {
		supportedService[f] = true
	}
}

// unsupportedFields lists the set fields of v (a struct) not supported,
// descending into the embedded specs.
func unsupportedFields(prefix string, v reflect.Value) []string {
	var out []string
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		fv := v.Field(i)
		if f.Anonymous && fv.Kind() == reflect.Struct {
			out = append(out, unsupportedFields(prefix, fv)...)
			continue
		}
		if !supportedService[f.Name] && f.IsExported() && !fv.IsZero() {
			name := f.Name
			if tag := strings.Split(f.Tag.Get("yaml"), ",")[0]; tag != "" {
				name = tag
			}
			out = append(out, prefix+name)
		}
	}
	return out
}

// setFields lists the fields of struct v (or *v) that are set but not in
// allowed, as prefix+yaml name; Extensions are never listed.
func setFields(prefix string, v any, allowed ...string) []string {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	var out []string
	t := rv.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Name == "Extensions" || slices.Contains(allowed, f.Name) || rv.Field(i).IsZero() {
			continue
		}
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if name == "" {
			name = f.Name
		}
		out = append(out, prefix+name)
	}
	return out
}

// LoadComposeFile reads a Compose file and calls LoadCompose. WorkingDir
// defaults to the file's directory (made absolute, as compose makes it). The project's ComposeFiles
// and ComposeDir name the file and its directory.
func LoadComposeFile(ctx context.Context, path string, opts LoadOptions) (*Project, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("docker: compose: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("docker: compose: %w", err)
	}
	if opts.WorkingDir == "" {
		opts.WorkingDir = filepath.Dir(abs)
	}
	p, err := LoadCompose(ctx, b, opts)
	if err != nil {
		return nil, err
	}
	p.ComposeFiles, p.ComposeDir = []string{abs}, filepath.Dir(abs)
	return p, nil
}

// LoadCompose turns a Compose file into a Project using compose-go (the
// maintained loader, which validates against the Compose schema). It
// carries out, per service: image, command, entrypoint, environment,
// labels, ports, volumes (named and bind), networks with aliases, restart,
// healthcheck, stop_grace_period, pull_policy (missing, never, always, build, and daily, weekly or every_<duration> as PullRefresh),
// container_name and depends_on with its conditions; every container
// option of ContainerSpec under its Compose name (cap_add ... working_dir,
// cpus, deploy.resources limits of cpus, memory and pids and reservation
// of memory, platform, runtime, init, logging, stdin_open, tty, and a
// network's ipv4_address and ipv6_address); and the top-level networks
// (with driver_opts, enable_ipv6 and ipam) and volumes (with driver_opts;
// external ones are used, not created). A top-level include: is loaded
// with the files it names, relative to WorkingDir, and a service's
// extends: is resolved, as compose-go does: neither is ever dropped, and
// one that cannot be read fails with ErrInvalidCompose. Two
// extensions are read: x-timeout on a depends_on entry (a duration) and
// x-update on a service (an UpdateStrategy by name: "download-then-kill",
// "kill-then-download", "delete-then-download", "hand-over" or "auto").
// balena's labels io.balena.update.strategy (LabelUpdateStrategy, the same
// names; x-update must agree with it) and io.balena.update.handover-timeout
// (LabelHandoverTimeout, milliseconds) set ContainerSpec.Update and
// HandoverTimeout instead of labels.
// The label io.convergekit.update-lock (LabelUpdateLock) on a service sets
// its ContainerSpec.UpdateLock instead of a label.
// A service that others wait for with service_completed_successfully runs
// Once. develop (compose watch's) is accepted and changes nothing, as in
// compose up, and is listed in Project.NoEffect. Any other field set is
// unsupported: the *UnsupportedError names
// every one of them at once, top-level secrets, configs, models and jobs
// included (see LoadOptions.IgnoreUnsupported).
func LoadCompose(ctx context.Context, content []byte, opts LoadOptions) (*Project, error) {
	if err := checkComposeValues(content, opts.Env); err != nil {
		return nil, err
	}
	wd := opts.WorkingDir
	if wd == "" {
		wd, _ = os.Getwd()
	}
	details := types.ConfigDetails{
		WorkingDir:  wd,
		ConfigFiles: []types.ConfigFile{{Filename: "compose.yaml", Content: content}},
		Environment: types.Mapping(opts.Env),
	}
	if details.Environment == nil {
		details.Environment = types.Mapping{}
	}
	cp, err := loader.LoadWithContext(ctx, details, func(o *loader.Options) {
		o.ResolvePaths = true
		// env_file is read by resolveEnvFiles, inside the allowed
		// directories only.
		o.SkipResolveEnvironment = true
		if opts.ProjectName != "" {
			o.SetProjectName(opts.ProjectName, true)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("docker: %w: %w", ErrInvalidCompose, err)
	}
	preStartServices(cp)
	// Compose hashes a service with its env_file entries, which
	// resolveEnvFiles merges and drops: such a service gets no hash.
	var withEnvFile []string
	for name, s := range cp.Services {
		if len(s.EnvFiles) > 0 {
			withEnvFile = append(withEnvFile, name)
		}
	}
	used, err := resolveEnvFiles(cp, wd, opts.EnvFileDirs)
	if err != nil {
		return nil, err
	}
	p, err := fromCompose(cp, opts)
	if err != nil {
		return nil, err
	}
	for i := range p.Containers {
		if slices.Contains(withEnvFile, p.Containers[i].Service) {
			p.Containers[i].ComposeHash = ""
		}
	}
	p.EnvFiles = used
	return p, nil
}

// preStartServices turns the pre_start hooks of every service into
// services of their own, named "<service>-pre_start-<i>", run once, one
// after the other, before the service, which waits for each to complete
// successfully (compose-go has already merged into each hook what it
// inherits from its service). A hook without an image runs the service's,
// built once when the service is built. A hook does not take its
// service's container_name, ports or restart policy.
func preStartServices(cp *types.Project) {
	for _, name := range slices.Sorted(mapKeys(cp.Services)) {
		s := cp.Services[name]
		if len(s.PreStart) == 0 {
			continue
		}
		if s.DependsOn == nil {
			s.DependsOn = types.DependsOnConfig{}
		}
		prev := ""
		for i, h := range s.PreStart {
			hook := types.ServiceConfig{Name: fmt.Sprintf("%s-pre_start-%d", name, i), ContainerSpec: h.ContainerSpec}
			hook.ContainerName, hook.Ports, hook.Restart = "", nil, ""
			switch {
			case hook.Image != "":
			case s.Image != "":
				hook.Image = s.Image
			case s.Build != nil: // the service's built image, built once
				hook.Image, hook.Build = cp.Name+"-"+name, s.Build
			}
			if prev != "" {
				if hook.DependsOn == nil {
					hook.DependsOn = types.DependsOnConfig{}
				}
				hook.DependsOn[prev] = types.ServiceDependency{Condition: types.ServiceConditionCompletedSuccessfully, Required: true}
			}
			cp.Services[hook.Name] = hook
			s.DependsOn[hook.Name] = types.ServiceDependency{Condition: types.ServiceConditionCompletedSuccessfully, Required: true}
			prev = hook.Name
		}
		s.PreStart = nil
		cp.Services[name] = s
	}
}

// resolveEnvFiles sets the environment of every service of cp as compose
// does (values without one from the project's variables, then the
// env_file entries in order, overridden by environment), reading each
// env_file inside wd or one of dirs only, and returns the files read.
func resolveEnvFiles(cp *types.Project, wd string, dirs []string) ([]EnvFileRead, error) {
	var used []EnvFileRead
	for _, name := range slices.Sorted(mapKeys(cp.Services)) {
		s := cp.Services[name]
		env := s.Environment.Resolve(cp.Environment.Resolve)
		vars := env.ToMapping()
		for i, ef := range s.EnvFiles {
			bad := func(reason string) error {
				return &SpecError{Object: "service " + name, Service: name, Field: fmt.Sprintf("env_file[%d]", i), Reason: reason}
			}
			f, shown, err := openInside(ef.Path, append([]string{wd}, dirs...))
			switch {
			case errors.Is(err, errOutside):
				return nil, bad(fmt.Sprintf("%q is outside the project directory (allow its directory in LoadOptions.EnvFileDirs)", ef.Path))
			case errors.Is(err, fs.ErrNotExist) && !bool(ef.Required):
				continue
			case errors.Is(err, fs.ErrNotExist):
				return nil, bad(fmt.Sprintf("%q does not exist (required: false makes it optional)", shown))
			case err != nil:
				return nil, bad(fmt.Sprintf("%q cannot be read: %v", shown, errors.Unwrap(err)))
			}
			lookup := func(k string) (string, bool) {
				if v, ok := cp.Environment.Resolve(k); ok {
					return v, true
				}
				if v, ok := env[k]; ok && v != nil {
					return *v, true
				}
				return "", false
			}
			if ef.Format == "raw" {
				err = parseRawEnv(f, vars, lookup)
			} else {
				err = dotenv.ParseWithFormat(f, ef.Path, vars, lookup, ef.Format)
			}
			f.Close()
			if err != nil {
				// The parser's message quotes the file's content.
				return nil, bad(fmt.Sprintf("%q is not an env file (format %q)", shown, cmp.Or(ef.Format, "dotenv")))
			}
			used = append(used, EnvFileRead{Service: name, Path: shown})
		}
		s.Environment = vars.ToMappingWithEquals().OverrideBy(env)
		s.EnvFiles = nil
		cp.Services[name] = s
	}
	return used, nil
}

// parseRawEnv reads an env file in compose's "raw" format, the one of
// "docker run --env-file": KEY=VALUE lines taken literally, "#" comments,
// and a bare KEY taken from lookup (or left out when it has no value).
func parseRawEnv(r io.Reader, vars map[string]string, lookup func(string) (string, bool)) error {
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimLeft(sc.Text(), " \t")
		if n == 1 {
			line = strings.TrimPrefix(line, "\ufeff")
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, hasValue := strings.Cut(line, "=")
		if key == "" || strings.ContainsAny(key, " \t") {
			return fmt.Errorf("line %d: no variable name", n)
		}
		if !hasValue {
			if value, hasValue = lookup(key); !hasValue {
				continue
			}
		}
		vars[key] = value
	}
	return sc.Err()
}

// errOutside means a path is in none of the allowed directories.
var errOutside = errors.New("outside the allowed directories")

// openInside opens the file at path p through an os.Root of
// the first of dirs that holds it, so neither ".." nor a symbolic link
// leads out of that directory. It returns the path as shown to users:
// relative to dirs[0] when inside it.
func openInside(p string, dirs []string) (*os.File, string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return nil, p, err
	}
	for i, d := range dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		rel, err := filepath.Rel(abs, p)
		if err != nil || !filepath.IsLocal(rel) {
			continue
		}
		shown := p
		if i == 0 {
			shown = rel
		}
		f, err := os.OpenInRoot(abs, rel)
		return f, shown, err
	}
	return nil, p, errOutside
}

func fromCompose(cp *types.Project, opts LoadOptions) (*Project, error) {
	p := &Project{Name: cp.Name, HashKey: slices.Clone(opts.HashKey)}
	unsupported := setFields("", cp, "Name", "WorkingDir", "Services", "Networks", "Volumes", "ComposeFiles", "Environment",
		"DisabledServices", "DisabledJobs", "Profiles", "Secrets", "Configs")
	for _, key := range slices.Sorted(mapKeys(cp.Secrets)) {
		unsupported = append(unsupported, setFields("secrets."+key+".", types.FileObjectConfig(cp.Secrets[key]), "Name", "File", "Environment", "Content")...)
	}
	for _, key := range slices.Sorted(mapKeys(cp.Configs)) {
		unsupported = append(unsupported, setFields("configs."+key+".", types.FileObjectConfig(cp.Configs[key]), "Name", "File", "Environment", "Content")...)
	}
	netName := map[string]string{}
	for _, key := range slices.Sorted(mapKeys(cp.Networks)) {
		n := cp.Networks[key]
		name := n.Name
		if name == "" {
			name = cp.Name + "_" + key
		}
		netName[key] = name
		if bool(n.External) {
			continue
		}
		spec, skipped := networkFromCompose(key, name, n)
		unsupported = append(unsupported, skipped...)
		p.Networks = append(p.Networks, spec)
	}
	volName := map[string]string{}
	for _, key := range slices.Sorted(mapKeys(cp.Volumes)) {
		v := cp.Volumes[key]
		name := v.Name
		if name == "" {
			name = cp.Name + "_" + key
		}
		volName[key] = name
		if bool(v.External) {
			continue
		}
		p.Volumes = append(p.Volumes, VolumeSpec{Name: name, Driver: v.Driver, Labels: v.Labels,
			Options: maps.Clone(map[string]string(v.DriverOpts))})
	}
	once := map[string]bool{}
	for _, s := range cp.Services {
		for dep, d := range s.DependsOn {
			if d.Condition == types.ServiceConditionCompletedSuccessfully {
				once[dep] = true
			}
		}
	}
	for _, name := range slices.Sorted(mapKeys(cp.Services)) {
		s := cp.Services[name]
		prefix := "services." + name + "."
		before := len(unsupported)
		composeHash, hashErr := composeConfigHash(s)
		unsupported = append(unsupported, unsupportedFields(prefix, reflect.ValueOf(s))...)
		if s.Develop != nil {
			p.NoEffect = append(p.NoEffect, NoEffectField{Field: prefix + "develop", Reason: noEffectService["develop"]})
		}
		spec := ContainerSpec{Service: name, Name: s.ContainerName, Image: s.Image, Restart: s.Restart}
		if s.Scale != nil || s.Deploy != nil && s.Deploy.Replicas != nil {
			n := s.GetScale() // compose-go refused distinct values of the two
			spec.Replicas = &n
		}
		unsupported = append(unsupported, hostFromCompose(cp.Name, &s, &spec, prefix)...)
		if len(s.Command) > 0 {
			spec.Command = []string(s.Command)
		}
		if len(s.Entrypoint) > 0 {
			spec.Entrypoint = []string(s.Entrypoint)
		}
		for k, v := range s.Environment {
			if v != nil {
				if spec.Env == nil {
					spec.Env = map[string]string{}
				}
				spec.Env[k] = *v
			}
		}
		for k, v := range s.Labels {
			switch k {
			case LabelUpdateStrategy:
				u, err := ParseUpdateStrategy(v)
				if err != nil {
					return nil, &SpecError{Object: "service " + name, Service: name, Field: "labels." + k, Reason: fmt.Sprintf("unknown strategy %q", v)}
				}
				spec.Update = u
				continue
			case LabelHandoverTimeout:
				ms, err := strconv.ParseUint(v, 10, 32)
				if err != nil {
					return nil, &SpecError{Object: "service " + name, Service: name, Field: "labels." + k, Reason: fmt.Sprintf("%q is not a number of milliseconds", v)}
				}
				spec.HandoverTimeout = time.Duration(ms) * time.Millisecond
				continue
			}
			if k == LabelUpdateLock {
				spec.UpdateLock = v
				if reason := checkUpdateLock(v); reason != "" {
					return nil, &SpecError{Object: "service " + name, Service: name, Field: "labels." + k, Reason: reason}
				}
				continue
			}
			if spec.Labels == nil {
				spec.Labels = map[string]string{}
			}
			spec.Labels[k] = v
		}
		for _, port := range s.Ports {
			unsupported = append(unsupported, setFields(prefix+"ports.", port, "HostIP", "Target", "Published", "Protocol", "Mode")...)
			if port.Target > 65535 {
				return nil, &SpecError{Object: "service " + name, Service: name, Field: "ports", Reason: "port out of range"}
			}
			spec.Ports = append(spec.Ports, Port{HostIP: port.HostIP, HostPort: port.Published,
				ContainerPort: uint16(port.Target), Protocol: port.Protocol})
		}
		for _, v := range s.Volumes {
			unsupported = append(unsupported, setFields(prefix+"volumes.", v, "Type", "Source", "Target", "ReadOnly", "Bind", "Volume")...)
			unsupported = append(unsupported, setFields(prefix+"volumes.bind.", v.Bind, "CreateHostPath")...)
			unsupported = append(unsupported, setFields(prefix+"volumes.volume.", v.Volume)...)
			switch v.Type {
			case types.VolumeTypeVolume:
				src := v.Source
				if n, ok := volName[src]; ok {
					src = n
				}
				spec.Mounts = append(spec.Mounts, Mount{Type: "volume", Source: src, Target: v.Target, ReadOnly: v.ReadOnly})
			case types.VolumeTypeBind:
				spec.Mounts = append(spec.Mounts, Mount{Type: "bind", Source: v.Source, Target: v.Target, ReadOnly: v.ReadOnly})
			default:
				unsupported = append(unsupported, prefix+"volumes("+v.Type+")")
			}
		}
		refs := make([]fileRef, 0, len(s.Secrets)+len(s.Configs))
		for _, r := range s.Secrets {
			refs = append(refs, fileRef{kind: "secrets", ref: types.FileReferenceConfig(r), obj: types.FileObjectConfig(cp.Secrets[r.Source])})
		}
		for _, r := range s.Configs {
			refs = append(refs, fileRef{kind: "configs", ref: types.FileReferenceConfig(r), obj: types.FileObjectConfig(cp.Configs[r.Source])})
		}
		spec.Links = slices.Clone(s.Links)
		spec.VolumesFrom = slices.Clone(s.VolumesFrom)
		spec.ExternalLinks = slices.Clone(s.ExternalLinks)
		spec.PostStart = hooksFromCompose(s.PostStart, cp.Environment)
		spec.PreStop = hooksFromCompose(s.PreStop, cp.Environment)
		skipped, err := filesFromCompose(refs, cp.Environment, &spec, prefix)
		if err != nil {
			return nil, err
		}
		unsupported = append(unsupported, skipped...)
		for _, key := range slices.Sorted(mapKeys(s.Networks)) {
			att := NetworkAttachment{Name: netName[key]}
			if att.Name == "" {
				att.Name = key
			}
			if cfg := s.Networks[key]; cfg != nil {
				att.Aliases = slices.Clone(cfg.Aliases)
				att.IPv4Address, att.IPv6Address = cfg.Ipv4Address, cfg.Ipv6Address
				unsupported = append(unsupported, setFields(prefix+"networks."+key+".", cfg, "Aliases", "Ipv4Address", "Ipv6Address")...)
			}
			spec.Networks = append(spec.Networks, att)
		}
		if h := s.HealthCheck; h != nil {
			unsupported = append(unsupported, setFields(prefix+"healthcheck.", h, "Test", "Timeout", "Interval", "Retries", "StartPeriod", "StartInterval", "Disable")...)
			hc := &Healthcheck{Test: []string(h.Test)}
			if h.Disable {
				hc.Test = []string{"NONE"}
			}
			if h.Interval != nil {
				hc.Interval = time.Duration(*h.Interval)
			}
			if h.Timeout != nil {
				hc.Timeout = time.Duration(*h.Timeout)
			}
			if h.StartPeriod != nil {
				hc.StartPeriod = time.Duration(*h.StartPeriod)
			}
			if h.StartInterval != nil {
				hc.StartInterval = time.Duration(*h.StartInterval)
			}
			if h.Retries != nil {
				hc.Retries = int(*h.Retries)
			}
			spec.Healthcheck = hc
		}
		if s.StopGracePeriod != nil {
			d := time.Duration(*s.StopGracePeriod)
			spec.StopTimeout = &d
		}
		switch s.PullPolicy {
		case "", types.PullPolicyMissing, types.PullPolicyIfNotPresent:
		case types.PullPolicyBuild:
			if s.Build == nil {
				unsupported = append(unsupported, prefix+"pull_policy(build)")
			}
		case types.PullPolicyNever:
			spec.Pull = PullNever
		case types.PullPolicyAlways:
			spec.Pull = PullAlways
		case "daily", "weekly":
			spec.Pull, spec.PullEvery = PullRefresh, map[string]time.Duration{"daily": 24 * time.Hour, "weekly": 7 * 24 * time.Hour}[s.PullPolicy]
		default:
			if _, every, err := s.GetPullPolicy(); err == nil && strings.HasPrefix(s.PullPolicy, "every_") && every > 0 {
				spec.Pull, spec.PullEvery = PullRefresh, every
				break
			}
			unsupported = append(unsupported, prefix+"pull_policy("+s.PullPolicy+")")
		}
		if x, ok := s.Extensions["x-update"]; ok {
			u, err := ParseUpdateStrategy(fmt.Sprint(x))
			if err != nil {
				return nil, &SpecError{Object: "service " + name, Service: name, Field: "x-update", Reason: fmt.Sprintf("unknown strategy %q", x)}
			}
			if l, ok := s.Labels[LabelUpdateStrategy]; ok && l != u.String() {
				return nil, &SpecError{Object: "service " + name, Service: name, Field: "x-update",
					Reason: fmt.Sprintf("%q contradicts label %s=%q", x, LabelUpdateStrategy, l)}
			}
			spec.Update = u
		}
		if once[name] {
			spec.Run = Once
		}
		for _, dep := range slices.Sorted(mapKeys(s.DependsOn)) {
			d := s.DependsOn[dep]
			// compose-go adds "restart: true" to the dependency a
			// network_mode of service:NAME implies; that container is
			// recreated with NAME (see ContainerSpec.NetworkMode).
			restart := d.Restart && s.NetworkMode != ServiceNetworkPrefix+dep
			if _, ok := cp.Services[dep]; !ok && !d.Required {
				// As compose: an optional dependency on a service the
				// project does not run (in a disabled profile) is left out.
				continue
			}
			cond, err := ParseCondition(d.Condition)
			if err != nil {
				return nil, &SpecError{Object: "service " + name, Service: name, Field: "depends_on." + dep + ".condition",
					Reason: fmt.Sprintf("unknown condition %q", d.Condition)}
			}
			timeout := opts.DependencyTimeout
			if x, ok := d.Extensions["x-timeout"]; ok {
				t, err := time.ParseDuration(fmt.Sprint(x))
				if err != nil || t <= 0 {
					return nil, &SpecError{Object: "service " + name, Service: name, Field: "depends_on." + dep + ".x-timeout", Reason: fmt.Sprintf("bad duration %v", x)}
				}
				timeout = t
			}
			spec.DependsOn = append(spec.DependsOn, Dependency{Service: dep, Condition: cond, Timeout: timeout, Restart: restart})
		}
		// Compose's hash is written only where it says the truth: every
		// field of the service carried out, and no secret value in it
		// (compose's hash is unkeyed, see ContainerSpec.ComposeHash).
		if hashErr == nil && len(unsupported) == before && len(newRedactor(&spec)) == 0 {
			spec.ComposeHash = composeHash
		}
		p.Containers = append(p.Containers, spec)
	}
	sort.Strings(unsupported)
	unsupported = slices.Compact(unsupported)
	if len(unsupported) > 0 {
		if !opts.IgnoreUnsupported {
			return nil, &UnsupportedError{Fields: unsupported, Reasons: refusalReasons(unsupported)}
		}
		p.Unsupported = unsupported
	}
	for i := range p.Containers {
		spec := &p.Containers[i]
		if err := spec.validate("service " + spec.Service); err != nil {
			var se *SpecError
			if errors.As(err, &se) {
				se.Field = composeHostFieldName(se.Field)
			}
			return nil, err
		}
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func mapKeys[M ~map[string]V, V any](m M) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkComposeValues checks the values of every service that compose-go
// rejects with an untyped message (short-syntax ports, durations, retries)
// or passes on unchecked (restart, negative durations, long-syntax
// published ports), and returns the first invalid one as a *SpecError
// naming the service and the Compose field. It reads the file as
// compose-go does (YAML, then ${VAR} interpolation from env); a file that
// does not parse is left to compose-go to report.
func checkComposeValues(content []byte, env map[string]string) error {
	var raw map[string]any
	if yaml.Unmarshal(content, &raw) != nil || raw == nil {
		return nil
	}
	model, err := interpolation.Interpolate(raw, interpolation.Options{LookupValue: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}})
	if err != nil {
		return nil
	}
	services, _ := model["services"].(map[string]any)
	for _, name := range slices.Sorted(mapKeys(services)) {
		svc, _ := services[name].(map[string]any)
		bad := func(field, reason string, args ...any) error {
			return &SpecError{Object: "service " + name, Service: name, Field: field, Reason: fmt.Sprintf(reason, args...)}
		}
		ports, _ := svc["ports"].([]any)
		for i, p := range ports {
			field := fmt.Sprintf("ports[%d]", i)
			switch p := p.(type) {
			case string, int:
				if _, err := types.ParsePortConfig(fmt.Sprint(p)); err != nil {
					return bad(field, "%v", err)
				}
			case map[string]any:
				if t, ok := p["target"]; ok {
					if n, err := strconv.ParseUint(fmt.Sprint(t), 10, 16); err != nil || n == 0 {
						return bad(field+".target", "%q is not a port (1-65535)", fmt.Sprint(t))
					}
				}
				if v, ok := p["published"]; ok {
					if reason := checkHostPort(fmt.Sprint(v)); reason != "" {
						return bad(field+".published", "%s", reason)
					}
				}
				if v, ok := p["host_ip"]; ok && net.ParseIP(fmt.Sprint(v)) == nil {
					return bad(field+".host_ip", "%q is not an IP address", fmt.Sprint(v))
				}
			}
		}
		durations := []string{"stop_grace_period"}
		values := []any{svc["stop_grace_period"]}
		if h, ok := svc["healthcheck"].(map[string]any); ok {
			for _, k := range []string{"interval", "timeout", "start_period", "start_interval"} {
				durations = append(durations, "healthcheck."+k)
				values = append(values, h[k])
			}
			if r, ok := h["retries"]; ok {
				if n, err := strconv.Atoi(fmt.Sprint(r)); err != nil || n < 0 {
					return bad("healthcheck.retries", "%q is not a count (0 or more)", fmt.Sprint(r))
				}
			}
		}
		for i, v := range values {
			if v == nil {
				continue
			}
			var d types.Duration
			if err := d.DecodeMapstructure(v); err != nil || d < 0 {
				return bad(durations[i], "%q is not a duration (such as 5s or 1m30s)", fmt.Sprint(v))
			}
		}
		if r, ok := svc["restart"]; ok {
			if reason := checkRestart(fmt.Sprint(r)); reason != "" {
				return bad("restart", "%s", reason)
			}
		}
		if err := checkComposeScale(svc, bad); err != nil {
			return err
		}
	}
	return nil
}

// checkComposeScale checks a service's scale and deploy.replicas as
// compose-go does, with a *SpecError (from bad) instead of its untyped
// message: each a count (0 or more), equal when both are given, and not
// more than 1 with a container_name, which names one container only.
func checkComposeScale(svc map[string]any, bad func(field, reason string, args ...any) error) error {
	counts := map[string]any{"scale": svc["scale"]}
	if d, ok := svc["deploy"].(map[string]any); ok {
		counts["deploy.replicas"] = d["replicas"]
	}
	n, from := -1, ""
	for _, field := range []string{"scale", "deploy.replicas"} {
		v := counts[field]
		if v == nil {
			continue
		}
		c, err := strconv.Atoi(fmt.Sprint(v))
		if err != nil || c < 0 {
			return bad(field, "%q is not a count of containers (0 or more)", fmt.Sprint(v))
		}
		if from != "" && c != n {
			return bad(field, "%d differs from %s %d", c, from, n)
		}
		n, from = c, field
	}
	if name, ok := svc["container_name"]; ok && n > 1 {
		return bad("container_name", "%q names one container: it cannot name the %d of %s (container names are unique)", fmt.Sprint(name), n, from)
	}
	return nil
}
