package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// The agent and convergectl, built once for the tests that run them.
var (
	buildOnce          sync.Once
	agentBin, ctlBin   string
	buildErr           error
	binDir             string
	engine             *client.Client
	engineErr, userErr error
	demoImage          string
)

// TestMain runs every test beside a user's project named like the
// example's built-in one ("deviceagent"), started the way a user of the
// example has it (or the user's own, when one runs): after the tests it
// must be exactly as it was (dockertest.Bystander: same containers and
// start times, network, volume and the data in it). A project started for
// that is removed afterwards; a user's own is left alone.
func TestMain(m *testing.M) {
	ctx := context.Background()
	engine, engineErr = dockertest.Connect(ctx)
	var by *dockertest.Bystander
	if engineErr == nil {
		demoImage, _, engineErr = dockertest.BuildAppImage(ctx, engine)
	}
	if engineErr == nil {
		by, userErr = dockertest.StartBystander(ctx, engine, "deviceagent", demoImage)
	}
	code := m.Run()
	if by != nil {
		if err := by.Check(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: the tests touched the user's project:", err)
			code = 1
		} else {
			fmt.Printf("the user's project %q beside the tests is untouched (created by the tests: %v)\n", by.Name(), by.Created())
		}
		if err := by.Remove(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: removing the project started beside the tests:", err)
			code = 1
		}
	}
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	if engine != nil {
		_ = engine.Close()
	}
	os.Exit(code)
}

// projectSnapshot is what a project has on the engine.
type projectSnapshot struct {
	containers []string // ID, name and state
	volumes    []string
}

func snapshot(ctx context.Context, project string) (*projectSnapshot, error) {
	f := filters.NewArgs(filters.Arg("label", docker.LabelProject+"="+project))
	cs, err := engine.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	vs, err := engine.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return nil, err
	}
	s := &projectSnapshot{}
	for _, c := range cs {
		s.containers = append(s.containers, fmt.Sprintf("%s %v %s", c.ID, c.Names, c.State))
	}
	for _, v := range vs.Volumes {
		s.volumes = append(s.volumes, v.Name+" "+v.CreatedAt)
	}
	slices.Sort(s.containers)
	slices.Sort(s.volumes)
	return s, nil
}

// requireEngine skips t without a Docker engine, or fails it when one is
// required (CONVERGE_REQUIRE_DOCKER=1).
func requireEngine(t *testing.T) {
	t.Helper()
	if engineErr != nil {
		if os.Getenv("CONVERGE_REQUIRE_DOCKER") == "1" {
			t.Fatalf("Docker engine required (CONVERGE_REQUIRE_DOCKER=1): %v", engineErr)
		}
		t.Skipf("no Docker engine, skipping: %v", engineErr)
	}
	require.NoError(t, userErr, "the user's project beside the tests")
}

// binaries builds the agent and convergectl once.
func binaries() (agent, ctl string, err error) {
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "deviceagent-bin-"); buildErr != nil {
			return
		}
		agentBin, ctlBin = filepath.Join(binDir, "deviceagent"), filepath.Join(binDir, "convergectl")
		for pkg, out := range map[string]string{".": agentBin, "../../convergectl": ctlBin} {
			if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %w: %s", pkg, err, b)
				return
			}
		}
	})
	return agentBin, ctlBin, buildErr
}

// agent is a running deviceagent whose output lines are kept.
type agent struct {
	cmd   *exec.Cmd
	lines chan string
	mu    sync.Mutex
	out   strings.Builder // every line, stdout and stderr
}

func start(bin string, args ...string) (*agent, error) {
	a := &agent{cmd: exec.Command(bin, args...), lines: make(chan string, 4096)}
	stdout, err := a.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := a.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	for _, r := range []io.Reader{stdout, stderr} {
		wg.Go(func() {
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				a.mu.Lock()
				a.out.WriteString(sc.Text() + "\n")
				a.mu.Unlock()
				a.lines <- sc.Text()
			}
		})
	}
	go func() { wg.Wait(); close(a.lines) }()
	return a, nil
}

// wait returns the first line from now on that matches re.
func (a *agent) wait(re string, limit time.Duration) (string, error) {
	rx := regexp.MustCompile(re)
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-a.lines:
			if !ok {
				return "", fmt.Errorf("the agent exited before a line matching %s:\n%s", re, a.output())
			}
			if rx.MatchString(l) {
				return l, nil
			}
		case <-timer.C:
			return "", fmt.Errorf("no line matching %s in %s:\n%s", re, limit, a.output())
		}
	}
}

