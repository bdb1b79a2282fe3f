package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// TestOnceTwiceRecreatesNothing runs the built agent as a user does: -once
// twice on the built-in project, then -down and -down -volumes. The second
// run finds everything converged — the label key kept beside the state
// makes both runs compute the same keyed hashes — and only -volumes
// removes the project's volume.
func TestOnceTwiceRecreatesNothing(t *testing.T) {
	ctx := context.Background()
	cli, err := dockertest.Connect(ctx)
	if err != nil {
		if os.Getenv("CONVERGE_REQUIRE_DOCKER") == "1" {
			t.Fatalf("Docker engine required (CONVERGE_REQUIRE_DOCKER=1): %v", err)
		}
		t.Skipf("no Docker engine, skipping: %v", err)
	}
	defer cli.Close()
	dir := t.TempDir()
	bin := filepath.Join(dir, "deviceagent")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	state := filepath.Join(dir, "agent.db")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"-demo-image", "-state", state}, args...)...)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		require.NoError(t, cmd.Run(), "deviceagent %v:\n%s", args, buf.String())
		return buf.String()
	}
	t.Cleanup(func() { run("-down", "-volumes") })

	first := run("-once")
	assert.Contains(t, first, "container:deviceagent/web: changed", "the first run creates the containers:\n%s", first)
	second := run("-once")
	assert.NotContains(t, second, ": changed", "the second run changes nothing:\n%s", second)

	run("-down")
	_, err = cli.VolumeInspect(ctx, "deviceagent_data")
	assert.NoError(t, err, "-down keeps the volume and its data")
	down := run("-down", "-volumes")
	assert.Contains(t, down, "volume:deviceagent_data: changed", "-down -volumes removes the volume:\n%s", down)
	_, err = cli.VolumeInspect(ctx, "deviceagent_data")
	assert.True(t, errdefs.IsNotFound(err), "the volume is gone: %v", err)
}
