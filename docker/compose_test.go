package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/docker"
)

func TestLoadComposeFields(t *testing.T) {
	p, err := docker.LoadCompose(context.Background(), []byte(`
name: demo
services:
  db:
    image: postgres:16
    container_name: the-db
    command: ["run", "--fast"]
    entrypoint: ["/entry"]
    environment:
      PASSWORD: ${PW}
      PLAIN: "1"
    labels: {team: core}
    ports: ["127.0.0.1:5432:5432/tcp"]
    volumes:
      - data:/var/lib/data
      - ./conf:/conf:ro
    networks:
      back: {aliases: [database]}
    restart: on-failure:3
    stop_grace_period: 5s
    pull_policy: never
    healthcheck:
      test: ["CMD", "pg_isready"]
      interval: 2s
      timeout: 1s
      retries: 4
      start_period: 3s
    x-update: kill-then-download
  init:
    image: busybox
  app:
    image: app:1
    depends_on:
      db: {condition: service_healthy, x-timeout: 45s}
      init: {condition: service_completed_successfully}
networks:
  back: {}
  outside: {external: true, name: shared}
volumes:
  data: {}
`), docker.LoadOptions{Env: map[string]string{"PW": "pw-from-env"}, WorkingDir: "/srv/demo", DependencyTimeout: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, "demo", p.Name)
	assert.Equal(t, []docker.NetworkSpec{{Name: "demo_back"}, {Name: "demo_default"}}, p.Networks, "external networks are used, not created")
	assert.Equal(t, []docker.VolumeSpec{{Name: "demo_data"}}, p.Volumes)
	require.Len(t, p.Containers, 3)
	app, db, init := p.Containers[0], p.Containers[1], p.Containers[2]
	grace := 5 * time.Second
	assert.Equal(t, docker.ContainerSpec{
		Service: "db", Name: "the-db", Image: "postgres:16",
		Command: []string{"run", "--fast"}, Entrypoint: []string{"/entry"},
		Env:    map[string]string{"PASSWORD": "pw-from-env", "PLAIN": "1"},
		Labels: map[string]string{"team": "core"},
		Ports:  []docker.Port{{HostIP: "127.0.0.1", HostPort: "5432", ContainerPort: 5432, Protocol: "tcp"}},
		Mounts: []docker.Mount{
			{Type: "volume", Source: "demo_data", Target: "/var/lib/data"},
			{Type: "bind", Source: "/srv/demo/conf", Target: "/conf", ReadOnly: true},
		},
		Networks:    []docker.NetworkAttachment{{Name: "demo_back", Aliases: []string{"database"}}},
		Restart:     "on-failure:3",
		StopTimeout: &grace,
		Pull:        docker.PullNever,
		Update:      docker.KillThenDownload,
		Healthcheck: &docker.Healthcheck{Test: []string{"CMD", "pg_isready"}, Interval: 2 * time.Second,
			Timeout: time.Second, Retries: 4, StartPeriod: 3 * time.Second},
	}, db)
	assert.Equal(t, docker.Once, init.Run, "waited for with service_completed_successfully")
	assert.Equal(t, []docker.Dependency{
		{Service: "db", Condition: docker.ServiceHealthy, Timeout: 45 * time.Second},
		{Service: "init", Condition: docker.ServiceCompletedSuccessfully, Timeout: time.Minute},
	}, app.DependsOn)
	assert.Equal(t, []docker.NetworkAttachment{{Name: "demo_default"}}, app.Networks)
}

func TestLoadComposeUnsupported(t *testing.T) {
	yaml := []byte(`
name: demo
services:
  web:
    image: nginx
    cpu_count: 2
    mem_swappiness: 10
    build: {context: ., cache_from: [app:cache]}
    ports:
      - {target: 80, published: "8080", app_protocol: http}
    volumes:
      - {type: bind, source: /srv, target: /srv, bind: {propagation: rshared}}
      - {type: volume, source: data, target: /data, volume: {nocopy: true}}
    networks:
      default: {link_local_ips: [169.254.1.5]}
    healthcheck:
      test: ["CMD", "true"]
      start_interval: 1s
    depends_on:
      db: {condition: service_started, restart: true, required: false}
  db:
    image: db
volumes:
  data: {}
`)
	_, err := docker.LoadCompose(context.Background(), yaml, docker.LoadOptions{})
	require.ErrorIs(t, err, docker.ErrUnsupported)
	var ue *docker.UnsupportedError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, []string{
		"services.web.build.cache_from", "services.web.cpu_count",
		"services.web.mem_swappiness",
		"services.web.networks.default.link_local_ips", "services.web.ports.app_protocol",
		"services.web.volumes.bind.propagation", "services.web.volumes.volume.nocopy",
	}, ue.Fields)

	p, err := docker.LoadCompose(context.Background(), yaml, docker.LoadOptions{IgnoreUnsupported: true})
	require.NoError(t, err)
	assert.Equal(t, ue.Fields, p.Unsupported)
}

func TestLoadComposeErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want error
	}{
		{"bad x-update", "name: d\nservices:\n  a:\n    image: i\n    x-update: sometimes\n", docker.ErrInvalidSpec},
		{"bad x-timeout", "name: d\nservices:\n  a:\n    image: i\n  b:\n    image: i\n    depends_on:\n      a: {condition: service_started, x-timeout: soon}\n", docker.ErrInvalidSpec},
		{"no image", "name: d\nservices:\n  a:\n    command: [x]\n", docker.ErrInvalidCompose},
		{"bad condition", "name: d\nservices:\n  a:\n    image: i\n  b:\n    image: i\n    depends_on:\n      a: {condition: service_sleepy}\n", docker.ErrInvalidCompose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := docker.LoadCompose(context.Background(), []byte(tt.yaml), docker.LoadOptions{})
			require.ErrorIs(t, err, tt.want)
		})
	}
	_, err := docker.LoadCompose(context.Background(), []byte("services: [oops"), docker.LoadOptions{ProjectName: "x"})
	require.ErrorIs(t, err, docker.ErrInvalidCompose)
	_, err = docker.LoadComposeFile(context.Background(), filepath.Join(t.TempDir(), "missing.yaml"), docker.LoadOptions{})
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestLoadComposeFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "compose.yaml")
	require.NoError(t, os.WriteFile(path, []byte("services:\n  a:\n    image: i\n    volumes: [./data:/data]\n"), 0o644))
	p, err := docker.LoadComposeFile(context.Background(), path, docker.LoadOptions{ProjectName: "filed"})
	require.NoError(t, err)
	assert.Equal(t, "filed", p.Name)
	assert.Equal(t, filepath.Join(dir, "data"), p.Containers[0].Mounts[0].Source, "relative binds resolve against the file's directory")
}

func FuzzLoadCompose(f *testing.F) {
	f.Add([]byte(threeServices))
	f.Add([]byte("name: x\nservices:\n  a:\n    image: i\n    depends_on: [b]\n  b:\n    image: i\n"))
	f.Add([]byte("services:\n  a:\n    image: i\n    ports: ['80']\n    healthcheck: {disable: true}\n"))
	f.Add([]byte("name: x\nservices: {}\n"))
	f.Add([]byte("name: x\nservices:\n  a:\n    image: i\n    restart: on-failure:2\n    ports: [{target: 80, published: '8000-8001'}]\n    healthcheck: {test: [CMD, x], interval: 1d, retries: 2}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := docker.LoadCompose(context.Background(), b, docker.LoadOptions{ProjectName: "fz", IgnoreUnsupported: true})
		if err != nil {
			return
		}
		// Whatever loads must make a valid graph.
		if _, err := p.Graph(newFake()); err != nil {
			t.Fatalf("loaded project does not make a graph: %v", err)
		}
	})
}
