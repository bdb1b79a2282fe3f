package docker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// composeV2 is the compose v2 release the side-by-side tests run: the one
// whose labels and configuration hash the package reproduces.
const composeV2 = "v" + docker.ComposeVersion

var (
	composeOnce sync.Once
	composeBin  string
	composeErr  error
)

// composeCLI returns the path of compose v2's CLI (composeV2), built once
// from the Go module proxy and kept in the user's cache directory (beside
// the benchmarks' copy, which it reuses). It skips the test when the CLI
// cannot be built here: no go command, or the module cannot be downloaded
// (no network). Under CONVERGE_REQUIRE_DOCKER=1 a build that fails once
// the module is downloaded fails the test.
func composeCLI(t *testing.T) string {
	t.Helper()
	composeOnce.Do(func() { composeBin, composeErr = buildComposeCLI() })
	var unbuildable *composeUnbuildable
	switch {
	case composeErr == nil:
		return composeBin
	case os.Getenv("CONVERGE_REQUIRE_DOCKER") == "1" && !errors.As(composeErr, &unbuildable):
		t.Fatalf("compose %s required (CONVERGE_REQUIRE_DOCKER=1): %v", composeV2, composeErr)
	}
	t.Skipf("compose %s cannot be built here, skipping: %v", composeV2, composeErr)
	return ""
}

// composeUnbuildable is a build of compose's CLI that cannot even start
// here: no go command, or the module cannot be downloaded.
type composeUnbuildable struct{ err error }

func (e *composeUnbuildable) Error() string { return e.err.Error() }

func buildComposeCLI() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", &composeUnbuildable{err}
	}
	bin := filepath.Join(home, ".cache", "converge-bench", "docker-compose-"+composeV2)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if _, err := exec.LookPath("go"); err != nil {
		return "", &composeUnbuildable{err}
	}
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/docker/compose/v2@"+composeV2).Output()
	if err != nil {
		return "", &composeUnbuildable{fmt.Errorf("download compose: %w", err)}
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", &composeUnbuildable{fmt.Errorf("download compose: %v %s", err, mod.Error)}
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	// A name of this process's own: packages tested at the same time may
	// build it together, and each renames its own copy into place.
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, "./cmd")
	cmd.Dir = mod.Dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build compose: %w\n%s", err, out)
	}
	return bin, os.Rename(tmp, bin)
}

// composeV1 returns the path of Debian's docker-compose 1.29, skipping
// the test when it is not installed (failing under CONVERGE_REQUIRE_DOCKER=1:
// .ci/run installs it).
func composeV1(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("docker-compose")
	if err == nil {
		out, verr := exec.Command(bin, "version", "--short").Output()
		if verr == nil && strings.HasPrefix(strings.TrimSpace(string(out)), "1.") {
			return bin
		}
		err = fmt.Errorf("docker-compose is not 1.x (%q, %v)", strings.TrimSpace(string(out)), verr)
	}
	if os.Getenv("CONVERGE_REQUIRE_DOCKER") == "1" {
		t.Fatalf("docker-compose 1.29 required (CONVERGE_REQUIRE_DOCKER=1): %v", err)
	}
	t.Skipf("docker-compose 1.29 not installed (apt-get install docker-compose), skipping: %v", err)
	return ""
}

// runCompose runs a compose CLI in dir and returns its standard output.
func runCompose(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COMPOSE_PROGRESS=quiet", "COMPOSE_INTERACTIVE_NO_CLI=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s %s:\n%s%s", filepath.Base(bin), strings.Join(args, " "), out, stderr.String())
	return string(out)
}

// sideBySideCompose is a project of two services, a network and a volume,
// written the way people write them.
const sideBySideCompose = `services:
  db:
    image: {{IMG}}
    command: ["/app", "sleep"]
    volumes: ["data:/data"]
    labels:
      ` + dockertest.TestLabel + `: "1"
  web:
    image: {{IMG}}
    command: ["/app", "serve"]
    environment:
      GREETING: hello
    depends_on: [db]
    labels:
      ` + dockertest.TestLabel + `: "1"
networks:
  default:
    labels:
      ` + dockertest.TestLabel + `: "1"
volumes:
  data:
    labels:
      ` + dockertest.TestLabel + `: "1"
`

