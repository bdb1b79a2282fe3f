package docker

import (
	"fmt"
	"maps"
	"net"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-connections/nat"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Device maps the host device node Host into the container at Container
// ("" means the same path) with the cgroup permissions Permissions (a
// combination of r, w and m; "" means "rwm").
type Device struct {
	Host        string `json:"source,omitzero"`
	Container   string `json:"target,omitzero"`
	Permissions string `json:"permissions,omitzero"`
}

// Ulimit is one resource limit ("nofile", "nproc", "memlock", ...) with
// its soft and hard values.
type Ulimit struct {
	Name string `json:"name,omitzero"`
	Soft int64  `json:"soft,omitzero"`
	Hard int64  `json:"hard,omitzero"`
}

// Logging is the log driver of a container and its options.
type Logging struct {
	// Driver is the log driver ("json-file", "local", "journald", "none");
	// "" keeps the engine's default driver.
	Driver  string            `json:"driver,omitzero"`
	Options map[string]string `json:"options,omitempty"`
}

var (
	capName     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)
	cpuSet      = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)
	signalName  = regexp.MustCompile(`^(SIG[A-Z0-9+-]+|[0-9]+)$`)
	hostName    = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)
	platformArg = regexp.MustCompile(`^[a-z0-9_]+/[a-z0-9_]+(/[a-z0-9_]+)?$`)
)

// ServiceNetworkPrefix starts a NetworkMode that shares the network
// namespace of another service of the project ("service:vpn").
const ServiceNetworkPrefix = "service:"

