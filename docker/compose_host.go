package docker

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
)

// hostServiceFields are the fields of the Compose service model carried
// into ContainerSpec's create options by hostFromCompose.
var hostServiceFields = []string{
	"CapAdd", "CapDrop", "CgroupParent", "CPUShares", "CPUQuota", "CPUS", "CPUSet", "Devices", "DNS", "DNSOpts",
	"DNSSearch", "DomainName", "Expose", "ExtraHosts", "GroupAdd", "Hostname", "Ipc", "MacAddress", "MemLimit",
	"MemReservation", "NetworkMode", "OomKillDisable", "OomScoreAdj", "Pid", "PidsLimit", "Privileged", "ReadOnly",
	"SecurityOpt", "ShmSize", "StopSignal", "Sysctls", "Tmpfs", "Ulimits", "User", "UserNSMode", "WorkingDir",
	"Platform", "Runtime", "Init", "Logging", "StdinOpen", "Tty", "Deploy", "Build",
}

// hostFromCompose carries the create options and the build of service s
// (of project projectName) into spec and
// returns the parts of them it does not carry out (prefix names the
// service, "services.web."). Values the engine would refuse are left to
// ContainerSpec.validate (the loader maps its Go field names to Compose
// names).
func hostFromCompose(projectName string, s *types.ServiceConfig, spec *ContainerSpec, prefix string) []string {
	var unsupported []string
	spec.CapAdd, spec.CapDrop = slices.Clone(s.CapAdd), slices.Clone(s.CapDrop)
	spec.CgroupParent = s.CgroupParent
	spec.CPUShares, spec.CPUQuota, spec.CPUSet = s.CPUShares, s.CPUQuota, s.CPUSet
	spec.CPUs = float64(s.CPUS)
	for _, d := range s.Devices {
		unsupported = append(unsupported, setFields(prefix+"devices.", d, "Source", "Target", "Permissions")...)
		spec.Devices = append(spec.Devices, Device{Host: d.Source, Container: d.Target, Permissions: d.Permissions})
	}
	spec.DNS, spec.DNSOptions, spec.DNSSearch = slices.Clone(s.DNS), slices.Clone(s.DNSOpts), slices.Clone(s.DNSSearch)
	spec.Domainname, spec.Hostname = s.DomainName, s.Hostname
	spec.Expose = slices.Clone([]string(s.Expose))
	for _, host := range slices.Sorted(maps.Keys(s.ExtraHosts)) {
		for _, ip := range s.ExtraHosts[host] {
			spec.ExtraHosts = append(spec.ExtraHosts, host+":"+ip)
		}
	}
	spec.GroupAdd = slices.Clone(s.GroupAdd)
	spec.IPC, spec.MacAddress = s.Ipc, s.MacAddress
	spec.Memory, spec.MemoryReservation = int64(s.MemLimit), int64(s.MemReservation)
	spec.NetworkMode = s.NetworkMode
	spec.OomKillDisable, spec.OomScoreAdj = s.OomKillDisable, int(s.OomScoreAdj)
	spec.PID, spec.PidsLimit = s.Pid, s.PidsLimit
	spec.Privileged, spec.ReadOnly = s.Privileged, s.ReadOnly
	spec.SecurityOpt = slices.Clone(s.SecurityOpt)
	spec.ShmSize, spec.StopSignal = int64(s.ShmSize), s.StopSignal
	if len(s.Sysctls) > 0 {
		spec.Sysctls = maps.Clone(map[string]string(s.Sysctls))
	}
	spec.Tmpfs = slices.Clone([]string(s.Tmpfs))
	for _, name := range slices.Sorted(maps.Keys(s.Ulimits)) {
		u := s.Ulimits[name]
		if u == nil {
			continue
		}
		soft, hard := int64(u.Soft), int64(u.Hard)
		if u.Single != 0 {
			soft, hard = int64(u.Single), int64(u.Single)
		}
		spec.Ulimits = append(spec.Ulimits, Ulimit{Name: name, Soft: soft, Hard: hard})
	}
	spec.User, spec.UsernsMode, spec.WorkingDir = s.User, s.UserNSMode, s.WorkingDir
	spec.Platform, spec.Runtime = s.Platform, s.Runtime
	if s.Init != nil {
		v := *s.Init
		spec.Init = &v
	}
	if l := s.Logging; l != nil {
		spec.Logging = &Logging{Driver: l.Driver, Options: maps.Clone(map[string]string(l.Options))}
	}
	spec.StdinOpen, spec.Tty = s.StdinOpen, s.Tty
	if b := s.Build; b != nil {
		unsupported = append(unsupported, setFields(prefix+"build.", b, "Context", "Dockerfile", "Args", "Target", "Labels",
			"ExtraHosts", "ShmSize", "DockerfileInline", "Tags", "Platforms")...)
		spec.Build = &Build{Context: b.Context, Dockerfile: b.Dockerfile, Target: b.Target, ShmSize: int64(b.ShmSize),
			Labels: maps.Clone(map[string]string(b.Labels)), DockerfileInline: b.DockerfileInline, Tags: slices.Clone(b.Tags)}
		switch {
		case len(b.Platforms) > 1:
			unsupported = append(unsupported, prefix+"build.platforms")
		case len(b.Platforms) == 1:
			spec.Build.Platform = b.Platforms[0]
		default: // compose-go checks that platform is among build.platforms
			spec.Build.Platform = s.Platform
		}
		if b.DockerfileInline != "" {
			// compose-go sets the default name besides the inline one.
			spec.Build.Dockerfile = ""
		}
		for k, v := range b.Args {
			if v != nil {
				if spec.Build.Args == nil {
					spec.Build.Args = map[string]string{}
				}
				spec.Build.Args[k] = *v
			}
		}
		for _, host := range slices.Sorted(maps.Keys(b.ExtraHosts)) {
			for _, ip := range b.ExtraHosts[host] {
				spec.Build.ExtraHosts = append(spec.Build.ExtraHosts, host+":"+ip)
			}
		}
		if spec.Image == "" {
			// Compose's name for the image of a service built without one.
			spec.Image = projectName + "-" + spec.Service
		}
	}
	if d := s.Deploy; d != nil {
		unsupported = append(unsupported, setFields(prefix+"deploy.", d, "Resources", "RestartPolicy", "Replicas")...)
		if rp := d.RestartPolicy; rp != nil {
			unsupported = append(unsupported, setFields(prefix+"deploy.restart_policy.", rp, "Condition", "MaxAttempts")...)
			if spec.Restart == "" { // restart: wins, as in compose
				switch rp.Condition {
				case "none":
					spec.Restart = "no"
				case "on-failure":
					spec.Restart = "on-failure"
					if rp.MaxAttempts != nil {
						spec.Restart += ":" + strconv.FormatUint(*rp.MaxAttempts, 10)
					}
				case "", "any":
					spec.Restart = "always"
				default:
					unsupported = append(unsupported, prefix+"deploy.restart_policy.condition("+rp.Condition+")")
				}
			}
		}
		unsupported = append(unsupported, setFields(prefix+"deploy.resources.", d.Resources, "Limits", "Reservations")...)
		unsupported = append(unsupported, setFields(prefix+"deploy.resources.limits.", d.Resources.Limits, "NanoCPUs", "MemoryBytes", "Pids")...)
		unsupported = append(unsupported, setFields(prefix+"deploy.resources.reservations.", d.Resources.Reservations, "MemoryBytes")...)
		// compose-go refuses distinct values of a limit set both ways.
		if l := d.Resources.Limits; l != nil {
			spec.CPUs = max(spec.CPUs, float64(l.NanoCPUs))
			spec.Memory = max(spec.Memory, int64(l.MemoryBytes))
			spec.PidsLimit = max(spec.PidsLimit, l.Pids)
		}
		if r := d.Resources.Reservations; r != nil {
			spec.MemoryReservation = max(spec.MemoryReservation, int64(r.MemoryBytes))
		}
	}
	return unsupported
}

