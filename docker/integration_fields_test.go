package docker_test

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// fieldsEngine returns the real engine, the test image, a project name
// unique to this run (its objects removed when the test ends) and a
// counting engine for the field tests.
func fieldsEngine(t *testing.T, prefix string) (*client.Client, string, string, *dockertest.Counter) {
	t.Helper()
	cli, img := realEngine(t)
	name := uniqueName(prefix)
	cleanupProject(t, cli, name)
	return cli, img, name, dockertest.Count(cli)
}

// loadFast loads a Compose file for a real-engine test, watching started
// containers for a short poll interval.
func loadFast(t *testing.T, yaml string, opts docker.LoadOptions) *docker.Project {
	t.Helper()
	p, err := docker.LoadCompose(context.Background(), []byte(yaml), opts)
	require.NoError(t, err)
	p.PollInterval = 100 * time.Millisecond
	return p
}

// volumeAt returns the engine volume mounted at dest in c, "" when none.
func volumeAt(c container.InspectResponse, dest string) string {
	for _, m := range c.Mounts {
		if m.Destination == dest {
			return m.Name
		}
	}
	return ""
}

// TestIntegrationComposeFields carries out, on the real engine, the
// Compose fields of round two and reads them back with inspect: an image
// built from dockerfile_inline with its extra tags, the variables of
// env_file (environment overriding them), deploy.restart_policy, and anonymous volumes, which a
// recreated container keeps, as compose does; a change to the env file
// recreates the container.
func TestIntegrationComposeFields(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	name := uniqueName("cvf")
	ref, extra := name+"-web", name+"-web:extra"
	removeImageAfter(t, cli, name, extra)
	removeImageAfter(t, cli, name, ref)
	cleanupProject(t, cli, name)
	eng := dockertest.Count(cli)

	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"app.env": "FROM_FILE=1\nOVERRIDDEN=file\n"})
	compose := `name: ` + name + `
services:
  web:
    build:
      dockerfile_inline: |
        FROM ` + img + `
        LABEL inline=yes
      tags: [` + extra + `]
    command: ["/app", "serve"]
    env_file: [app.env, {path: optional.env, required: false}]
    environment: {OVERRIDDEN: compose}
    volumes: [/data]
    deploy: {restart_policy: {condition: on-failure, max_attempts: 2}}
    labels: {` + dockertest.TestLabel + `: "1"}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(compose), 0o644))
	load := func() *docker.Project {
		p, err := docker.LoadComposeFile(ctx, filepath.Join(dir, "compose.yaml"), docker.LoadOptions{})
		require.NoError(t, err)
		p.PollInterval = 100 * time.Millisecond
		return p
	}
	p := load()
	assert.Equal(t, []docker.EnvFileRead{{Service: "web", Path: "app.env"}}, p.EnvFiles)
	apply(t, eng, p)

	built, _, err := cli.ImageInspectWithRaw(ctx, ref)
	require.NoError(t, err)
	assert.Equal(t, "yes", built.Config.Labels["inline"], "built from dockerfile_inline")
	tagged, _, err := cli.ImageInspectWithRaw(ctx, extra)
	require.NoError(t, err)
	assert.Equal(t, built.ID, tagged.ID, "build.tags names the same image")

	c := inspect(t, cli, name+"-web")
	assert.True(t, c.State.Running)
	assert.Equal(t, built.ID, c.Image)
	assert.Contains(t, c.Config.Env, "FROM_FILE=1")
	assert.Contains(t, c.Config.Env, "OVERRIDDEN=compose")
	assert.Equal(t, container.RestartPolicy{Name: "on-failure", MaximumRetryCount: 2}, c.HostConfig.RestartPolicy, "deploy.restart_policy")
	anon := volumeAt(c, "/data")
	require.NotEmpty(t, anon, "an anonymous volume at /data: %+v", c.Mounts)

	// Converged: nothing written.
	eng.Reset()
	apply(t, eng, load())
	assert.Zero(t, eng.Writes(), "calls: %v", eng.Calls())

	// A changed env file recreates the container, which keeps its
	// anonymous volume.
	writeFiles(t, dir, map[string]string{"app.env": "FROM_FILE=2\nOVERRIDDEN=file\n"})
	apply(t, eng, load())
	c2 := inspect(t, cli, name+"-web")
	assert.NotEqual(t, c.ID, c2.ID, "recreated")
	assert.Contains(t, c2.Config.Env, "FROM_FILE=2")
	assert.Equal(t, anon, volumeAt(c2, "/data"), "the successor keeps the anonymous volume")

	// So does a kill-then-download recreate, which removes the old
	// container first.
	p = load()
	p.Containers[0].Update = docker.KillThenDownload
	p.Containers[0].Env["FROM_FILE"] = "3"
	apply(t, eng, p)
	c3 := inspect(t, cli, name+"-web")
	assert.NotEqual(t, c2.ID, c3.ID, "recreated")
	assert.Equal(t, anon, volumeAt(c3, "/data"), "kill-then-download keeps the anonymous volume too")
}

// readFile reads one file of a container through the engine's archive
// API.
func readFile(t *testing.T, cli *client.Client, id, p string) (string, container.PathStat) {
	t.Helper()
	rc, st, err := cli.CopyFromContainer(context.Background(), id, p)
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	_, err = tr.Next()
	require.NoError(t, err)
	b, err := io.ReadAll(tr)
	require.NoError(t, err)
	return string(b), st
}

// TestIntegrationComposeSecretsAndConfigs carries out secrets and configs
// on the real engine as compose does without swarm, and reads them back: a
// file secret bind-mounted read-only under /run/secrets, a secret from an
// environment variable and a config from content copied in with their
// owner and mode; no label carries a content; a changed content recreates
// the container.
func TestIntegrationComposeSecretsAndConfigs(t *testing.T) {
	cli, img, name, eng := fieldsEngine(t, "cvs")

	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"db.txt": "file-secret-value\n"})
	compose := `name: ` + name + `