// writeSideBySide writes the Compose file of project in a directory of its
// own and returns the directory.
func writeSideBySide(t *testing.T, img string) string {
	t.Helper()
	dir := t.TempDir()
	content := strings.ReplaceAll(sideBySideCompose, "{{IMG}}", img)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(content), 0o644))
	return dir
}

// sideBySide returns the engine, a project name of its own (prefix and a
// random suffix), removed when the test ends, and the directory of its
// Compose file (sideBySideCompose).
func sideBySide(t *testing.T, prefix string) (*client.Client, string, string) {
	t.Helper()
	cli, img := realEngine(t)
	project := uniqueName(prefix)
	cleanupBoth(t, cli, project)
	return cli, project, writeSideBySide(t, img)
}

// cleanupBoth removes, when the test ends, whatever carries the project's
// label or compose's.
func cleanupBoth(t *testing.T, cli *client.Client, project string) {
	t.Cleanup(func() {
		assert.NoError(t, dockertest.RemoveProject(context.Background(), cli, project))
	})
}

// networkGone asserts that no network is named name.
func networkGone(t *testing.T, cli *client.Client, name, msg string) {
	t.Helper()
	ns, err := cli.NetworkList(t.Context(), network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", name))})
	require.NoError(t, err)
	assert.False(t, slices.ContainsFunc(ns, func(n network.Summary) bool { return n.Name == name }), msg)
}

// convergeUp loads the Compose file in dir as project and applies it,
// returning the report.
func convergeUp(t *testing.T, cli *client.Client, dir, project string) *converge.Report {
	t.Helper()
	p, err := docker.LoadComposeFile(t.Context(), filepath.Join(dir, "compose.yaml"), docker.LoadOptions{ProjectName: project})
	require.NoError(t, err)
	g, err := p.Graph(cli)
	require.NoError(t, err)
	w, err := converge.NewWalker(converge.WalkerConfig{})
	require.NoError(t, err)
	rep, err := w.Apply(t.Context(), g)
	require.NoError(t, err)
	require.True(t, rep.Converged(), "%+v", rep)
	return rep
}

// containersOf returns the IDs of the project's containers by service,
// found through compose's labels.
func containersOf(t *testing.T, cli *client.Client, project string) map[string]string {
	t.Helper()
	cs, err := cli.ContainerList(t.Context(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", docker.LabelComposeProject+"="+project))})
	require.NoError(t, err)
	out := map[string]string{}
	for _, c := range cs {
		out[c.Labels[docker.LabelComposeService]] = c.ID
	}
	return out
}

// psServices parses "ps --format json" of compose v2 (one object per line,
// or one array) into the state of each service.
func psServices(t *testing.T, out string) map[string]string {
	t.Helper()
	type entry struct{ Service, State string }
	var all []entry
	out = strings.TrimSpace(out)
	if strings.HasPrefix(out, "[") {
		require.NoError(t, json.Unmarshal([]byte(out), &all))
	} else {
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var e entry
			require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "%s", sc.Text())
			all = append(all, e)
		}
	}
	states := map[string]string{}
	for _, e := range all {
		states[e.Service] = e.State
	}
	return states
}

// TestIntegrationComposeCLISeesConvergeProject: compose v2's CLI sees a
// project converge runs as its own: "ps" lists its services running,
// "logs" reads them, "up" on the same file recreates nothing (compose's
// configuration hash and image label are the ones compose writes), and
// "down" removes its containers and network.
func TestIntegrationComposeCLISeesConvergeProject(t *testing.T) {
	cli, project, dir := sideBySide(t, "cvcli")
	bin := composeCLI(t)

	convergeUp(t, cli, dir, project)
	before := containersOf(t, cli, project)
	require.Len(t, before, 2)
	abs, err := filepath.Abs(dir)
	require.NoError(t, err)
	labels := inspect(t, cli, before["web"]).Config.Labels
	assert.Equal(t, filepath.Join(abs, "compose.yaml"), labels[docker.LabelComposeConfigFiles])
	assert.Equal(t, abs, labels[docker.LabelComposeWorkingDir])

	ps := psServices(t, runCompose(t, bin, dir, "-p", project, "ps", "--format", "json"))
	assert.Equal(t, map[string]string{"db": "running", "web": "running"}, ps, "compose ps")
	runCompose(t, bin, dir, "-p", project, "logs", "web")

	runCompose(t, bin, dir, "-p", project, "up", "-d")
	assert.Equal(t, before, containersOf(t, cli, project), "compose up recreated nothing")

	runCompose(t, bin, dir, "-p", project, "down")
	assert.Empty(t, containersOf(t, cli, project), "compose down removed the containers")
	networkGone(t, cli, project+"_default", "compose down removed the network")
}

// TestIntegrationConvergeAdoptsComposeProject: a project "docker compose
// up" started is adopted by converge without recreating anything (the
// containers keep their IDs; compose's names are taken over), a second
// walk changes nothing, and compose still sees the project.
func TestIntegrationConvergeAdoptsComposeProject(t *testing.T) {
	cli, project, dir := sideBySide(t, "cvadopt")
	bin := composeCLI(t)

	runCompose(t, bin, dir, "-p", project, "up", "-d")
	before := containersOf(t, cli, project)
	require.Len(t, before, 2)

	rep := convergeUp(t, cli, dir, project)
	for _, pl := range docker.Plans(rep) {
		assert.Contains(t, []docker.Action{docker.ActionNone, docker.ActionRename}, pl.Action, "%s", pl)
	}
	assert.Equal(t, before, containersOf(t, cli, project), "converge recreated nothing")
	for svc, id := range before {
		r := inspect(t, cli, id)
		assert.Equal(t, "/"+project+"-"+svc, strings.TrimSuffix(r.Name, "-1"), "%s keeps or takes the package's name", svc)
		assert.True(t, r.State.Running, svc)
	}

	again := convergeUp(t, cli, dir, project)
	for _, pl := range docker.Plans(again) {
		assert.Equal(t, docker.ActionNone, pl.Action, "%s", pl)
	}
	ps := psServices(t, runCompose(t, bin, dir, "-p", project, "ps", "--format", "json"))
	assert.Equal(t, map[string]string{"db": "running", "web": "running"}, ps)

	// The network compose created is the project's: cleaning removes it
	// with the containers, and keeps the volume, as "down" does.
	p, err := docker.LoadComposeFile(t.Context(), filepath.Join(dir, "compose.yaml"), docker.LoadOptions{ProjectName: project})
	require.NoError(t, err)
	g, err := p.Graph(cli)
	require.NoError(t, err)
	_, err = converge.Clean(t.Context(), g)
	require.NoError(t, err)
	assert.Empty(t, containersOf(t, cli, project))
	networkGone(t, cli, project+"_default", "the network compose created is removed")
	_, err = cli.VolumeInspect(t.Context(), project+"_data")
	assert.NoError(t, err, "the volume is kept")
}

// TestIntegrationComposeV1SideBySide: Debian's docker-compose 1.29 lists,
// reads and removes a project converge runs, and its up recreates the
// containers (the documented limit); a project it started is taken
// over by converge, which replaces its containers (1.29's configuration
// hash is not compose v2's, see ContainerSpec.ComposeHash) and leaves none
// of them behind.
func TestIntegrationComposeV1SideBySide(t *testing.T) {
	cli, project, dir := sideBySide(t, "cvone")
	bin := composeV1(t)

	convergeUp(t, cli, dir, project)
	ours := containersOf(t, cli, project)
	out := runCompose(t, bin, dir, "-p", project, "ps", "--services", "--filter", "status=running")
	assert.ElementsMatch(t, []string{"db", "web"}, strings.Fields(out), "docker-compose ps")
	runCompose(t, bin, dir, "-p", project, "logs", "web")
	// The documented limit: 1.29 hashes a service otherwise, so its up
	// recreates what converge started.
	runCompose(t, bin, dir, "-p", project, "up", "-d")
	for svc, id := range containersOf(t, cli, project) {
		assert.NotEqual(t, ours[svc], id, "docker-compose 1.29 recreates %s", svc)
	}
	runCompose(t, bin, dir, "-p", project, "down")
	assert.Empty(t, containersOf(t, cli, project), "docker-compose down removed the containers")

	runCompose(t, bin, dir, "-p", project, "up", "-d")
	started := containersOf(t, cli, project)
	require.Len(t, started, 2)
	convergeUp(t, cli, dir, project)
	now := containersOf(t, cli, project)
	require.Len(t, now, 2, "one container per service, 1.29's replaced")
	for svc, id := range started {
		assert.NotEqual(t, id, now[svc], "%s replaced", svc)
	}
	names := []string{}
	for _, id := range now {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(inspect(t, cli, id).Name, "/"), "-1"))
	}
	slices.Sort(names)
	assert.Equal(t, []string{project + "-db", project + "-web"}, names)
}

