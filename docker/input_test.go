package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/docker"
)

// TestBadComposeValueNamesServiceAndField covers values compose-go rejects
// with an untyped message and values it passes on unchecked: each is a
// *SpecError naming the service and the Compose field.
func TestBadComposeValueNamesServiceAndField(t *testing.T) {
	tests := []struct {
		name, line, field string
	}{
		{"published port out of range", `ports: ["70000:80"]`, "ports[0]"},
		{"container port out of range", `ports: ["8080:70000"]`, "ports[0]"},
		{"bad protocol", `ports: ["8080:80/foo"]`, "ports[0]"},
		{"bad host ip", `ports: ["999.1.1.1:8080:80"]`, "ports[0]"},
		{"long syntax published out of range", `ports: [{target: 80, published: "70000"}]`, "ports[0].published"},
		{"long syntax target out of range", `ports: [{target: 70000}]`, "ports[0].target"},
		{"bad interval", `healthcheck: {test: ["CMD", "x"], interval: 5 parsecs}`, "healthcheck.interval"},
		{"negative interval", `healthcheck: {test: ["CMD", "x"], interval: -5s}`, "healthcheck.interval"},
		{"interpolated bad timeout", `healthcheck: {test: ["CMD", "x"], timeout: "${T}"}`, "healthcheck.timeout"},
		{"negative retries", `healthcheck: {test: ["CMD", "x"], retries: -1}`, "healthcheck.retries"},
		{"bad stop grace period", `stop_grace_period: forever`, "stop_grace_period"},
		{"unknown restart policy", `restart: sometimes`, "restart"},
		{"bad restart count", `restart: on-failure:x`, "restart"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := "name: p\nservices:\n  ok:\n    image: i\n  web:\n    image: i\n    " + tt.line + "\n"
			_, err := docker.LoadCompose(context.Background(), []byte(yaml), docker.LoadOptions{Env: map[string]string{"T": "soon"}})
			require.ErrorIs(t, err, docker.ErrInvalidSpec)
			var se *docker.SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "web", se.Service)
			assert.Equal(t, tt.field, se.Field)
			assert.Contains(t, err.Error(), "web")
			assert.Contains(t, err.Error(), tt.field)
		})
	}
}

// TestValidComposeValuesStillLoad: the checks refuse only invalid values.
func TestValidComposeValuesStillLoad(t *testing.T) {
	for _, line := range []string{
		`ports: ["8000-8001:80-81", "[::1]:8080:80/udp", "9090", 9091]`,
		`ports: [{target: 80, published: "8080", host_ip: 127.0.0.1, protocol: udp}]`,
		`ports: [{target: 80, published: "${PORT}"}]`,
		`healthcheck: {test: ["CMD", "x"], interval: 1m30s, timeout: 1d, start_period: 0s, retries: 0}`,
		`stop_grace_period: 1m`,
		`restart: on-failure:3`,
		`restart: unless-stopped`,
		`restart: "no"`,
	} {
		_, err := docker.LoadCompose(context.Background(), []byte("name: p\nservices:\n  web:\n    image: i\n    "+line+"\n"),
			docker.LoadOptions{Env: map[string]string{"PORT": "8081"}})
		assert.NoError(t, err, line)
	}
}

// TestGoSpecValidatedBeforeEngine: the Go API refuses the same invalid
// values with the same typed error, in Project.Graph, before any engine
// call.
func TestGoSpecValidatedBeforeEngine(t *testing.T) {
	neg := -time.Second
	tests := []struct {
		name  string
		edit  func(*docker.ContainerSpec)
		field string
	}{
		{"host port out of range", func(s *docker.ContainerSpec) { s.Ports = []docker.Port{{HostPort: "70000", ContainerPort: 80}} }, "Ports[0].HostPort"},
		{"host port not a number", func(s *docker.ContainerSpec) { s.Ports = []docker.Port{{HostPort: "http", ContainerPort: 80}} }, "Ports[0].HostPort"},
		{"backwards port range", func(s *docker.ContainerSpec) { s.Ports = []docker.Port{{HostPort: "9000-8000", ContainerPort: 80}} }, "Ports[0].HostPort"},
		{"bad host ip", func(s *docker.ContainerSpec) { s.Ports = []docker.Port{{HostIP: "999.1.1.1", ContainerPort: 80}} }, "Ports[0].HostIP"},
		{"bad protocol", func(s *docker.ContainerSpec) { s.Ports = []docker.Port{{ContainerPort: 80, Protocol: "foo"}} }, "Ports[0].Protocol"},
		{"unknown restart policy", func(s *docker.ContainerSpec) { s.Restart = "sometimes" }, "Restart"},
		{"bad restart count", func(s *docker.ContainerSpec) { s.Restart = "on-failure:-1" }, "Restart"},
		{"negative interval", func(s *docker.ContainerSpec) { s.Healthcheck = &docker.Healthcheck{Interval: neg} }, "Healthcheck.Interval"},
		{"negative retries", func(s *docker.ContainerSpec) { s.Healthcheck = &docker.Healthcheck{Retries: -1} }, "Healthcheck.Retries"},
		{"negative stop timeout", func(s *docker.ContainerSpec) { s.StopTimeout = &neg }, "StopTimeout"},
		{"bad env name", func(s *docker.ContainerSpec) { s.Env = map[string]string{"A=B": "x"} }, "Env"},
		{"unknown update strategy", func(s *docker.ContainerSpec) { s.Update = 7 }, "Update"},
		{"unknown pull policy", func(s *docker.ContainerSpec) { s.Pull = 7 }, "Pull"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			spec := docker.ContainerSpec{Service: "web", Image: "app:1"}
			tt.edit(&spec)
			_, err := (&docker.Project{Name: "p", Containers: []docker.ContainerSpec{spec}}).Graph(f)
			require.ErrorIs(t, err, docker.ErrInvalidSpec)
			var se *docker.SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "web", se.Service)
			assert.Equal(t, tt.field, se.Field)
			assert.Zero(t, f.TotalCalls(), "nothing reached the engine")
		})
	}
}