services:
  web:
    image: ` + img + `
    command: ["/app", "serve"]
    labels: {` + dockertest.TestLabel + `: "1"}
    secrets:
      - db
      - {source: api, target: api-key, uid: "1000", gid: "1001", mode: 0400}
    configs:
      - {source: greeting, target: /etc/greeting.txt}
secrets:
  db: {file: ./db.txt}
  api: {environment: API_TOKEN}
configs:
  greeting: {content: "hello from a config"}
`
	load := func(token string) *docker.Project {
		return loadFast(t, compose, docker.LoadOptions{WorkingDir: dir, Env: map[string]string{"API_TOKEN": token}})
	}
	apply(t, eng, load("env-secret-value-1"))

	c := inspect(t, cli, name+"-web")
	require.True(t, c.State.Running)
	var bind *container.MountPoint
	for i, m := range c.Mounts {
		if m.Destination == "/run/secrets/db" {
			bind = &c.Mounts[i]
		}
	}
	require.NotNil(t, bind, "mounts: %+v", c.Mounts)
	assert.Equal(t, filepath.Join(dir, "db.txt"), bind.Source)
	assert.False(t, bind.RW, "read-only")

	content, st := readFile(t, cli, c.ID, "/run/secrets/api-key")
	assert.Equal(t, "env-secret-value-1", content)
	assert.Equal(t, os.FileMode(0o400), st.Mode.Perm())
	content, st = readFile(t, cli, c.ID, "/etc/greeting.txt")
	assert.Equal(t, "hello from a config", content)
	assert.Equal(t, os.FileMode(0o444), st.Mode.Perm())
	for k, v := range c.Config.Labels {
		for _, secret := range []string{"env-secret-value-1", "file-secret-value", "hello from a config"} {
			assert.NotContains(t, v, secret, "label %s", k)
		}
	}

	// Converged: nothing written. A new secret value recreates the
	// container with it.
	eng.Reset()
	apply(t, eng, load("env-secret-value-1"))
	assert.Zero(t, eng.Writes(), "calls: %v", eng.Calls())
	apply(t, eng, load("env-secret-value-2"))
	c2 := inspect(t, cli, name+"-web")
	assert.NotEqual(t, c.ID, c2.ID)
	content, _ = readFile(t, cli, c2.ID, "/run/secrets/api-key")
	assert.Equal(t, "env-secret-value-2", content)
}

// TestIntegrationComposeHooks runs post_start and pre_stop hooks through
// the real engine's exec API: a hook that succeeds leaves the container
// running (its exec's status read back); a failing post_start is a
// *HookError with the hook's exit status and output, a secret of its
// environment redacted; a failing pre_stop stops a recreate before the
// old container is touched, and the next pass, with a hook that
// succeeds, recreates it.
func TestIntegrationComposeHooks(t *testing.T) {
	ctx := context.Background()
	cli, img, name, eng := fieldsEngine(t, "cvh")
	compose := func(postStart, preStop, greeting string) *docker.Project {
		y := `name: ` + name + `
services:
  web:
    image: ` + img + `
    command: ["/app", "serve"]
    environment: {GREETING: ` + greeting + `}
    labels: {` + dockertest.TestLabel + `: "1"}
    post_start:
      - command: ` + postStart + `
        environment: {API_TOKEN: tok-0123456789}
    pre_stop:
      - command: ` + preStop + `