// validateHost checks the container create options of the spec (those
// after UpdateLock in ContainerSpec): every value the engine would refuse
// or misread is refused with a *SpecError made by bad.
func (s *ContainerSpec) validateHost(bad func(field, reason string, args ...any) error) error {
	for _, l := range []struct {
		field string
		v     []string
	}{{"CapAdd", s.CapAdd}, {"CapDrop", s.CapDrop}} {
		for i, c := range l.v {
			if !capName.MatchString(c) {
				return bad(fmt.Sprintf("%s[%d]", l.field, i), "%q is not a capability name", c)
			}
		}
	}
	for _, n := range []struct {
		field string
		v     int64
	}{{"CPUShares", s.CPUShares}, {"CPUQuota", s.CPUQuota}, {"Memory", s.Memory},
		{"MemoryReservation", s.MemoryReservation}, {"ShmSize", s.ShmSize}} {
		if n.v < 0 {
			return bad(n.field, "must not be negative")
		}
	}
	switch {
	case s.CPUs < 0:
		return bad("CPUs", "must not be negative")
	case s.CPUSet != "" && !cpuSet.MatchString(s.CPUSet):
		return bad("CPUSet", "%q is not a CPU list such as 0-2,4", s.CPUSet)
	case s.Memory > 0 && s.MemoryReservation > s.Memory:
		return bad("MemoryReservation", "%d is above Memory (%d)", s.MemoryReservation, s.Memory)
	case s.PidsLimit < -1:
		return bad("PidsLimit", "must be -1 (unlimited) or more")
	case s.OomScoreAdj < -1000 || s.OomScoreAdj > 1000:
		return bad("OomScoreAdj", "%d is not between -1000 and 1000", s.OomScoreAdj)
	case s.PID != "" && s.PID != "host" && !sharesNamespace(s.PID, s.Service):
		return bad("PID", "%q is not host, container:NAME or service:NAME (another service)", s.PID)
	case s.UsernsMode != "" && s.UsernsMode != "host":
		return bad("UsernsMode", "%q is not host", s.UsernsMode)
	case s.IPC != "" && !container.IpcMode(s.IPC).Valid() && !sharesNamespace(s.IPC, s.Service):
		return bad("IPC", "%q is not private, shareable, host, none, container:NAME or service:NAME (another service)", s.IPC)
	case s.StopSignal != "" && !signalName.MatchString(s.StopSignal):
		return bad("StopSignal", "%q is not a signal name such as SIGINT, or a number", s.StopSignal)
	case s.Hostname != "" && !hostName.MatchString(s.Hostname):
		return bad("Hostname", "%q is not a host name", s.Hostname)
	case s.Domainname != "" && !hostName.MatchString(s.Domainname):
		return bad("Domainname", "%q is not a domain name", s.Domainname)
	case s.WorkingDir != "" && !path.IsAbs(s.WorkingDir):
		return bad("WorkingDir", "%q is not an absolute path", s.WorkingDir)
	case s.Platform != "" && !platformArg.MatchString(s.Platform):
		return bad("Platform", "%q is not os/arch[/variant]", s.Platform)
	case strings.ContainsAny(s.Runtime, " \t\n/"):
		return bad("Runtime", "%q is not a runtime name", s.Runtime)
	}
	if s.MacAddress != "" {
		if _, err := net.ParseMAC(s.MacAddress); err != nil {
			return bad("MacAddress", "%q is not a MAC address", s.MacAddress)
		}
	}
	if err := s.validateNetworkMode(bad); err != nil {
		return err
	}
	for i, d := range s.Devices {
		field := fmt.Sprintf("Devices[%d].", i)
		switch {
		case !path.IsAbs(d.Host):
			return bad(field+"Host", "%q is not an absolute path", d.Host)
		case d.Container != "" && !path.IsAbs(d.Container):
			return bad(field+"Container", "%q is not an absolute path", d.Container)
		case strings.Trim(d.Permissions, "rwm") != "" || len(d.Permissions) > 3:
			return bad(field+"Permissions", "%q is not a combination of r, w and m", d.Permissions)
		}
	}
	for i, ip := range s.DNS {
		if net.ParseIP(ip) == nil {
			return bad(fmt.Sprintf("DNS[%d]", i), "%q is not an IP address", ip)
		}
	}
	for _, l := range []struct {
		field string
		v     []string
	}{{"DNSOptions", s.DNSOptions}, {"DNSSearch", s.DNSSearch}, {"GroupAdd", s.GroupAdd}, {"SecurityOpt", s.SecurityOpt}} {
		for i, v := range l.v {
			if strings.TrimSpace(v) == "" || strings.ContainsAny(v, "\n\x00") {
				return bad(fmt.Sprintf("%s[%d]", l.field, i), "%q is empty or has a line break", v)
			}
		}
	}
	for i, e := range s.Expose {
		if _, _, err := parseExpose(e); err != nil {
			return bad(fmt.Sprintf("Expose[%d]", i), "%q is not a port, a port range or either with /tcp, /udp or /sctp", e)
		}
	}
	for i, h := range s.ExtraHosts {
		name, ip, ok := strings.Cut(h, ":")
		if !ok || name == "" || (ip != "host-gateway" && net.ParseIP(ip) == nil) {
			return bad(fmt.Sprintf("ExtraHosts[%d]", i), "%q is not host:IP (or host:host-gateway)", h)
		}
	}
	for k := range s.Sysctls {
		if k == "" || strings.ContainsAny(k, "= \x00") {
			return bad("Sysctls", "bad parameter name %q", k)
		}
	}
	for i, t := range s.Tmpfs {
		if p, _, _ := strings.Cut(t, ":"); !path.IsAbs(p) {
			return bad(fmt.Sprintf("Tmpfs[%d]", i), "%q does not start with an absolute path", t)
		}
	}
	seen := map[string]bool{}
	for i, u := range s.Ulimits {
		field := fmt.Sprintf("Ulimits[%d]", i)
		switch {
		case !capName.MatchString(u.Name):
			return bad(field+".Name", "%q is not a limit name such as nofile", u.Name)
		case seen[u.Name]:
			return bad(field+".Name", "%q is set twice", u.Name)
		case u.Soft < -1 || u.Hard < -1 || u.Hard >= 0 && u.Soft > u.Hard:
			return bad(field, "soft %d and hard %d are not -1 (unlimited) or soft ≤ hard", u.Soft, u.Hard)
		}
		seen[u.Name] = true
	}
	if s.Logging != nil {
		for k := range s.Logging.Options {
			if k == "" {
				return bad("Logging.Options", "empty option name")
			}
		}
		if s.Logging.Driver == "" && len(s.Logging.Options) > 0 {
			return bad("Logging.Driver", "is required with options")
		}
	}
	for i, n := range s.Networks {
		for _, a := range []struct {
			field, v string
			v4       bool
		}{{"IPv4Address", n.IPv4Address, true}, {"IPv6Address", n.IPv6Address, false}} {
			if a.v == "" {
				continue
			}
			ip := net.ParseIP(a.v)
			if ip == nil || (ip.To4() != nil) != a.v4 {
				return bad(fmt.Sprintf("Networks[%d].%s", i, a.field), "%q is not an IPv%s address", a.v, map[bool]string{true: "4", false: "6"}[a.v4])
			}
		}
	}
	return nil
}

