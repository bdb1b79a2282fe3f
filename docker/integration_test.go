package docker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

const integrationCompose = `
name: {{P}}
services:
  db:
    image: {{IMG}}
    command: ["/app", "sleep"]
    environment:
      DB_PASSWORD: integration-secret-value
      MODE: primary
    volumes: [data:/data]
    networks: [back]
    stop_grace_period: 2s
    labels:
      ` + dockertest.TestLabel + `: "1"
    healthcheck:
      test: ["CMD", "/app", "ok"]
      interval: 1s
      timeout: 2s
      retries: 3
  migrate:
    image: {{IMG}}
    command: ["/app", "ok"]
    networks: [back]
    labels:
      ` + dockertest.TestLabel + `: "1"
    depends_on:
      db: {condition: service_started}
  web:
    image: {{IMG}}
    command: ["/app", "serve"]
    environment:
      GREETING: hello
    networks:
      back: {aliases: [www]}
    stop_grace_period: 2s
    labels:
      ` + dockertest.TestLabel + `: "1"
    healthcheck:
      test: ["CMD", "/app", "health"]
      interval: 1s
      timeout: 2s
      retries: 5
    depends_on:
      db: {condition: service_healthy, x-timeout: 60s}
      migrate: {condition: service_completed_successfully, x-timeout: 60s}
networks:
  back:
    labels:
      ` + dockertest.TestLabel + `: "1"
volumes:
  data:
    labels:
      ` + dockertest.TestLabel + `: "1"
`

func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// cleanupProject removes whatever carries the project label, whatever
// happened in the test.
func cleanupProject(t *testing.T, cli *client.Client, project string) {
	t.Cleanup(func() { removeProject(cli, project) })
}

