package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

const hostOptionsCompose = `
name: edge
services:
  sensor:
    image: sensor:1
    cap_add: [SYS_RAWIO]
    cap_drop: [MKNOD]
    cgroup_parent: /edge
    cpu_shares: 512
    cpu_quota: 50000
    cpus: 0.5
    cpuset: "0-1"
    devices: ["/dev/i2c-1:/dev/i2c-1:rw", "/dev/ttyUSB0"]
    dns: [192.0.2.53]
    dns_opt: ["ndots:2"]
    dns_search: [edge.test]
    domainname: edge.test
    hostname: sensor
    expose: ["9000", "9100-9101/udp"]
    extra_hosts: ["hub:192.0.2.1"]
    group_add: [dialout]
    ipc: shareable
    mac_address: "02:42:ac:11:00:99"
    mem_limit: 64m
    mem_reservation: 32m
    oom_kill_disable: true
    oom_score_adj: 100
    pid: host
    pids_limit: 50
    privileged: true
    read_only: true
    security_opt: [no-new-privileges]
    shm_size: 8m
    stop_signal: SIGINT
    sysctls: {net.ipv4.ip_forward: "1"}
    tmpfs: ["/run:size=1m"]
    ulimits:
      nofile: {soft: 1024, hard: 2048}
      nproc: 512
    user: "1000:1000"
    userns_mode: host
    working_dir: /srv
    platform: linux/arm64
    runtime: runc
    init: true
    logging: {driver: json-file, options: {max-size: 1m}}
    stdin_open: true
    tty: true
  gateway:
    image: gw:1
    network_mode: host
    deploy:
      resources:
        limits: {cpus: "1.5", memory: 128m, pids: 100}
        reservations: {memory: 64m}
  app:
    image: app:1
    network_mode: "service:vpn"
  vpn:
    image: vpn:1
    networks:
      back: {ipv4_address: 172.31.250.10}
networks:
  back:
    driver_opts: {com.docker.network.bridge.name: br-edge}
    enable_ipv6: false
    ipam:
      config:
        - {subnet: 172.31.250.0/24, gateway: 172.31.250.1}
volumes:
  data:
    driver_opts: {type: tmpfs, device: tmpfs}
`

func TestLoadComposeCreateOptions(t *testing.T) {
	p, err := docker.LoadCompose(context.Background(), []byte(hostOptionsCompose), docker.LoadOptions{})
	require.NoError(t, err)
	byName := map[string]docker.ContainerSpec{}
	for _, c := range p.Containers {
		byName[c.Service] = c
	}
	yes := true
	s := byName["sensor"]
	want := docker.ContainerSpec{Service: "sensor", Image: "sensor:1",
		CapAdd: []string{"SYS_RAWIO"}, CapDrop: []string{"MKNOD"}, CgroupParent: "/edge",
		CPUShares: 512, CPUQuota: 50000, CPUs: 0.5, CPUSet: "0-1",
		Devices: []docker.Device{{Host: "/dev/i2c-1", Container: "/dev/i2c-1", Permissions: "rw"}, {Host: "/dev/ttyUSB0", Container: "/dev/ttyUSB0", Permissions: "rwm"}},
		DNS:     []string{"192.0.2.53"}, DNSOptions: []string{"ndots:2"}, DNSSearch: []string{"edge.test"},
		Networks: []docker.NetworkAttachment{{Name: "edge_default"}},
		Hostname: "sensor", Domainname: "edge.test", Expose: []string{"9000", "9100-9101/udp"},
		ExtraHosts: []string{"hub:192.0.2.1"}, GroupAdd: []string{"dialout"}, IPC: "shareable",
		MacAddress: "02:42:ac:11:00:99", Memory: 64 << 20, MemoryReservation: 32 << 20,
		OomKillDisable: true, OomScoreAdj: 100, PID: "host", PidsLimit: 50, Privileged: true, ReadOnly: true,
		SecurityOpt: []string{"no-new-privileges"}, ShmSize: 8 << 20, StopSignal: "SIGINT",
		Sysctls: map[string]string{"net.ipv4.ip_forward": "1"}, Tmpfs: []string{"/run:size=1m"},
		Ulimits: []docker.Ulimit{{Name: "nofile", Soft: 1024, Hard: 2048}, {Name: "nproc", Soft: 512, Hard: 512}},
		User:    "1000:1000", UsernsMode: "host", WorkingDir: "/srv", Platform: "linux/arm64", Runtime: "runc",
		Init: &yes, Logging: &docker.Logging{Driver: "json-file", Options: map[string]string{"max-size": "1m"}},
		StdinOpen: true, Tty: true,
	}
	assert.Len(t, s.ComposeHash, 64, "compose's hash of a service carried out in full")
	s.ComposeHash = ""
	assert.Equal(t, want, s)

	g := byName["gateway"]
	assert.Equal(t, "host", g.NetworkMode)
	assert.Empty(t, g.Networks)
	assert.InDelta(t, 1.5, g.CPUs, 1e-6)
	assert.Equal(t, int64(128<<20), g.Memory)
	assert.Equal(t, int64(100), g.PidsLimit)
	assert.Equal(t, int64(64<<20), g.MemoryReservation)

	assert.Equal(t, "service:vpn", byName["app"].NetworkMode)
	assert.Equal(t, []docker.NetworkAttachment{{Name: "edge_back", IPv4Address: "172.31.250.10"}}, byName["vpn"].Networks)
	require.Len(t, p.Networks, 2) // back and default
	assert.Equal(t, map[string]string{"com.docker.network.bridge.name": "br-edge"}, p.Networks[0].Options)
	assert.Equal(t, &docker.IPAM{Pools: []docker.IPAMPool{{Subnet: "172.31.250.0/24", Gateway: "172.31.250.1"}}}, p.Networks[0].IPAM)
	require.Len(t, p.Volumes, 1)
	assert.Equal(t, map[string]string{"type": "tmpfs", "device": "tmpfs"}, p.Volumes[0].Options)

	// The graph orders the container after the service whose network it
	// shares.
	fake := dockertest.New()
	graph, err := p.Graph(fake)
	require.NoError(t, err)
	assert.Contains(t, graph.Dependencies(docker.ContainerID("edge", "app")), docker.ContainerID("edge", "vpn"))
}