func (a *agent) output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out.String()
}

// stop sends SIGTERM, as a service manager does, and waits: the agent
// must exit 0.
func (a *agent) stop() error {
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	go func() {
		for range a.lines {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("the agent exited with %w:\n%s", err, a.output())
		}
		return nil
	case <-time.After(time.Minute):
		_ = a.cmd.Process.Kill()
		return fmt.Errorf("the agent did not stop within a minute of SIGTERM")
	}
}

// testProject writes a Compose file of a project named uniquely for this
// run, with a secret in its environment, and removes what the project
// leaves on the engine when t ends.
func testProject(t *testing.T, dir, secret string) (file, name string) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name = "deviceagent-test-" + hex.EncodeToString(b)
	file = filepath.Join(dir, "compose.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`name: %s
services:
  db:
    image: %s
    command: ["/app", "sleep"]
    environment:
      DB_PASSWORD: %s
    volumes: [data:/data]
  web:
    image: %s
    command: ["/app", "sleep"]
    depends_on: [db]
volumes:
  data: {}
`, name, demoImage, secret, demoImage)), 0o600))
	t.Cleanup(func() { assert.NoError(t, dockertest.RemoveProject(context.Background(), engine, name)) })
	return file, name
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	var code int
	var body []byte
	require.Eventually(t, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		code = resp.StatusCode
		body, err = io.ReadAll(resp.Body)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	return code, string(body)
}

// TestAgentResumesItsSealedTargetAndItsPendingReboot runs the agent as a
// user does: the first run converges a Compose project and a host stage
// whose boot key asks for a reboot; the agent is restarted (SIGTERM, then
// a new process on the same store, no -f): it resumes the stored target,
// verifies it with a pass that changes nothing, recreates no container,
// and still shows the reboot as pending (the device did not boot), on its
// output, its page and its metrics. Nothing of the secret in the project
// is in clear in the store file, the agent's output, or convergectl's,
// unless convergectl is asked with --show-secrets and given the key file.
func TestAgentResumesItsSealedTargetAndItsPendingReboot(t *testing.T) {
	requireEngine(t)
	bin, ctl, err := binaries()
	require.NoError(t, err)
	dir := t.TempDir()
	secret := "pw-" + rand.Text()
	file, name := testProject(t, dir, secret)
	state, key, root := filepath.Join(dir, "agent.db"), filepath.Join(t.TempDir(), "seal.key"), filepath.Join(dir, "root")
	require.NoError(t, os.Mkdir(root, 0o755))
	common := []string{"-state", state, "-key", key, "-root", root}

	first, err := start(bin, append([]string{"-f", file}, common...)...)
	require.NoError(t, err)
	_, err = first.wait(`^pass 1: converged`, 2*time.Minute)
	require.NoError(t, err)
	require.NoError(t, first.stop())
	out := first.output()
	assert.Contains(t, out, "container:"+name+"/db: changed")
	assert.Contains(t, out, "host action required: reboot")
	before, err := snapshot(t.Context(), name)
	require.NoError(t, err)
	require.Len(t, before.containers, 2)

	addr := freeAddr(t)
	second, err := start(bin, append([]string{"-http", addr}, common...)...)
	require.NoError(t, err)
	_, err = second.wait(`^pass 1: verified, no change`, 2*time.Minute)
	require.NoError(t, err, "the resumed target is verified, and nothing changes")
	code, ready := get(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusOK, code, ready)
	_, metrics := get(t, "http://"+addr+"/metrics")
	assert.Regexp(t, `converge_target_pending_actions\{action="reboot",target="target"\} 1\n`, metrics)
	_, page := get(t, "http://"+addr+"/")
	assert.Contains(t, page, "reboot required", "the page's Needs attention")
	assert.NotContains(t, page, secret)
	require.NoError(t, second.stop())
	out2 := second.output()
	assert.Contains(t, out2, "keeping "+name+" converged (revision 1)")
	assert.Contains(t, out2, `host action pending: reboot for "configkey:/boot/config.txt:gpu_mem" (revision 1)`)
	assert.NotContains(t, out2, ": changed", "the second run changes nothing")
	after, err := snapshot(t.Context(), name)
	require.NoError(t, err)
	assert.Equal(t, before, after, "no container was recreated")

	t.Run("no secret in clear", func(t *testing.T) {
		raw, err := os.ReadFile(state)
		require.NoError(t, err)
		assert.False(t, bytes.Contains(raw, []byte(secret)), "the secret is in clear in the store file")
		assert.False(t, bytes.Contains(raw, []byte("DB_PASSWORD")), "the target is not sealed as a whole")
		assert.NotContains(t, out+out2, secret, "the agent's output and log")
		for _, tc := range []struct {
			args []string
			fail bool
		}{
			{args: []string{"kinds"}}, {args: []string{"targets"}}, {args: []string{"target", "target"}},
			{args: []string{"target", "target", "-o", "json"}}, {args: []string{"target", "target", "-o", "yaml"}},
			{args: []string{"target", "target", "--key-file", key}},
			{args: []string{"target", "target", "-o", "yaml", "--key-file", key}},
			{args: []string{"target", "target", "--show-secrets"}, fail: true}, // a sealed store needs its key
		} {
			o, err := exec.Command(ctl, append(tc.args, "--bolt", state)...).CombinedOutput()
			if tc.fail {
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "convergectl %v:\n%s", tc.args, o)
				assert.Equal(t, 1, exit.ExitCode(), "convergectl %v:\n%s", tc.args, o)
			} else {
				require.NoError(t, err, "convergectl %v:\n%s", tc.args, o)
			}
			assert.NotContains(t, string(o), secret, "convergectl %v", tc.args)
		}
		o, err := exec.Command(ctl, "target", "target", "--bolt", state, "--show-secrets", "--key-file", key).CombinedOutput()
		require.NoError(t, err, "%s", o)
		assert.Contains(t, string(o), secret, "asked with --show-secrets and given the key, convergectl shows it")
	})
}

// TestDamagedStateStartsOver: a store file cut in half, as a power cut on
// an SD card may leave it, is moved aside, the agent says so and starts
// over from its default target, which it converges.
func TestDamagedStateStartsOver(t *testing.T) {
	requireEngine(t)
	bin, _, err := binaries()
	require.NoError(t, err)
	dir := t.TempDir()
	file, _ := testProject(t, dir, "x")
	state := filepath.Join(dir, "agent.db")
	args := []string{"-f", file, "-state", state, "-key", filepath.Join(dir, "seal.key"), "-root", dir, "-interval", "1h"}
	a, err := start(bin, args...)
	require.NoError(t, err)
	_, err = a.wait(`^pass 1: converged`, 2*time.Minute)
	require.NoError(t, err)
	require.NoError(t, a.stop())
	b, err := os.ReadFile(state)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(state, b[:len(b)/2], 0o600))

	a, err = start(bin, args...)
	require.NoError(t, err)
	_, err = a.wait(`^pass 1: (converged|verified, no change)`, 2*time.Minute)
	require.NoError(t, err)
	require.NoError(t, a.stop())
	assert.Contains(t, a.output(), "deviceagent: the store was damaged and is kept as "+state+".corrupt-")
	moved, err := filepath.Glob(state + ".corrupt-*")
	require.NoError(t, err)
	require.Len(t, moved, 1)
	kept, err := os.ReadFile(moved[0])
	require.NoError(t, err)
	assert.Equal(t, b[:len(b)/2], kept, "the damaged file is kept as it was")
}

// TestPullHintSaysWhatToDo: an error that wraps a *docker.PullError (as
// a walk's does, through the item and the image) gets a line naming the
// image and the ways out; any other error gets none.
func TestPullHintSaysWhatToDo(t *testing.T) {
	pull := &docker.ImageError{Ref: "alpine:3.20", Services: []string{"web"}, Err: &docker.PullError{Ref: "alpine:3.20", Err: errors.New("dial tcp: lookup registry-1.docker.io: no such host")}}
	hint := pullHint(fmt.Errorf("converge: walk: %w", pull))
	assert.Contains(t, hint, "cannot pull alpine:3.20")
	assert.Contains(t, hint, "docker load")
	assert.Contains(t, hint, "-image")
	assert.Empty(t, pullHint(errors.New("disk full")))
}

// TestWiringFitsInSixtyLines keeps the agent's wiring, run in main.go,
// as short as README says.
func TestWiringFitsInSixtyLines(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	body := regexp.MustCompile(`(?ms)^func run\(.*?^}\n`).Find(src)
	require.NotNil(t, body)
	n := strings.Count(string(body), "\n")
	assert.LessOrEqual(t, n, 61, "run, signature and closing brace included")
	assert.NotContains(t, string(src), "dockertest", "no test helper outside tests")
	t.Logf("run() is %d lines", n)
}
