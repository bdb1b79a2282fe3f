package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

func TestLabelKeyIsCreatedOnceAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "agent.db.label-key")
	first, err := labelKey(path)
	require.NoError(t, err)
	assert.Len(t, first, 32)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the key is readable by its owner only")

	again, err := labelKey(path)
	require.NoError(t, err)
	assert.Equal(t, first, again, "a restarted agent keys its labels the same way")
}

func TestLabelKeyRacingAgentsAgree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db.label-key")
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := labelKey(path)
			assert.NoError(t, err)
			keys[i] = k
		})
	}
	wg.Wait()
	for _, k := range keys[1:] {
		assert.Equal(t, keys[0], k)
	}
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), ".label-key-*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary file is left behind")
}

func TestLabelKeyRefusesABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db.label-key")
	require.NoError(t, os.WriteFile(path, []byte("not hex\n"), 0o600))
	_, err := labelKey(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path, "the error names the file")
}

// engine returns a client of the local engine, or skips the test when
// there is none (fails instead when CONVERGE_REQUIRE_DOCKER=1).
func engine(t *testing.T) *client.Client {
	t.Helper()
	cli, err := dockertest.Connect(context.Background())
	if err != nil {
		if os.Getenv("CONVERGE_REQUIRE_DOCKER") == "1" {
			t.Fatalf("Docker engine required (CONVERGE_REQUIRE_DOCKER=1): %v", err)
		}
		t.Skipf("no Docker engine, skipping: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// uniqueProject writes the built-in project on img as a Compose file under
// a name of its own, so a test never touches a project a user runs on the
// same engine under the example's name, and returns the file and the name.
func uniqueProject(t *testing.T, img string) (file, name string) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name = "cvda" + hex.EncodeToString(b)
	yaml := strings.ReplaceAll(strings.Replace(builtin, "name: deviceagent\n", "name: "+name+"\n", 1), "IMAGE", img)
	require.Contains(t, yaml, "name: "+name)
	file = filepath.Join(t.TempDir(), "compose.yaml")
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o600))
	return file, name
}

// besideUsersProject starts a project named like the example's
// ("deviceagent"), as a user running the example has it (or finds the
// user's own), and checks when the test ends, after its other cleanups,
// that the test left it alone: same containers, same start times, same
// network and volume, same data in the volume.
func besideUsersProject(t *testing.T, cli *client.Client, img string) {
	t.Helper()
	ctx := context.Background()
	by, err := dockertest.StartBystander(ctx, cli, "deviceagent", img)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, by.Check(ctx), "the user's project named like the example is left alone")
		assert.NoError(t, by.Remove(ctx))
	})
}

// TestOnceTwiceRecreatesNothing runs the built agent as a user does: -once
// twice on the built-in project, then -down and -down -volumes. The second
// run finds everything converged — the label key kept beside the state
// makes both runs compute the same keyed hashes — and only -volumes
// removes the project's volume. The project has a name of its own, and a
// user's project named like the example runs beside it, untouched.
func TestOnceTwiceRecreatesNothing(t *testing.T) {
	ctx := context.Background()
	cli := engine(t)
	img, built, err := dockertest.BuildAppImage(ctx, cli)
	require.NoError(t, err)
	if built { // removed last, after the projects that use it
		t.Cleanup(func() { _, _ = cli.ImageRemove(context.Background(), img, image.RemoveOptions{}) })
	}
	besideUsersProject(t, cli, img)
	file, name := uniqueProject(t, img)
	dir := t.TempDir()
	bin := filepath.Join(dir, "deviceagent")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	state := filepath.Join(dir, "agent.db")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"-f", file, "-state", state}, args...)...)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		require.NoError(t, cmd.Run(), "deviceagent %v:\n%s", args, buf.String())
		return buf.String()
	}
	t.Cleanup(func() { run("-down", "-volumes") })

	first := run("-once")
	assert.Contains(t, first, "container:"+name+"/web: changed", "the first run creates the containers:\n%s", first)
	second := run("-once")
	assert.NotContains(t, second, ": changed", "the second run changes nothing:\n%s", second)

	run("-down")
	_, err = cli.VolumeInspect(ctx, name+"_data")
	assert.NoError(t, err, "-down keeps the volume and its data")
	down := run("-down", "-volumes")
	assert.Contains(t, down, "volume:"+name+"_data: changed", "-down -volumes removes the volume:\n%s", down)
	_, err = cli.VolumeInspect(ctx, name+"_data")
	assert.True(t, errdefs.IsNotFound(err), "the volume is gone: %v", err)
}

// TestDamagedStateStartsOver: a damaged state file (cut in half, as a
// power cut on an SD card may leave it) is moved aside, the agent says so
// and gets an empty store; a good file is opened as it is.
func TestDamagedStateStartsOver(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agent.db")
	var log bytes.Buffer
	st, closeStore, recovered, err := openState(ctx, path, &log)
	require.NoError(t, err)
	assert.False(t, recovered)
	for i := range 100 {
		_, err := st.PutTarget(ctx, fmt.Sprintf("target-%03d", i), []byte(`{"services":{"web":{"image":"alpine:3.20"}}}`))
		require.NoError(t, err)
	}
	closeStore()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b[:len(b)/2], 0o600))

	st, closeStore, recovered, err = openState(ctx, path, &log)
	require.NoError(t, err)
	defer closeStore()
	assert.True(t, recovered)
	assert.Contains(t, log.String(), "the state file was damaged and is kept as "+path+".corrupt-")
	_, _, err = st.Target(ctx, "target-000")
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "the new store is empty")
	moved, err := filepath.Glob(path + ".corrupt-*")
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
	assert.Contains(t, hint, "-demo-image")
	assert.Empty(t, pullHint(errors.New("disk full")))
}

// TestAgentRunsWithoutTheDefaultImage: on an engine without the built-in
// project's default image, the agent builds the demo image and uses it;
// an image given with -image is used as it is, and when it cannot be
// pulled the agent says what to do.
func TestAgentRunsWithoutTheDefaultImage(t *testing.T) {
	ctx := context.Background()
	eng := engine(t)
	// A reference no engine has: the registry at 127.0.0.1:1 refuses at once.
	const absent = "127.0.0.1:1/converge/absent:0"
	var out bytes.Buffer
	img, err := builtinImage(ctx, eng, absent, false, &out)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(img, "converge-test/app:"), "the demo image, got %q", img)
	assert.Contains(t, out.String(), absent+" is not on this engine: using the demo image")
	img, err = builtinImage(ctx, eng, absent, true, &out)
	require.NoError(t, err)
	assert.Equal(t, absent, img, "an image the user chose is kept")

	dir := t.TempDir()
	bin := filepath.Join(dir, "deviceagent")
	build, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", build)
	// The built-in project on the image, under a name of its own.
	file, _ := uniqueProject(t, absent)
	cmd := exec.Command(bin, "-once", "-f", file, "-state", filepath.Join(dir, "agent.db"))
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Run()
	t.Cleanup(func() {
		_ = exec.Command(bin, "-down", "-volumes", "-f", file, "-state", filepath.Join(dir, "agent.db")).Run()
	})
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the pull fails:\n%s", buf.String())
	assert.Contains(t, buf.String(), "deviceagent: the engine cannot pull "+absent, "the agent says what to do:\n%s", buf.String())
	assert.Contains(t, buf.String(), "-demo-image")
}