// sharesNamespace reports whether mode is "container:NAME" or
// "service:NAME" with NAME set and not the service itself.
func sharesNamespace(mode, service string) bool {
	if name, ok := strings.CutPrefix(mode, ServiceNetworkPrefix); ok {
		return name != "" && name != service
	}
	name, ok := strings.CutPrefix(mode, "container:")
	return ok && name != ""
}

// validateNetworkMode checks NetworkMode and that it does not go with
// Networks.
func (s *ContainerSpec) validateNetworkMode(bad func(field, reason string, args ...any) error) error {
	m := s.NetworkMode
	switch {
	case m == "":
		return nil
	case m == "bridge", m == "host", m == "none":
	case strings.HasPrefix(m, ServiceNetworkPrefix) && len(m) > len(ServiceNetworkPrefix):
		if strings.TrimPrefix(m, ServiceNetworkPrefix) == s.Service {
			return bad("NetworkMode", "a service cannot share its own network namespace")
		}
	case strings.HasPrefix(m, "container:") && len(m) > len("container:"):
	default:
		return bad("NetworkMode", "%q is not bridge, host, none, service:NAME or container:NAME", m)
	}
	if len(s.Networks) > 0 {
		return bad("NetworkMode", "%q cannot go with Networks", m)
	}
	if m != "bridge" && s.MacAddress != "" {
		return bad("MacAddress", "cannot be set with network mode %q", m)
	}
	return nil
}

// parseExpose parses an Expose entry: "80", "8000-8010", either with
// "/tcp", "/udp" or "/sctp".
func parseExpose(e string) (proto string, ports []int, err error) {
	rng, proto, ok := strings.Cut(e, "/")
	if !ok {
		proto = "tcp"
	}
	switch proto {
	case "tcp", "udp", "sctp":
	default:
		return "", nil, fmt.Errorf("bad protocol %q", proto)
	}
	lo, hi, err := nat.ParsePortRange(rng)
	if err != nil || lo == 0 || hi > 65535 {
		return "", nil, fmt.Errorf("bad port range %q", rng)
	}
	for p := lo; p <= hi; p++ {
		ports = append(ports, int(p))
	}
	return proto, ports, nil
}