// TestLoadComposeCreateOptionErrors: a bad value is a *SpecError naming
// the service and the Compose field, before any engine call.
func TestLoadComposeCreateOptionErrors(t *testing.T) {
	cases := []struct{ yaml, field string }{
		{"cap_add: [\"NET ADMIN\"]", "cap_add[0]"},
		{"cpuset: \"0-\"", "cpuset"},
		{"devices: [\"dev/zero\"]", "devices[0].Host"},
		{"dns: [dns.example]", "dns[0]"},
		{"pid: private", "pid"},
		{"stop_signal: \"kill me\"", "stop_signal"},
		{"working_dir: srv", "working_dir"},
		{"network_mode: bridged", "network_mode"},
		{"mem_limit: 1m\n    mem_reservation: 2m", "mem_reservation"},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			_, err := docker.LoadCompose(context.Background(), []byte("name: d\nservices:\n  a:\n    image: i\n    "+tc.yaml+"\n"), docker.LoadOptions{})
			require.ErrorIs(t, err, docker.ErrInvalidSpec)
			var se *docker.SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "a", se.Service)
			assert.Equal(t, tc.field, se.Field, "%v", err)
		})
	}

	fake := dockertest.New()
	p := &docker.Project{Name: "d", Containers: []docker.ContainerSpec{{Service: "a", Image: "i", NetworkMode: "service:nobody"}}}
	_, err := p.Graph(fake)
	var se *docker.SpecError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "NetworkMode", se.Field)
	assert.Zero(t, fake.TotalCalls())
}

// TestLoadComposeRefusesEveryUnsupportedFieldAtOnce: the fields the
// adapter does not carry out are all named in one *UnsupportedError.
func TestLoadComposeRefusesEveryUnsupportedFieldAtOnce(t *testing.T) {
	yaml := []byte(`
name: d
services:
  db:
    image: db
  web:
    image: web
    links: [db]
    external_links: [other_db]
    volumes_from: [db]
    scale: 3
    deploy:
      mode: replicated
      replicas: 3
      placement: {constraints: [node.role==manager]}
      update_config: {parallelism: 1}
      restart_policy: {condition: on-failure}
      resources:
        reservations: {cpus: "0.5", devices: [{capabilities: [gpu]}]}
secrets:
  token: {external: true}
configs:
  conf: {external: true}
`)
	_, err := docker.LoadCompose(context.Background(), yaml, docker.LoadOptions{WorkingDir: t.TempDir()})
	var ue *docker.UnsupportedError
	require.ErrorAs(t, err, &ue, "%v", err)
	require.ErrorIs(t, err, docker.ErrUnsupported)
	for _, f := range []string{
		"configs.conf.external", "secrets.token.external",
		"services.web.deploy.mode", "services.web.deploy.placement",
		"services.web.deploy.update_config",
		"services.web.deploy.resources.reservations.cpus", "services.web.deploy.resources.reservations.devices",
	} {
		assert.Contains(t, ue.Fields, f)
	}
	// Carried out (Replicas), so not refused.
	assert.NotContains(t, ue.Fields, "services.web.scale")
	assert.NotContains(t, ue.Fields, "services.web.deploy.replicas")
}

// TestLoadComposeFileIncludesAndExtends: a top-level include: and a
// service's extends: are loaded (never dropped), and an include that
// cannot be read fails the load.
func TestLoadComposeFileIncludesAndExtends(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	write("db.yaml", "services:\n  db:\n    image: postgres:16\n    environment: {MODE: primary}\n")
	write("base.yaml", "services:\n  base:\n    image: app:1\n    user: \"1000\"\n")
	main := write("compose.yaml", "name: inc\ninclude: [db.yaml]\nservices:\n  web:\n    extends: {file: base.yaml, service: base}\n    depends_on: [db]\n")
	p, err := docker.LoadComposeFile(context.Background(), main, docker.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, p.Containers, 2)
	assert.Equal(t, "db", p.Containers[0].Service)
	assert.Equal(t, "postgres:16", p.Containers[0].Image)
	assert.Equal(t, map[string]string{"MODE": "primary"}, p.Containers[0].Env)
	assert.Equal(t, "web", p.Containers[1].Service)
	assert.Equal(t, "app:1", p.Containers[1].Image)
	assert.Equal(t, "1000", p.Containers[1].User)

	missing := write("broken.yaml", "name: inc\ninclude: [nowhere.yaml]\nservices:\n  web:\n    image: app:1\n")
	_, err = docker.LoadComposeFile(context.Background(), missing, docker.LoadOptions{})
	require.ErrorIs(t, err, docker.ErrInvalidCompose)
}
