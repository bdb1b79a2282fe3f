package systemd

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The outer test: it runs the inner tests (inner_internal_test.go) on a
// real systemd as PID 1 in a container of CONVERGE_SYSTEMD_IMAGE, the
// Debian root that .ci/run builds with mmdebstrap, through the docker
// command line (an adapter never imports another, so not the docker
// module).
const (
	// imageEnv names the systemd test image.
	imageEnv = "CONVERGE_SYSTEMD_IMAGE"
	// testLabel marks what the tests create on the engine, as the docker
	// module's tests do (dockertest.TestLabel), so .ci/docker-leftovers
	// finds a container left behind.
	testLabel = "io.convergekit.test"
	// innerBinary is where the test binary goes in the container.
	innerBinary = "/usr/local/bin/converge-systemd.test"
)

// Bounds of the outer test's waits.
const (
	bootTimeout  = 90 * time.Second
	innerTimeout = 10 * time.Minute
	stopTimeout  = 90 * time.Second
)

// TestRealSystemd builds this package's test binary statically, starts
// containers where systemd runs as PID 1, copies the binary in and runs
// the inner tests there as root, their output streamed into this test's
// log: the unit suites in one container, and each power request in a
// container of its own, which the request stops.
func TestRealSystemd(t *testing.T) {
	if onReal() {
		t.Skip("the outer test runs outside the container")
	}
	image := systemdImage(t)
	bin, race := buildInner(t)
	t.Logf("inner test binary: static, -race %t", race)
	inner := listInner(t, bin)
	require.NotEmpty(t, inner, "the binary lists the inner tests")

	t.Run("units", func(t *testing.T) {
		t.Parallel()
		c := startSystemd(t, image, bin)
		out, err := c.runInner(t, nil, "^TestInner")
		require.NoError(t, err, "the inner tests failed (their output is above)")
		for _, name := range inner {
			require.Regexp(t, regexp.MustCompile(`(?m)^--- PASS: `+regexp.QuoteMeta(name)+` \(`), out, "inner test %s ran and passed", name)
		}
	})
	for _, mode := range []string{"reboot", "poweroff-forced"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := startSystemd(t, image, bin)
			out, err := c.runInner(t, []string{powerEnv + "=" + mode}, "^TestPowerInner$")
			require.True(t, strings.Contains(out, powerAccepted) || strings.Contains(out, powerBusClosed),
				"logind accepted the request, or the system went down before it answered (exec: %v):\n%s", err, out)
			require.NotContains(t, out, "--- FAIL")
			code := c.waitStopped(t)
			t.Logf("the container stopped after the %s, exit code %d", mode, code)
		})
	}
}

// requireDocker skips the test, or fails it when CONVERGE_REQUIRE_DOCKER=1,
// as the docker module's integration tests do.
func requireDocker(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CONVERGE_REQUIRE_DOCKER") == "1" {
		t.Fatalf("systemd test container required (CONVERGE_REQUIRE_DOCKER=1): %s", msg)
	}
	t.Skipf("%s; skipping the tests on a real systemd (set CONVERGE_REQUIRE_DOCKER=1 to fail instead)", msg)
}

// systemdImage returns the image of CONVERGE_SYSTEMD_IMAGE once Docker and
// the image are there.
func systemdImage(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("tests on a real systemd in a container skipped in -short mode")
	}
	image := os.Getenv(imageEnv)
	if image == "" {
		requireDocker(t, "%s is not set (.ci/run builds the image and sets it)", imageEnv)
	}
	if _, err := exec.LookPath("docker"); err != nil {
		requireDocker(t, "no docker command: %v", err)
	}
	if out, err := docker(t, 30*time.Second, "info", "--format", "{{.ServerVersion}}"); err != nil {
		requireDocker(t, "no usable Docker engine: %v: %s", err, out)
	}
	if out, err := docker(t, 30*time.Second, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
		requireDocker(t, "image %s (%s) is not on the engine: %v: %s", image, imageEnv, err, out)
	}
	return image
}