// networkFromCompose returns the NetworkSpec of Compose network key, named
// name, and the fields of it that are not carried out.
func networkFromCompose(key, name string, n types.NetworkConfig) (NetworkSpec, []string) {
	prefix := "networks." + key + "."
	unsupported := setFields(prefix, n, "Name", "Driver", "DriverOpts", "Internal", "Labels", "CustomLabels", "EnableIPv6", "Ipam", "External")
	spec := NetworkSpec{Name: name, Driver: n.Driver, Internal: n.Internal, Labels: n.Labels,
		Options: maps.Clone(map[string]string(n.DriverOpts))}
	if n.EnableIPv6 != nil {
		spec.EnableIPv6 = *n.EnableIPv6
	}
	ipam := n.Ipam
	if ipam.Driver != "" || len(ipam.Config) > 0 || len(ipam.Options) > 0 {
		unsupported = append(unsupported, setFields(prefix+"ipam.", ipam, "Driver", "Config", "Options")...)
		spec.IPAM = &IPAM{Driver: ipam.Driver, Options: maps.Clone(map[string]string(ipam.Options))}
		for _, p := range ipam.Config {
			if p == nil {
				continue
			}
			unsupported = append(unsupported, setFields(prefix+"ipam.config.", p, "Subnet", "Gateway", "IPRange", "AuxiliaryAddresses")...)
			spec.IPAM.Pools = append(spec.IPAM.Pools, IPAMPool{Subnet: p.Subnet, Gateway: p.Gateway, IPRange: p.IPRange,
				AuxAddresses: maps.Clone(map[string]string(p.AuxiliaryAddresses))})
		}
	}
	return spec, unsupported
}

// composeHostFieldName maps a Go field of the create options to its Compose
// name, for the loader's errors.
func composeHostFieldName(goField string) string {
	if name, ok := goToCompose[strings.SplitN(goField, "[", 2)[0]]; ok {
		return name + goField[len(strings.SplitN(goField, "[", 2)[0]):]
	}
	return goField
}

var goToCompose = map[string]string{
	"CapAdd": "cap_add", "CapDrop": "cap_drop", "CgroupParent": "cgroup_parent", "CPUShares": "cpu_shares",
	"CPUQuota": "cpu_quota", "CPUs": "cpus", "CPUSet": "cpuset", "Devices": "devices", "DNS": "dns",
	"DNSOptions": "dns_opt", "DNSSearch": "dns_search", "Hostname": "hostname", "Domainname": "domainname",
	"Expose": "expose", "ExtraHosts": "extra_hosts", "GroupAdd": "group_add", "IPC": "ipc", "MacAddress": "mac_address",
	"Memory": "mem_limit", "MemoryReservation": "mem_reservation", "NetworkMode": "network_mode",
	"OomKillDisable": "oom_kill_disable", "OomScoreAdj": "oom_score_adj", "PID": "pid", "PidsLimit": "pids_limit",
	"Privileged": "privileged", "ReadOnly": "read_only", "SecurityOpt": "security_opt", "ShmSize": "shm_size",
	"StopSignal": "stop_signal", "Sysctls": "sysctls", "Tmpfs": "tmpfs", "Ulimits": "ulimits", "User": "user",
	"UsernsMode": "userns_mode", "WorkingDir": "working_dir", "Platform": "platform", "Runtime": "runtime",
	"Logging": "logging", "Networks": "networks", "Replicas": "scale",
}