// hostFields adds the create options that are set to a spec's fields (see
// ContainerSpec.fields), under their Compose names; put hashes a value.
// Lists whose order does not matter are sorted first.
func (s *ContainerSpec) hostFields(put func(k string, v any, set bool)) {
	sorted := func(v []string) []string {
		v = slices.Clone(v)
		slices.Sort(v)
		return v
	}
	put("cap_add", sorted(s.CapAdd), len(s.CapAdd) > 0)
	put("cap_drop", sorted(s.CapDrop), len(s.CapDrop) > 0)
	put("cgroup_parent", s.CgroupParent, s.CgroupParent != "")
	put("cpu_shares", s.CPUShares, s.CPUShares != 0)
	put("cpu_quota", s.CPUQuota, s.CPUQuota != 0)
	put("cpus", s.CPUs, s.CPUs != 0)
	put("cpuset", s.CPUSet, s.CPUSet != "")
	devs := slices.Clone(s.Devices)
	sort.Slice(devs, func(i, j int) bool { return devs[i].Host+devs[i].Container < devs[j].Host+devs[j].Container })
	put("devices", hashShapes(devs, func(d Device) hashDevice { return hashDevice(d) }), len(devs) > 0)
	put("dns", s.DNS, len(s.DNS) > 0)
	put("dns_opt", sorted(s.DNSOptions), len(s.DNSOptions) > 0)
	put("dns_search", s.DNSSearch, len(s.DNSSearch) > 0)
	put("hostname", s.Hostname, s.Hostname != "")
	put("domainname", s.Domainname, s.Domainname != "")
	put("expose", sorted(s.Expose), len(s.Expose) > 0)
	put("extra_hosts", sorted(s.ExtraHosts), len(s.ExtraHosts) > 0)
	put("group_add", sorted(s.GroupAdd), len(s.GroupAdd) > 0)
	put("ipc", s.IPC, s.IPC != "")
	put("mac_address", s.MacAddress, s.MacAddress != "")
	put("mem_limit", s.Memory, s.Memory != 0)
	put("mem_reservation", s.MemoryReservation, s.MemoryReservation != 0)
	put("network_mode", s.NetworkMode, s.NetworkMode != "")
	put("oom_kill_disable", s.OomKillDisable, s.OomKillDisable)
	put("oom_score_adj", s.OomScoreAdj, s.OomScoreAdj != 0)
	put("pid", s.PID, s.PID != "")
	put("pids_limit", s.PidsLimit, s.PidsLimit != 0)
	put("privileged", s.Privileged, s.Privileged)
	put("read_only", s.ReadOnly, s.ReadOnly)
	put("security_opt", sorted(s.SecurityOpt), len(s.SecurityOpt) > 0)
	put("shm_size", s.ShmSize, s.ShmSize != 0)
	put("stop_signal", s.StopSignal, s.StopSignal != "")
	put("sysctls", s.Sysctls, len(s.Sysctls) > 0) // map keys marshal sorted
	put("tmpfs", sorted(s.Tmpfs), len(s.Tmpfs) > 0)
	ul := slices.Clone(s.Ulimits)
	sort.Slice(ul, func(i, j int) bool { return ul[i].Name < ul[j].Name })
	put("ulimits", hashShapes(ul, func(u Ulimit) hashUlimit { return hashUlimit(u) }), len(ul) > 0)
	put("user", s.User, s.User != "")
	put("userns_mode", s.UsernsMode, s.UsernsMode != "")
	put("working_dir", s.WorkingDir, s.WorkingDir != "")
	put("platform", s.Platform, s.Platform != "")
	put("runtime", s.Runtime, s.Runtime != "")
	put("init", s.Init, s.Init != nil)
	put("logging", hashShape(s.Logging, func(l Logging) hashLogging { return hashLogging(l) }), s.Logging != nil)
	put("stdin_open", s.StdinOpen, s.StdinOpen)
	put("tty", s.Tty, s.Tty)
	addrs := map[string][2]string{}
	for _, n := range s.Networks {
		if n.IPv4Address != "" || n.IPv6Address != "" {
			addrs[n.Name] = [2]string{n.IPv4Address, n.IPv6Address}
		}
	}
	put("network_addresses", addrs, len(addrs) > 0)
}