`
		return loadFast(t, y, docker.LoadOptions{})
	}
	run := func(p *docker.Project) error {
		g, err := p.Graph(eng)
		require.NoError(t, err)
		_, err = converge.Apply(ctx, g)
		return err
	}

	require.NoError(t, run(compose(`["/app", "ok"]`, `["/app", "ok"]`, "one")))
	c := inspect(t, cli, name+"-web")
	assert.True(t, c.State.Running)
	assert.Equal(t, 1, eng.Calls()["ContainerExecCreate"], "post_start ran through exec: %v", eng.Calls())
	assert.Equal(t, 1, eng.Calls()["ContainerExecInspect"], "and its status was read: %v", eng.Calls())

	// pre_stop fails: the recreate stops before the old container is
	// stopped, and says why.
	err := run(compose(`["/app", "ok"]`, `["/app", "fail", "not now"]`, "two"))
	var he *docker.HookError
	require.ErrorAs(t, err, &he)
	require.ErrorIs(t, err, docker.ErrHookFailed)
	assert.Equal(t, "pre_stop[0]", he.Hook)
	assert.Equal(t, 3, he.ExitCode)
	assert.Contains(t, he.Output, "not now")
	same := inspect(t, cli, name+"-web")
	assert.Equal(t, c.ID, same.ID)
	assert.True(t, same.State.Running, "a failing pre_stop leaves the container running")

	// pre_stop succeeds, post_start fails: the new container is there,
	// the error carries the hook's output with the secret redacted.
	err = run(compose(`["/app", "fail", "post start said $$API_TOKEN"]`, `["/app", "ok"]`, "two"))
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "post_start[0]", he.Hook)
	assert.Equal(t, 3, he.ExitCode)
	assert.Contains(t, he.Output, "post start said")
	assert.NotContains(t, err.Error(), "tok-0123456789", "the hook's secret is redacted")
	assert.NotEqual(t, c.ID, inspect(t, cli, name+"-web").ID, "recreated")
}

// TestIntegrationComposeLinksAndRestart: links and external_links reach
// the engine (the endpoints' links, read back with inspect), and a dependency with
// restart: true (which compose-go adds for links) restarts the dependent,
// same container, when a walk recreates the dependency; a walk that
// changes nothing restarts nothing.
func TestIntegrationComposeLinksAndRestart(t *testing.T) {
	cli, img, name, eng := fieldsEngine(t, "cvl")
	load := func(greeting string) *docker.Project {
		return loadFast(t, `name: `+name+`
services:
  db:
    image: `+img+`
    command: ["/app", "serve"]
    environment: {GREETING: `+greeting+`}
    labels: {`+dockertest.TestLabel+`: "1"}
  web:
    image: `+img+`
    command: ["/app", "serve"]
    links: ["db:database"]
    labels: {`+dockertest.TestLabel+`: "1"}
  outside:
    image: `+img+`
    command: ["/app", "serve"]
    external_links: ["`+name+`-db:extdb"]
    depends_on: [db]
    labels: {`+dockertest.TestLabel+`: "1"}
`, docker.LoadOptions{})
	}
	p := load("one")
	require.Equal(t, []docker.Dependency{{Service: "db", Restart: true}}, p.Containers[2].DependsOn, "web")
	apply(t, eng, p)
	web := inspect(t, cli, name+"-web")
	require.True(t, web.State.Running)
	var links []string
	for _, n := range web.NetworkSettings.Networks {
		links = append(links, n.Links...)
	}
	links = append(links, web.HostConfig.Links...)
	assert.Equal(t, []string{name + "-db:database"}, links, "on the project's network")
	var ext []string
	for _, n := range inspect(t, cli, name+"-outside").NetworkSettings.Networks {
		ext = append(ext, n.Links...)
	}
	assert.Equal(t, []string{name + "-db:extdb"}, ext, "external_links")

	apply(t, eng, load("one"))
	assert.Equal(t, web.State.StartedAt, inspect(t, cli, name+"-web").State.StartedAt, "nothing changed, nothing restarted")

	db := inspect(t, cli, name+"-db")
	apply(t, eng, load("two"))
	assert.NotEqual(t, db.ID, inspect(t, cli, name+"-db").ID, "db recreated")
	after := inspect(t, cli, name+"-web")
	assert.Equal(t, web.ID, after.ID, "web is the same container")
	assert.NotEqual(t, web.State.StartedAt, after.State.StartedAt, "web restarted after db")
	assert.True(t, after.State.Running)
}

// TestIntegrationComposeNamespaceReferences: ipc and pid of another
// service (service:NAME) and a network namespace named by container
// (container:NAME), and volumes_from another service, reach the engine,
// read back with inspect; the service:NAME ones order the container
// after NAME and recreate it into the new NAME's namespaces after NAME was
// recreated.
func TestIntegrationComposeNamespaceReferences(t *testing.T) {
	cli, img, name, eng := fieldsEngine(t, "cvn")
	load := func(greeting string) *docker.Project {
		return loadFast(t, `name: `+name+`