// scaledCompose is a project whose web service runs three replicas.
const scaledCompose = `services:
  web:
    image: {{IMG}}
    command: ["/app", "sleep"]
    scale: 3
    labels:
      ` + dockertest.TestLabel + `: "1"
  worker:
    image: {{IMG}}
    command: ["/app", "sleep"]
    depends_on: [web]
    labels:
      ` + dockertest.TestLabel + `: "1"
networks:
  default:
    labels:
      ` + dockertest.TestLabel + `: "1"
`

// psNames parses "ps --format json" of compose v2 into the state of each
// container, by name.
func psNames(t *testing.T, out string) map[string]string {
	t.Helper()
	type entry struct{ Name, State string }
	var all []entry
	out = strings.TrimSpace(out)
	if strings.HasPrefix(out, "[") {
		require.NoError(t, json.Unmarshal([]byte(out), &all))
	} else {
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var e entry
			require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "%s", sc.Text())
			all = append(all, e)
		}
	}
	states := map[string]string{}
	for _, e := range all {
		states[e.Name] = e.State
	}
	return states
}

// containerIDsOf returns the IDs of the project's containers by name,
// found through compose's labels.
func containerIDsOf(t *testing.T, cli *client.Client, project string) map[string]string {
	t.Helper()
	cs, err := cli.ContainerList(t.Context(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", docker.LabelComposeProject+"="+project))})
	require.NoError(t, err)
	out := map[string]string{}
	for _, c := range cs {
		out[strings.TrimPrefix(c.Names[0], "/")] = c.ID
	}
	return out
}

// TestIntegrationComposeCLISeesScaledProject: the replicas of a scaled
// service converge runs are compose's own: "ps" lists all three under
// compose's names, "up" recreates none of them, "down" removes them; and
// the other way, the replicas "up" started are adopted by converge as
// they are, under the same names.
func TestIntegrationComposeCLISeesScaledProject(t *testing.T) {
	cli, img := realEngine(t)
	bin := composeCLI(t)
	project := uniqueName("cvscale")
	cleanupBoth(t, cli, project)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(strings.ReplaceAll(scaledCompose, "{{IMG}}", img)), 0o644))
	want := map[string]string{project + "-web-1": "running", project + "-web-2": "running", project + "-web-3": "running",
		project + "-worker": "running"}

	convergeUp(t, cli, dir, project)
	before := containerIDsOf(t, cli, project)
	assert.Equal(t, want, psNames(t, runCompose(t, bin, dir, "-p", project, "ps", "--format", "json")), "compose ps")
	runCompose(t, bin, dir, "-p", project, "up", "-d")
	after := containerIDsOf(t, cli, project)
	for n := 1; n <= 3; n++ {
		name := fmt.Sprintf("%s-web-%d", project, n)
		assert.Equal(t, before[name], after[name], "compose up recreated %s", name)
	}
	runCompose(t, bin, dir, "-p", project, "down")
	assert.Empty(t, containerIDsOf(t, cli, project), "compose down removed the replicas")

	// The other way: compose starts the replicas, converge adopts them.
	runCompose(t, bin, dir, "-p", project, "up", "-d")
	before = containerIDsOf(t, cli, project)
	for n := 1; n <= 3; n++ {
		require.Contains(t, before, fmt.Sprintf("%s-web-%d", project, n))
	}
	rep := convergeUp(t, cli, dir, project)
	for _, pl := range docker.Plans(rep) {
		if strings.Contains(pl.Container, "-web-") {
			assert.Equal(t, docker.ActionNone, pl.Action, "%s", pl)
		}
	}
	after = containerIDsOf(t, cli, project)
	for n := 1; n <= 3; n++ {
		name := fmt.Sprintf("%s-web-%d", project, n)
		assert.Equal(t, before[name], after[name], "converge recreated %s", name)
	}
}