// docker runs the docker command line and returns its output, trimmed.
func docker(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// buildInner builds the package's test binary for the container, static
// so that it needs nothing of the image: with -race when cgo can link the
// race runtime statically against glibc (the race detector needs cgo),
// otherwise with CGO_ENABLED=0 and without -race.
func buildInner(t *testing.T) (string, bool) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		requireDocker(t, "no go command to build the inner test binary: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "systemd.test")
	build := func(env string, args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, gobin, append([]string{"test", "-c", "-o", bin}, append(args, ".")...)...)
		cmd.Env = append(os.Environ(), env, "GOOS=linux")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, tail(string(out), 20))
		}
		return nil
	}
	if err := build("CGO_ENABLED=1", "-race", "-ldflags=-linkmode=external -extldflags=-static"); err == nil {
		return bin, true
	} else {
		t.Logf("no static -race build, building without -race: %v", err)
	}
	require.NoError(t, build("CGO_ENABLED=0"), "build the inner test binary")
	return bin, false
}

// listInner returns the inner tests the binary holds.
func listInner(t *testing.T, bin string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-test.list", "^TestInner").Output()
	require.NoError(t, err)
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "TestInner") {
			names = append(names, l)
		}
	}
	return names
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// systemdContainer is a running container of the test image.
type systemdContainer struct{ name string }

// startSystemd starts a container of image with systemd as PID 1, under a
// name of its own and the test label, waits until systemd says the system
// is running (or degraded), and copies bin in. The container is removed
// when the test ends, whatever happened.
//
// The options are the ones that work on a cgroup v1 engine without
// --privileged: the cgroup hierarchy mounted read-only, /run and
// /run/lock as tmpfs, container=docker so that systemd knows where it
// runs.
func startSystemd(t *testing.T, image, bin string) *systemdContainer {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c := &systemdContainer{name: "cvsd" + hex.EncodeToString(b)}
	t.Cleanup(func() {
		if out, err := docker(t, time.Minute, "rm", "-f", "-v", c.name); err != nil && !strings.Contains(out, "No such container") {
			t.Errorf("remove container %s: %v: %s", c.name, err, out)
		}
	})
	out, err := docker(t, time.Minute, "run", "-d", "--name", c.name,
		"--label", testLabel+"=1", "--label", testLabel+".package=systemd",
		"--tmpfs", "/run", "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
		"-e", "container=docker", image, "/lib/systemd/systemd")
	require.NoError(t, err, "docker run: %s", out)

	deadline := time.Now().Add(bootTimeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	state := ""
	for {
		state, _ = docker(t, 30*time.Second, "exec", c.name, "systemctl", "is-system-running")
		if state == "running" || state == "degraded" {
			break
		}
		if running, _ := docker(t, 30*time.Second, "inspect", "-f", "{{.State.Running}}", c.name); running != "true" {
			logs, _ := docker(t, 30*time.Second, "logs", "--tail", "50", c.name)
			t.Fatalf("container %s stopped while systemd booted: %s", c.name, logs)
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd in %s did not finish booting in %s: is-system-running says %q", c.name, bootTimeout, state)
		}
		<-tick.C
	}
	t.Logf("container %s: systemd is %s", c.name, state)
	out, err = docker(t, time.Minute, "cp", bin, c.name+":"+innerBinary)
	require.NoError(t, err, "docker cp: %s", out)
	return c
}

// runInner runs the inner tests matching run in the container, with env
// besides innerEnv, streaming their output into t's log line by line, and
// returns the output and the command's error.
func (c *systemdContainer) runInner(t *testing.T, env []string, run string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), innerTimeout)
	defer cancel()
	args := []string{"exec", "-e", innerEnv + "=1"}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(args, c.name, innerBinary, "-test.v", "-test.count=1", "-test.timeout="+(innerTimeout-time.Minute).String(), "-test.run", run)
	cmd := exec.CommandContext(ctx, "docker", args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var (
		buf strings.Builder
		wg  sync.WaitGroup
	)
	wg.Go(func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			t.Log("inner: " + sc.Text())
			buf.WriteString(sc.Text() + "\n")
		}
		_, _ = io.Copy(io.Discard, pr)
	})
	err := cmd.Run()
	pw.Close()
	wg.Wait()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("the inner tests ran longer than %s", innerTimeout)
	}
	return buf.String(), err
}

// waitStopped waits until the container has stopped and returns its exit
// code; it fails t when the container is still running after stopTimeout.
func (c *systemdContainer) waitStopped(t *testing.T) int {
	t.Helper()
	out, err := docker(t, stopTimeout, "wait", c.name)
	require.NoError(t, err, "the container %s did not stop within %s: %s", c.name, stopTimeout, out)
	running, err := docker(t, 30*time.Second, "inspect", "-f", "{{.State.Running}}", c.name)
	require.NoError(t, err)
	require.Equal(t, "false", running)
	var code int
	_, _ = fmt.Sscan(out, &code)
	return code
}
