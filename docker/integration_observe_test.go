package docker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// TestIntegrationObservedProject: on the real engine, Project.Metrics
// counts every call by operation, and Project.Logger logs the changes,
// including a recreate, without a secret value.
func TestIntegrationObservedProject(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	proj := uniqueName("cvo")
	cleanupProject(t, cli, proj)
	eng := dockertest.Count(cli)
	yaml := strings.NewReplacer("{{P}}", proj, "{{IMG}}", img).Replace(`
name: {{P}}
services:
  app:
    image: {{IMG}}
    command: ["/app", "sleep", "--upstream=https://bob:obs-cmd-pw@upstream.local/"]
    stop_grace_period: 1s
    environment:
      DB_PASSWORD: obs-secret-value
      DATABASE_URL: postgres://app:obs-url-pw@db.local/app
    labels:
      ` + dockertest.TestLabel + `: "1"
`)
	p, err := docker.LoadCompose(ctx, []byte(yaml), docker.LoadOptions{})
	require.NoError(t, err)
	m := newOpCounts()
	var logs bytes.Buffer
	p.Metrics = m
	p.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	walk := func() *converge.Report {
		t.Helper()
		g, err := p.Graph(eng)
		require.NoError(t, err)
		rep, err := converge.Apply(ctx, g)
		require.NoError(t, err)
		return rep
	}
	walk()
	assert.Equal(t, eng.Calls(), m.calls(), "every call counted under its operation")
	p.Containers[0].Command = append(p.Containers[0].Command, "--again")
	walk()
	assert.Equal(t, eng.Calls(), m.calls())
	eng.Reset()
	m.Reset()
	require.True(t, walk().Converged())
	assert.Zero(t, eng.Writes())
	assert.Equal(t, eng.Total(), m.total(), "a converged project: %v", m.calls())

	s := logs.String()
	for _, action := range []string{"create", "start", "stop", "remove", "rename"} {
		assert.Contains(t, s, "action="+action+" service=app container="+proj+"-app", "the %s is logged", action)
	}
	for _, secret := range []string{"obs-cmd-pw", "obs-secret-value", "obs-url-pw"} {
		assert.NotContains(t, s, secret)
	}
}