services:
  db:
    image: `+img+`
    command: ["/app", "serve"]
    ipc: shareable
    environment: {GREETING: `+greeting+`}
    labels: {`+dockertest.TestLabel+`: "1"}
  side:
    image: `+img+`
    command: ["/app", "sleep"]
    ipc: service:db
    pid: service:db
    labels: {`+dockertest.TestLabel+`: "1"}
  net:
    image: `+img+`
    command: ["/app", "sleep"]
    network_mode: container:`+name+`-db
    depends_on: [db]
    labels: {`+dockertest.TestLabel+`: "1"}
  data:
    image: `+img+`
    command: ["/app", "sleep"]
    volumes: [/data]
    labels: {`+dockertest.TestLabel+`: "1"}
  reader:
    image: `+img+`
    command: ["/app", "sleep"]
    volumes_from: ["data:ro"]
    labels: {`+dockertest.TestLabel+`: "1"}
`, docker.LoadOptions{})
	}
	apply(t, eng, load("one"))
	db := inspect(t, cli, name+"-db")
	side := inspect(t, cli, name+"-side")
	require.True(t, side.State.Running)
	// The engine keeps the ID of the container the name named.
	assert.Equal(t, container.IpcMode("container:"+db.ID), side.HostConfig.IpcMode)
	assert.Equal(t, container.PidMode("container:"+db.ID), side.HostConfig.PidMode)
	netc := inspect(t, cli, name+"-net")
	require.True(t, netc.State.Running)
	assert.Equal(t, container.NetworkMode("container:"+db.ID), netc.HostConfig.NetworkMode)
	reader := inspect(t, cli, name+"-reader")
	assert.Equal(t, []string{name + "-data:ro"}, reader.HostConfig.VolumesFrom)
	shared := volumeAt(inspect(t, cli, name+"-data"), "/data")
	require.NotEmpty(t, shared)
	assert.Equal(t, shared, volumeAt(reader, "/data"), "volumes_from mounts data's volume")

	apply(t, eng, load("two"))
	db2 := inspect(t, cli, name+"-db")
	assert.NotEqual(t, db.ID, db2.ID, "db recreated")
	after := inspect(t, cli, name+"-side")
	assert.Equal(t, container.IpcMode("container:"+db2.ID), after.HostConfig.IpcMode, "in the new db's namespace")
	assert.NotEqual(t, side.ID, after.ID, "recreated: the old namespaces are gone with the old db")
	assert.True(t, after.State.Running)
}

// TestIntegrationComposePreStart: pre_start hooks run as containers of
// their own, once, one after the other and to completion before the
// service starts (read back with inspect); a failing one leaves the
// service not created.
func TestIntegrationComposePreStart(t *testing.T) {
	cli, img, name, eng := fieldsEngine(t, "cvp")
	load := func(second string) *docker.Project {
		return loadFast(t, `name: `+name+`
services:
  web:
    image: `+img+`
    command: ["/app", "serve"]
    labels: {`+dockertest.TestLabel+`: "1"}
    pre_start:
      - command: ["/app", "ok"]
      - command: `+second+`
`, docker.LoadOptions{})
	}
	apply(t, eng, load(`["/app", "exit", "0"]`))
	first, second := inspect(t, cli, name+"-web-pre_start-0"), inspect(t, cli, name+"-web-pre_start-1")
	web := inspect(t, cli, name+"-web")
	require.True(t, web.State.Running)
	assert.Equal(t, 0, first.State.ExitCode)
	assert.Equal(t, 0, second.State.ExitCode)
	assert.Equal(t, []string{"/app", "ok"}, []string(first.Config.Cmd), "the hook's command, on the service's image")
	assert.Equal(t, web.Image, first.Image)
	assert.LessOrEqual(t, first.State.FinishedAt, second.State.StartedAt, "one after the other")
	assert.LessOrEqual(t, second.State.FinishedAt, web.State.StartedAt, "before the service starts")

	// A second pass runs nothing again.
	eng.Reset()
	apply(t, eng, load(`["/app", "exit", "0"]`))
	assert.Zero(t, eng.Writes(), "calls: %v", eng.Calls())

	// A failing hook: the error names it and the service is not
	// recreated.
	g, err := load(`["/app", "exit", "4"]`).Graph(eng)
	require.NoError(t, err)
	_, err = converge.Apply(context.Background(), g)
	var ce *docker.ContainerError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "web-pre_start-1", ce.Service)
	assert.Equal(t, 4, ce.ExitCode)
	assert.Equal(t, web.ID, inspect(t, cli, name+"-web").ID, "the service waits for its hooks")
}
