package docker_test

import (
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// hostOptionCases set one create option each on a container spec and
// check it in the engine's inspect of the container created.
var hostOptionCases = []struct {
	name  string
	set   func(s *docker.ContainerSpec)
	check func(t *testing.T, r container.InspectResponse)
}{
	// The engine of CI runs without CAP_SYS_RESOURCE, so a privileged
	// process running as root cannot start there; one running as another
	// user can.
	{"privileged", func(s *docker.ContainerSpec) { s.Privileged, s.User = true, "1000" },
		func(t *testing.T, r container.InspectResponse) { assert.True(t, r.HostConfig.Privileged) }},
	{"devices", func(s *docker.ContainerSpec) {
		s.Devices = []docker.Device{{Host: "/dev/zero", Container: "/dev/xzero", Permissions: "r"}}
	},
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, []container.DeviceMapping{{PathOnHost: "/dev/zero", PathInContainer: "/dev/xzero", CgroupPermissions: "r"}}, r.HostConfig.Devices)
		}},
	{"sysctls", func(s *docker.ContainerSpec) { s.Sysctls = map[string]string{"net.ipv4.ip_forward": "1"} },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, map[string]string{"net.ipv4.ip_forward": "1"}, r.HostConfig.Sysctls)
		}},
	{"tmpfs", func(s *docker.ContainerSpec) { s.Tmpfs = []string{"/run:size=1m"} },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, map[string]string{"/run": "size=1m"}, r.HostConfig.Tmpfs)
		}},
	{"memory", func(s *docker.ContainerSpec) { s.Memory, s.MemoryReservation, s.OomKillDisable = 64<<20, 32<<20, true },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, int64(64<<20), r.HostConfig.Memory)
			assert.Equal(t, int64(32<<20), r.HostConfig.MemoryReservation)
			require.NotNil(t, r.HostConfig.OomKillDisable)
			assert.True(t, *r.HostConfig.OomKillDisable)
		}},
	{"cpus", func(s *docker.ContainerSpec) { s.CPUs = 0.5 },
		func(t *testing.T, r container.InspectResponse) { assert.Equal(t, int64(5e8), r.HostConfig.NanoCPUs) }},
	{"cpu shares quota set", func(s *docker.ContainerSpec) { s.CPUShares, s.CPUQuota, s.CPUSet = 512, 50000, "0" },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, int64(512), r.HostConfig.CPUShares)
			assert.Equal(t, int64(50000), r.HostConfig.CPUQuota)
			assert.Equal(t, "0", r.HostConfig.CpusetCpus)
		}},
	{"pids limit", func(s *docker.ContainerSpec) { s.PidsLimit = 50 },
		func(t *testing.T, r container.InspectResponse) {
			require.NotNil(t, r.HostConfig.PidsLimit)
			assert.Equal(t, int64(50), *r.HostConfig.PidsLimit)
		}},
	{"ulimits", func(s *docker.ContainerSpec) { s.Ulimits = []docker.Ulimit{{Name: "nofile", Soft: 1024, Hard: 2048}} },
		func(t *testing.T, r container.InspectResponse) {
			require.Len(t, r.HostConfig.Ulimits, 1)
			assert.Equal(t, container.Ulimit{Name: "nofile", Soft: 1024, Hard: 2048}, *r.HostConfig.Ulimits[0])
		}},
	{"capabilities", func(s *docker.ContainerSpec) { s.CapAdd, s.CapDrop = []string{"NET_ADMIN"}, []string{"MKNOD"} },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, []string{"CAP_NET_ADMIN"}, []string(r.HostConfig.CapAdd), "the engine adds the prefix")
			assert.Equal(t, []string{"CAP_MKNOD"}, []string(r.HostConfig.CapDrop))
		}},
	{"shm size", func(s *docker.ContainerSpec) { s.ShmSize = 8 << 20 },
		func(t *testing.T, r container.InspectResponse) { assert.Equal(t, int64(8<<20), r.HostConfig.ShmSize) }},
	{"init", func(s *docker.ContainerSpec) { yes := true; s.Init = &yes },
		func(t *testing.T, r container.InspectResponse) {
			require.NotNil(t, r.HostConfig.Init)
			assert.True(t, *r.HostConfig.Init)
		}},
	{"oom score", func(s *docker.ContainerSpec) { s.OomScoreAdj = 100 },
		func(t *testing.T, r container.InspectResponse) { assert.Equal(t, 100, r.HostConfig.OomScoreAdj) }},
	{"read only", func(s *docker.ContainerSpec) { s.ReadOnly = true },
		func(t *testing.T, r container.InspectResponse) { assert.True(t, r.HostConfig.ReadonlyRootfs) }},
	{"dns", func(s *docker.ContainerSpec) {
		s.DNS, s.DNSOptions, s.DNSSearch = []string{"192.0.2.53"}, []string{"ndots:2"}, []string{"example.test"}
	}, func(t *testing.T, r container.InspectResponse) {
		assert.Equal(t, []string{"192.0.2.53"}, r.HostConfig.DNS)
		assert.Equal(t, []string{"ndots:2"}, r.HostConfig.DNSOptions)
		assert.Equal(t, []string{"example.test"}, r.HostConfig.DNSSearch)
	}},
	{"hostname", func(s *docker.ContainerSpec) { s.Hostname, s.Domainname = "box", "example.test" },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, "box", r.Config.Hostname)
			assert.Equal(t, "example.test", r.Config.Domainname)
		}},
	{"extra hosts", func(s *docker.ContainerSpec) { s.ExtraHosts = []string{"db.test:192.0.2.7"} },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, []string{"db.test:192.0.2.7"}, r.HostConfig.ExtraHosts)
		}},
	{"user groups workdir", func(s *docker.ContainerSpec) { s.User, s.GroupAdd, s.WorkingDir = "1000:1000", []string{"20"}, "/tmp" },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, "1000:1000", r.Config.User)
			assert.Equal(t, []string{"20"}, r.HostConfig.GroupAdd)
			assert.Equal(t, "/tmp", r.Config.WorkingDir)
		}},
	{"stop signal", func(s *docker.ContainerSpec) { s.StopSignal = "SIGINT" },
		func(t *testing.T, r container.InspectResponse) { assert.Equal(t, "SIGINT", r.Config.StopSignal) }},
	{"security opt", func(s *docker.ContainerSpec) { s.SecurityOpt = []string{"no-new-privileges"} },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, []string{"no-new-privileges"}, r.HostConfig.SecurityOpt)
		}},
	{"ipc", func(s *docker.ContainerSpec) { s.IPC = "shareable" },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, container.IpcMode("shareable"), r.HostConfig.IpcMode)
		}},
	{"expose", func(s *docker.ContainerSpec) { s.Expose = []string{"9000/udp"} },
		func(t *testing.T, r container.InspectResponse) {
			assert.Contains(t, r.Config.ExposedPorts, nat.Port("9000/udp"))
		}},
	{"logging", func(s *docker.ContainerSpec) {
		s.Logging = &docker.Logging{Driver: "json-file", Options: map[string]string{"max-size": "1m"}}
	}, func(t *testing.T, r container.InspectResponse) {
		assert.Equal(t, "json-file", r.HostConfig.LogConfig.Type)
		assert.Equal(t, "1m", r.HostConfig.LogConfig.Config["max-size"])
	}},
	{"stdin tty", func(s *docker.ContainerSpec) { s.StdinOpen, s.Tty = true, true },
		func(t *testing.T, r container.InspectResponse) {
			assert.True(t, r.Config.OpenStdin)
			assert.True(t, r.Config.Tty)
		}},
	{"mac address", func(s *docker.ContainerSpec) { s.MacAddress = "02:42:ac:11:00:99" },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, "02:42:ac:11:00:99", r.Config.MacAddress) //nolint:staticcheck // API 1.41
		}},
	{"userns runtime platform", func(s *docker.ContainerSpec) { s.UsernsMode, s.Runtime, s.Platform = "host", "runc", "linux/amd64" },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, container.UsernsMode("host"), r.HostConfig.UsernsMode)
			assert.Equal(t, "runc", r.HostConfig.Runtime)
			assert.Equal(t, "linux", r.Platform)
		}},
	{"cgroup parent", func(s *docker.ContainerSpec) { s.CgroupParent = "/converge-test" },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, "/converge-test", r.HostConfig.CgroupParent)
		}},
	{"host network and pid", func(s *docker.ContainerSpec) { s.NetworkMode, s.PID = "host", "host" },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, container.NetworkMode("host"), r.HostConfig.NetworkMode)
			assert.Equal(t, container.PidMode("host"), r.HostConfig.PidMode)
		}},
	{"no network", func(s *docker.ContainerSpec) { s.NetworkMode = "none" },
		func(t *testing.T, r container.InspectResponse) {
			assert.Equal(t, container.NetworkMode("none"), r.HostConfig.NetworkMode)
		}},
}

