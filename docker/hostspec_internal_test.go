package docker

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpecHashOfOlderFieldsUnchanged guards the labels of containers
// created before the create options existed: a spec that sets none of
// them hashes exactly as it did (the value was computed by the previous
// release's code for this spec and key), so upgrading recreates nothing.
func TestSpecHashOfOlderFieldsUnchanged(t *testing.T) {
	d := 3 * time.Second
	s := ContainerSpec{Service: "web", Image: "nginx:1", Command: []string{"a", "b"}, Env: map[string]string{"A": "1"},
		Labels: map[string]string{"l": "v"}, Ports: []Port{{HostPort: "80", ContainerPort: 8080}},
		Mounts:   []Mount{{Type: "volume", Source: "data", Target: "/data"}},
		Networks: []NetworkAttachment{{Name: "back", Aliases: []string{"www"}}}, Restart: "always",
		Healthcheck: &Healthcheck{Test: []string{"CMD", "true"}, Interval: time.Second}, StopTimeout: &d}
	k := []byte("golden-key")
	assert.Equal(t, "hmac-sha256:c58be3c5248a2ef90e8ab0dab3cb317ebd932040926e3759293e1152f61e7cd6", hashFields(k, s.fields(k)))
}

// TestEveryCreateOptionIsInTheHash sets each create option alone and
// checks that the spec hash changes, under the option's Compose name, and
// that two values of it hash apart.
func TestEveryCreateOptionIsInTheHash(t *testing.T) {
	yes := true
	cases := []struct {
		field string
		a, b  func(s *ContainerSpec)
	}{
		{"cap_add", func(s *ContainerSpec) { s.CapAdd = []string{"NET_ADMIN"} }, func(s *ContainerSpec) { s.CapAdd = []string{"SYS_TIME"} }},
		{"cap_drop", func(s *ContainerSpec) { s.CapDrop = []string{"MKNOD"} }, func(s *ContainerSpec) { s.CapDrop = []string{"ALL"} }},
		{"cgroup_parent", func(s *ContainerSpec) { s.CgroupParent = "/a" }, func(s *ContainerSpec) { s.CgroupParent = "/b" }},
		{"cpu_shares", func(s *ContainerSpec) { s.CPUShares = 512 }, func(s *ContainerSpec) { s.CPUShares = 1024 }},
		{"cpu_quota", func(s *ContainerSpec) { s.CPUQuota = 50000 }, func(s *ContainerSpec) { s.CPUQuota = 1000 }},
		{"cpus", func(s *ContainerSpec) { s.CPUs = 0.5 }, func(s *ContainerSpec) { s.CPUs = 1.5 }},
		{"cpuset", func(s *ContainerSpec) { s.CPUSet = "0" }, func(s *ContainerSpec) { s.CPUSet = "0-1" }},
		{"devices", func(s *ContainerSpec) { s.Devices = []Device{{Host: "/dev/i2c-1"}} }, func(s *ContainerSpec) { s.Devices = []Device{{Host: "/dev/ttyUSB0"}} }},
		{"dns", func(s *ContainerSpec) { s.DNS = []string{"1.1.1.1"} }, func(s *ContainerSpec) { s.DNS = []string{"8.8.8.8"} }},
		{"dns_opt", func(s *ContainerSpec) { s.DNSOptions = []string{"ndots:1"} }, func(s *ContainerSpec) { s.DNSOptions = []string{"ndots:2"} }},
		{"dns_search", func(s *ContainerSpec) { s.DNSSearch = []string{"a.test"} }, func(s *ContainerSpec) { s.DNSSearch = []string{"b.test"} }},
		{"hostname", func(s *ContainerSpec) { s.Hostname = "a" }, func(s *ContainerSpec) { s.Hostname = "b" }},
		{"domainname", func(s *ContainerSpec) { s.Domainname = "a.test" }, func(s *ContainerSpec) { s.Domainname = "b.test" }},
		{"expose", func(s *ContainerSpec) { s.Expose = []string{"80"} }, func(s *ContainerSpec) { s.Expose = []string{"81"} }},
		{"extra_hosts", func(s *ContainerSpec) { s.ExtraHosts = []string{"a:1.2.3.4"} }, func(s *ContainerSpec) { s.ExtraHosts = []string{"a:1.2.3.5"} }},
		{"group_add", func(s *ContainerSpec) { s.GroupAdd = []string{"20"} }, func(s *ContainerSpec) { s.GroupAdd = []string{"21"} }},
		{"ipc", func(s *ContainerSpec) { s.IPC = "host" }, func(s *ContainerSpec) { s.IPC = "private" }},
		{"mac_address", func(s *ContainerSpec) { s.MacAddress = "02:00:00:00:00:01" }, func(s *ContainerSpec) { s.MacAddress = "02:00:00:00:00:02" }},
		{"mem_limit", func(s *ContainerSpec) { s.Memory = 1 << 20 }, func(s *ContainerSpec) { s.Memory = 2 << 20 }},
		{"mem_reservation", func(s *ContainerSpec) { s.MemoryReservation = 1 << 20 }, func(s *ContainerSpec) { s.MemoryReservation = 2 << 20 }},
		{"network_mode", func(s *ContainerSpec) { s.NetworkMode = "host" }, func(s *ContainerSpec) { s.NetworkMode = "none" }},
		{"oom_kill_disable", func(s *ContainerSpec) { s.OomKillDisable = true }, nil},
		{"oom_score_adj", func(s *ContainerSpec) { s.OomScoreAdj = 10 }, func(s *ContainerSpec) { s.OomScoreAdj = -10 }},
		{"pid", func(s *ContainerSpec) { s.PID = "host" }, nil},
		{"pids_limit", func(s *ContainerSpec) { s.PidsLimit = 10 }, func(s *ContainerSpec) { s.PidsLimit = -1 }},
		{"privileged", func(s *ContainerSpec) { s.Privileged = true }, nil},
		{"read_only", func(s *ContainerSpec) { s.ReadOnly = true }, nil},
		{"security_opt", func(s *ContainerSpec) { s.SecurityOpt = []string{"no-new-privileges"} }, func(s *ContainerSpec) { s.SecurityOpt = []string{"seccomp=unconfined"} }},
		{"shm_size", func(s *ContainerSpec) { s.ShmSize = 1 << 20 }, func(s *ContainerSpec) { s.ShmSize = 2 << 20 }},
		{"stop_signal", func(s *ContainerSpec) { s.StopSignal = "SIGINT" }, func(s *ContainerSpec) { s.StopSignal = "SIGHUP" }},
		{"sysctls", func(s *ContainerSpec) { s.Sysctls = map[string]string{"net.ipv4.ip_forward": "1"} }, func(s *ContainerSpec) { s.Sysctls = map[string]string{"net.ipv4.ip_forward": "0"} }},
		{"tmpfs", func(s *ContainerSpec) { s.Tmpfs = []string{"/run"} }, func(s *ContainerSpec) { s.Tmpfs = []string{"/run:size=1m"} }},
		{"ulimits", func(s *ContainerSpec) { s.Ulimits = []Ulimit{{Name: "nofile", Soft: 1, Hard: 2}} }, func(s *ContainerSpec) { s.Ulimits = []Ulimit{{Name: "nofile", Soft: 1, Hard: 3}} }},
		{"user", func(s *ContainerSpec) { s.User = "1000" }, func(s *ContainerSpec) { s.User = "1001" }},
		{"userns_mode", func(s *ContainerSpec) { s.UsernsMode = "host" }, nil},
		{"working_dir", func(s *ContainerSpec) { s.WorkingDir = "/a" }, func(s *ContainerSpec) { s.WorkingDir = "/b" }},
		{"platform", func(s *ContainerSpec) { s.Platform = "linux/amd64" }, func(s *ContainerSpec) { s.Platform = "linux/arm64" }},
		{"runtime", func(s *ContainerSpec) { s.Runtime = "runc" }, func(s *ContainerSpec) { s.Runtime = "crun" }},
		{"init", func(s *ContainerSpec) { s.Init = &yes }, func(s *ContainerSpec) { no := false; s.Init = &no }},
		{"logging", func(s *ContainerSpec) { s.Logging = &Logging{Driver: "local"} }, func(s *ContainerSpec) { s.Logging = &Logging{Driver: "none"} }},
		{"stdin_open", func(s *ContainerSpec) { s.StdinOpen = true }, nil},
		{"tty", func(s *ContainerSpec) { s.Tty = true }, nil},
		{"network_addresses", func(s *ContainerSpec) { s.Networks = []NetworkAttachment{{Name: "n", IPv4Address: "10.0.0.2"}} },
			func(s *ContainerSpec) { s.Networks = []NetworkAttachment{{Name: "n", IPv4Address: "10.0.0.3"}} }},
	}
	key := []byte("k")
	base := ContainerSpec{Service: "a", Image: "img"}
	baseFields := base.fields(key)
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			a := base
			if tc.field == "network_addresses" {
				a.Networks = []NetworkAttachment{{Name: "n"}}
			}
			before := a.fields(key)
			tc.a(&a)
			require.NoError(t, a.validate("test"))
			fa := a.fields(key)
			assert.Contains(t, fa, tc.field)
			assert.NotEqual(t, hashFields(key, before), hashFields(key, fa))
			if tc.b != nil {
				b := base
				tc.b(&b)
				require.NoError(t, b.validate("test"))
				assert.NotEqual(t, fa[tc.field], b.fields(key)[tc.field])
			}
		})
	}
	assert.Equal(t, []string{"image"}, slices.Sorted(maps.Keys(baseFields)), "an option left unset is not in the hash")
}