// hostOptions carries the create options of the spec into the create
// request. netContainer is the engine name of the container whose network
// namespace a "service:NAME" NetworkMode shares. It returns the platform
// to create the container for (nil for the engine's own).
func (s *ContainerSpec) hostOptions(cfg *container.Config, host *container.HostConfig, netContainer string) *ocispec.Platform {
	cfg.Hostname, cfg.Domainname = s.Hostname, s.Domainname
	cfg.User, cfg.WorkingDir, cfg.StopSignal = s.User, s.WorkingDir, s.StopSignal
	cfg.MacAddress = s.MacAddress //nolint:staticcheck // API 1.41 takes it here
	cfg.OpenStdin, cfg.Tty = s.StdinOpen, s.Tty
	for _, e := range s.Expose {
		proto, ports, _ := parseExpose(e) // validated
		if cfg.ExposedPorts == nil {
			cfg.ExposedPorts = nat.PortSet{}
		}
		for _, p := range ports {
			cfg.ExposedPorts[nat.Port(strconv.Itoa(p)+"/"+proto)] = struct{}{}
		}
	}
	host.CapAdd, host.CapDrop = slices.Clone(s.CapAdd), slices.Clone(s.CapDrop)
	host.CgroupParent = s.CgroupParent
	host.CPUShares, host.CPUQuota, host.CpusetCpus = s.CPUShares, s.CPUQuota, s.CPUSet
	host.NanoCPUs = int64(s.CPUs * 1e9)
	for _, d := range s.Devices {
		dm := container.DeviceMapping{PathOnHost: d.Host, PathInContainer: d.Container, CgroupPermissions: d.Permissions}
		if dm.PathInContainer == "" {
			dm.PathInContainer = d.Host
		}
		if dm.CgroupPermissions == "" {
			dm.CgroupPermissions = "rwm"
		}
		host.Devices = append(host.Devices, dm)
	}
	host.DNS, host.DNSOptions, host.DNSSearch = slices.Clone(s.DNS), slices.Clone(s.DNSOptions), slices.Clone(s.DNSSearch)
	host.ExtraHosts, host.GroupAdd = slices.Clone(s.ExtraHosts), slices.Clone(s.GroupAdd)
	host.IpcMode = container.IpcMode(s.IPC)
	host.Memory, host.MemoryReservation = s.Memory, s.MemoryReservation
	if s.OomKillDisable {
		disable := true
		host.OomKillDisable = &disable
	}
	host.OomScoreAdj = s.OomScoreAdj
	host.PidMode = container.PidMode(s.PID)
	if s.PidsLimit != 0 {
		limit := s.PidsLimit
		host.PidsLimit = &limit
	}
	host.Privileged, host.ReadonlyRootfs = s.Privileged, s.ReadOnly
	host.SecurityOpt = slices.Clone(s.SecurityOpt)
	host.ShmSize = s.ShmSize
	host.Sysctls = maps.Clone(s.Sysctls)
	for _, t := range s.Tmpfs {
		p, opts, _ := strings.Cut(t, ":")
		if host.Tmpfs == nil {
			host.Tmpfs = map[string]string{}
		}
		host.Tmpfs[p] = opts
	}
	for _, u := range s.Ulimits {
		host.Ulimits = append(host.Ulimits, &container.Ulimit{Name: u.Name, Soft: u.Soft, Hard: u.Hard})
	}
	host.UsernsMode = container.UsernsMode(s.UsernsMode)
	host.Runtime = s.Runtime
	if s.Init != nil {
		init := *s.Init
		host.Init = &init
	}
	if s.Logging != nil {
		host.LogConfig = container.LogConfig{Type: s.Logging.Driver, Config: maps.Clone(s.Logging.Options)}
	}
	switch {
	case strings.HasPrefix(s.NetworkMode, ServiceNetworkPrefix):
		host.NetworkMode = container.NetworkMode("container:" + netContainer)
	case s.NetworkMode != "":
		host.NetworkMode = container.NetworkMode(s.NetworkMode)
	}
	if s.Platform == "" {
		return nil
	}
	parts := strings.Split(s.Platform, "/")
	p := &ocispec.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) > 2 {
		p.Variant = parts[2]
	}
	return p
}

// cloneHost deep-copies the create options' slices and maps.
func (s *ContainerSpec) cloneHost() {
	s.CapAdd, s.CapDrop = slices.Clone(s.CapAdd), slices.Clone(s.CapDrop)
	s.Devices = slices.Clone(s.Devices)
	s.DNS, s.DNSOptions, s.DNSSearch = slices.Clone(s.DNS), slices.Clone(s.DNSOptions), slices.Clone(s.DNSSearch)
	s.Expose, s.ExtraHosts, s.GroupAdd = slices.Clone(s.Expose), slices.Clone(s.ExtraHosts), slices.Clone(s.GroupAdd)
	s.SecurityOpt, s.Tmpfs, s.Ulimits = slices.Clone(s.SecurityOpt), slices.Clone(s.Tmpfs), slices.Clone(s.Ulimits)
	s.Sysctls = maps.Clone(s.Sysctls)
	if s.Init != nil {
		v := *s.Init
		s.Init = &v
	}
	if s.Logging != nil {
		l := *s.Logging
		l.Options = maps.Clone(l.Options)
		s.Logging = &l
	}
	if s.Build != nil {
		b := *s.Build
		b.Args, b.Labels, b.ExtraHosts = maps.Clone(b.Args), maps.Clone(b.Labels), slices.Clone(b.ExtraHosts)
		s.Build = &b
	}
}