// TestIntegrationHostOptions creates a container with each create option
// on the real engine and reads it back with inspect; each change
// recreates the container, and a project converged again costs 2 engine
// calls and no write.
func TestIntegrationHostOptions(t *testing.T) {
	cli, img := realEngine(t)
	name := uniqueName("cvh")
	cleanupProject(t, cli, name)
	eng := dockertest.Count(cli)
	base := docker.ContainerSpec{Service: "a", Image: img, Pull: docker.PullNever, Command: []string{"/app", "sleep"},
		Labels: map[string]string{dockertest.TestLabel: "1"}}
	p := &docker.Project{Name: name, PollInterval: 100 * time.Millisecond, Containers: []docker.ContainerSpec{base}}
	apply(t, eng, p)
	prev := inspect(t, cli, name+"-a").ID
	for _, tc := range hostOptionCases {
		t.Run(tc.name, func(t *testing.T) {
			spec := base
			tc.set(&spec)
			p.Containers = []docker.ContainerSpec{spec}
			eng.Reset()
			plans := docker.Plans(dry(t, eng, p))
			require.Len(t, plans, 1)
			assert.Equal(t, docker.ActionRecreate, plans[0].Action, "plan: %v", plans[0])
			apply(t, eng, p)
			r := inspect(t, cli, name+"-a")
			assert.NotEqual(t, prev, r.ID, "recreated")
			prev = r.ID
			assert.True(t, r.State.Running, "state: %+v", r.State)
			tc.check(t, r)

			eng.Reset()
			rep := apply(t, eng, p)
			assert.Empty(t, rep.IDs(converge.OutcomeChanged))
			assert.Zero(t, eng.Writes(), "calls: %v", eng.Calls())
			assert.LessOrEqual(t, eng.Total(), 2, "calls: %v", eng.Calls())
			assert.Equal(t, prev, inspect(t, cli, name+"-a").ID)
		})
	}
}