// TestCreateOptionsValidated: each bad value is a *SpecError naming the
// service and the Go field.
func TestCreateOptionsValidated(t *testing.T) {
	cases := []struct {
		field string
		set   func(s *ContainerSpec)
	}{
		{"CapAdd[0]", func(s *ContainerSpec) { s.CapAdd = []string{"NET ADMIN"} }},
		{"CPUShares", func(s *ContainerSpec) { s.CPUShares = -1 }},
		{"CPUs", func(s *ContainerSpec) { s.CPUs = -0.5 }},
		{"CPUSet", func(s *ContainerSpec) { s.CPUSet = "0-" }},
		{"Memory", func(s *ContainerSpec) { s.Memory = -1 }},
		{"MemoryReservation", func(s *ContainerSpec) { s.Memory, s.MemoryReservation = 1<<20, 2<<20 }},
		{"PidsLimit", func(s *ContainerSpec) { s.PidsLimit = -2 }},
		{"OomScoreAdj", func(s *ContainerSpec) { s.OomScoreAdj = 1001 }},
		{"PID", func(s *ContainerSpec) { s.PID = "private" }},
		{"UsernsMode", func(s *ContainerSpec) { s.UsernsMode = "private" }},
		{"IPC", func(s *ContainerSpec) { s.IPC = "bogus" }},
		{"StopSignal", func(s *ContainerSpec) { s.StopSignal = "KILL ME" }},
		{"Hostname", func(s *ContainerSpec) { s.Hostname = "-bad-" }},
		{"WorkingDir", func(s *ContainerSpec) { s.WorkingDir = "relative" }},
		{"Platform", func(s *ContainerSpec) { s.Platform = "amd64" }},
		{"MacAddress", func(s *ContainerSpec) { s.MacAddress = "zz:00" }},
		{"NetworkMode", func(s *ContainerSpec) { s.NetworkMode = "bridged" }},
		{"NetworkMode", func(s *ContainerSpec) { s.NetworkMode = "service:a" }},
		{"NetworkMode", func(s *ContainerSpec) { s.NetworkMode, s.Networks = "host", []NetworkAttachment{{Name: "n"}} }},
		{"Devices[0].Host", func(s *ContainerSpec) { s.Devices = []Device{{Host: "dev/zero"}} }},
		{"Devices[0].Permissions", func(s *ContainerSpec) { s.Devices = []Device{{Host: "/dev/zero", Permissions: "rx"}} }},
		{"DNS[0]", func(s *ContainerSpec) { s.DNS = []string{"dns.example"} }},
		{"SecurityOpt[0]", func(s *ContainerSpec) { s.SecurityOpt = []string{" "} }},
		{"Expose[0]", func(s *ContainerSpec) { s.Expose = []string{"80/icmp"} }},
		{"ExtraHosts[0]", func(s *ContainerSpec) { s.ExtraHosts = []string{"db"} }},
		{"Sysctls", func(s *ContainerSpec) { s.Sysctls = map[string]string{"a=b": "1"} }},
		{"Tmpfs[0]", func(s *ContainerSpec) { s.Tmpfs = []string{"run"} }},
		{"Ulimits[0]", func(s *ContainerSpec) { s.Ulimits = []Ulimit{{Name: "nofile", Soft: 3, Hard: 2}} }},
		{"Ulimits[1].Name", func(s *ContainerSpec) { s.Ulimits = []Ulimit{{Name: "nofile"}, {Name: "nofile"}} }},
		{"Logging.Driver", func(s *ContainerSpec) { s.Logging = &Logging{Options: map[string]string{"a": "b"}} }},
		{"Networks[0].IPv4Address", func(s *ContainerSpec) { s.Networks = []NetworkAttachment{{Name: "n", IPv4Address: "fe80::1"}} }},
		{"Networks[0].IPv6Address", func(s *ContainerSpec) { s.Networks = []NetworkAttachment{{Name: "n", IPv6Address: "10.0.0.1"}} }},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			s := ContainerSpec{Service: "a", Image: "img"}
			tc.set(&s)
			err := s.validate("service a")
			require.ErrorIs(t, err, ErrInvalidSpec)
			var se *SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "a", se.Service)
			assert.Equal(t, tc.field, se.Field, "%v", err)
		})
	}
}