// removeProject removes the containers, networks and volumes that carry
// the project label. An image a test made must be removed after it (see
// removeImageAfter): the engine keeps an image a container still uses.
func removeProject(cli *client.Client, project string) {
	ctx := context.Background()
	f := filters.NewArgs(filters.Arg("label", docker.LabelProject+"="+project))
	cs, _ := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	for _, c := range cs {
		_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
	ns, _ := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	for _, n := range ns {
		_ = cli.NetworkRemove(ctx, n.ID)
	}
	vs, _ := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	for _, v := range vs.Volumes {
		_ = cli.VolumeRemove(ctx, v.Name, true)
	}
}

// removeImageAfter removes the image (a tag or an ID) when the test ends,
// after the project's containers, which may use it, are removed; a test
// fails when the image cannot be removed, so no test leaves one behind.
func removeImageAfter(t *testing.T, cli *client.Client, project, ref string) {
	t.Cleanup(func() {
		removeProject(cli, project)
		_, err := cli.ImageRemove(context.Background(), ref, image.RemoveOptions{PruneChildren: true})
		if err != nil && !client.IsErrNotFound(err) {
			t.Errorf("test image %s left behind: %v", ref, err)
		}
	})
}

func composeFor(project, img string) string {
	return strings.NewReplacer("{{P}}", project, "{{IMG}}", img).Replace(integrationCompose)
}

func inspect(t *testing.T, cli *client.Client, name string) container.InspectResponse {
	t.Helper()
	r, err := cli.ContainerInspect(context.Background(), name)
	require.NoError(t, err)
	return r
}

func TestIntegrationProject(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	proj := uniqueName("cvt")
	cleanupProject(t, cli, proj)
	eng := dockertest.Count(cli)

	var (
		mu  sync.Mutex
		log strings.Builder
	)
	w, err := converge.NewWalker(converge.WalkerConfig{Observer: converge.ObserverFunc(func(e converge.Event) {
		mu.Lock()
		fmt.Fprintf(&log, "%+v\n", e)
		mu.Unlock()
	})})
	require.NoError(t, err)
	walk := func(p *docker.Project, dry bool) *converge.Report {
		t.Helper()
		g, err := p.Graph(eng)
		require.NoError(t, err)
		run := w.Apply
		if dry {
			run = w.ApplyDry
		}
		rep, err := run(ctx, g)
		require.NoError(t, err)
		mu.Lock()
		for _, it := range rep.Items {
			fmt.Fprintf(&log, "%+v\n", it)
		}
		mu.Unlock()
		return rep
	}
	p, err := docker.LoadCompose(ctx, []byte(composeFor(proj, img)), docker.LoadOptions{})
	require.NoError(t, err)
	db, web, migrate := proj+"-db", proj+"-web", proj+"-migrate"

	// Dry run from empty: every container planned for creation, no write.
	rep := walk(p, true)
	assert.Zero(t, eng.Writes(), "dry run wrote: %v", eng.Calls())
	var plans []string
	for _, pl := range docker.Plans(rep) {
		plans = append(plans, pl.String())
	}
	assert.Equal(t, []string{db + ": create", migrate + ": create", web + ": create"}, plans)

	// Up from empty.
	walk(p, false)
	assert.True(t, inspect(t, cli, db).State.Running)
	assert.Equal(t, container.Healthy, inspect(t, cli, db).State.Health.Status, "web waited for db healthy")
	m := inspect(t, cli, migrate)
	assert.Equal(t, container.ContainerState("exited"), m.State.Status)
	assert.Equal(t, 0, m.State.ExitCode)
	webBefore := inspect(t, cli, web)
	assert.True(t, webBefore.State.Running)
	assert.Contains(t, webBefore.NetworkSettings.Networks, proj+"_back")
	assert.Contains(t, webBefore.NetworkSettings.Networks[proj+"_back"].Aliases, "www")
	dbBefore := inspect(t, cli, db)

	// Second apply: no change, only reads, a constant number of them.
	eng.Reset()
	rep = walk(p, false)
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.Zero(t, eng.Writes(), "calls: %v", eng.Calls())
	assert.LessOrEqual(t, eng.Total(), 3, "calls: %v", eng.Calls())

	// Change an env value: only that container is recreated.
	p2, err := docker.LoadCompose(ctx, []byte(strings.Replace(composeFor(proj, img), "GREETING: hello", "GREETING: bonjour", 1)), docker.LoadOptions{})
	require.NoError(t, err)
	eng.Reset()
	plans2 := docker.Plans(walk(p2, true))
	assert.Zero(t, eng.Writes())
	assert.Contains(t, plans2, docker.Plan{Container: web, Action: docker.ActionRecreate, Fields: []string{"env.GREETING"}})
	rep = walk(p2, false)
	assert.Equal(t, []converge.ID{docker.ContainerID(proj, "web")}, rep.IDs(converge.OutcomeChanged))
	webAfter := inspect(t, cli, web)
	assert.NotEqual(t, webBefore.ID, webAfter.ID)
	assert.Contains(t, webAfter.Config.Env, "GREETING=bonjour")
	assert.Equal(t, dbBefore.ID, inspect(t, cli, db).ID)
	assert.Equal(t, m.ID, inspect(t, cli, migrate).ID)

	// docker kill: the reconcile loop, fed by engine events, brings it back.
	t.Run("kill", func(t *testing.T) {
		_, passes, stop := runLoop(t, eng, *p2)
		defer stop()
		require.NoError(t, waitPass(passes, 90*time.Second))
		require.NoError(t, cli.ContainerKill(ctx, web, "KILL"))
		require.Eventually(t, func() bool {
			r, err := cli.ContainerInspect(ctx, web)
			return err == nil && r.State.Running && r.State.StartedAt != webAfter.State.StartedAt
		}, 60*time.Second, 100*time.Millisecond, "killed container brought back")
	})

	// Remove a service from the file: its container goes.
	noMigrate := strings.Replace(composeFor(proj, img), `      migrate: {condition: service_completed_successfully, x-timeout: 60s}
`, "", 1)
	noMigrate = noMigrate[:strings.Index(noMigrate, "  migrate:")] + noMigrate[strings.Index(noMigrate, "  web:"):]
	p3, err := docker.LoadCompose(ctx, []byte(noMigrate), docker.LoadOptions{})
	require.NoError(t, err)
	walk(p3, false)
	_, err = cli.ContainerInspect(ctx, migrate)
	assert.True(t, client.IsErrNotFound(err), "migrate removed: %v", err)

	// Clean removes everything we own and nothing we do not own.
	foreign := proj + "-foreign"
	_, err = cli.ContainerCreate(ctx, &container.Config{Image: img, Labels: map[string]string{dockertest.TestLabel: "1"}}, nil, nil, nil, foreign)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), foreign, container.RemoveOptions{Force: true}) })
	_, err = cli.VolumeCreate(ctx, volume.CreateOptions{Name: foreign, Labels: map[string]string{dockertest.TestLabel: "1"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.VolumeRemove(context.Background(), foreign, true) })
	p3.RemoveVolumes = true
	g, err := p3.Graph(eng)
	require.NoError(t, err)
	_, err = converge.Clean(ctx, g)
	require.NoError(t, err)
	for _, n := range []string{db, web} {
		_, err := cli.ContainerInspect(ctx, n)
		assert.True(t, client.IsErrNotFound(err), "%s removed", n)
	}
	_, err = cli.NetworkInspect(ctx, proj+"_back", network.InspectOptions{})
	assert.True(t, client.IsErrNotFound(err), "network removed")
	_, err = cli.VolumeInspect(ctx, proj+"_data")
	assert.True(t, client.IsErrNotFound(err), "volume removed")
	_, err = cli.ContainerInspect(ctx, foreign)
	assert.NoError(t, err, "a container we do not own stays")
	_, err = cli.VolumeInspect(ctx, foreign)
	assert.NoError(t, err, "a volume we do not own stays")
	assert.Contains(t, eng.Calls(), dockertest.ContainerStop)

	mu.Lock()
	assert.NotContains(t, log.String(), "integration-secret-value", "the secret never reaches events or reports")
	mu.Unlock()
}

// waitPass waits for the next pass outcome of a reconcile loop.
func waitPass(passes <-chan error, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case err := <-passes:
			if err == nil {
				return nil
			}
		case <-t.C:
			return fmt.Errorf("no successful pass within %s", d)
		}
	}
}