// TestIntegrationServiceNetworkAndStaticAddress shares the network
// namespace of one service with another (network_mode: service:NAME) and
// gives a container a static address on a network with its own IPAM.
func TestIntegrationServiceNetworkAndStaticAddress(t *testing.T) {
	cli, img := realEngine(t)
	name := uniqueName("cvs")
	cleanupProject(t, cli, name)
	eng := dockertest.Count(cli)
	labels := map[string]string{dockertest.TestLabel: "1"}
	net := name + "_net"
	p := &docker.Project{Name: name, PollInterval: 100 * time.Millisecond,
		Networks: []docker.NetworkSpec{{Name: net, Labels: labels, Options: map[string]string{"com.docker.network.bridge.enable_icc": "true"},
			IPAM: &docker.IPAM{Pools: []docker.IPAMPool{{Subnet: "172.31.250.0/24", Gateway: "172.31.250.1"}}}}},
		Containers: []docker.ContainerSpec{
			{Service: "vpn", Image: img, Pull: docker.PullNever, Command: []string{"/app", "sleep"}, Labels: labels,
				Networks: []docker.NetworkAttachment{{Name: net, IPv4Address: "172.31.250.10"}}},
			{Service: "app", Image: img, Pull: docker.PullNever, Command: []string{"/app", "sleep"}, Labels: labels,
				NetworkMode: "service:vpn"},
		}}
	apply(t, eng, p)
	vpn, app := inspect(t, cli, name+"-vpn"), inspect(t, cli, name+"-app")
	require.Contains(t, vpn.NetworkSettings.Networks, net)
	assert.Equal(t, "172.31.250.10", vpn.NetworkSettings.Networks[net].IPAddress)
	assert.Equal(t, container.NetworkMode("container:"+vpn.ID), app.HostConfig.NetworkMode)
	assert.True(t, app.State.Running)
	nw, err := cli.NetworkInspect(t.Context(), net, network.InspectOptions{})
	require.NoError(t, err)
	require.Len(t, nw.IPAM.Config, 1)
	assert.Equal(t, "172.31.250.0/24", nw.IPAM.Config[0].Subnet)
	assert.Equal(t, "true", nw.Options["com.docker.network.bridge.enable_icc"])

	eng.Reset()
	rep := apply(t, eng, p)
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.LessOrEqual(t, eng.Total(), 2, "calls: %v", eng.Calls())

	// A change to vpn recreates it, and app with it: the namespace app
	// shared is gone with the old vpn container.
	p.Containers[0].Env = map[string]string{"V": "2"}
	rep = apply(t, eng, p)
	assert.ElementsMatch(t, []converge.ID{docker.ContainerID(name, "vpn"), docker.ContainerID(name, "app")}, rep.IDs(converge.OutcomeChanged))
	vpn2, app2 := inspect(t, cli, name+"-vpn"), inspect(t, cli, name+"-app")
	assert.NotEqual(t, vpn.ID, vpn2.ID)
	assert.Equal(t, container.NetworkMode("container:"+vpn2.ID), app2.HostConfig.NetworkMode)
	assert.True(t, app2.State.Running)
	eng.Reset()
	rep = apply(t, eng, p)
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.LessOrEqual(t, eng.Total(), 2, "calls: %v", eng.Calls())
}
