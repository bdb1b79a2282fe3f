package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun runs the quickstart and checks that each step says what it
// should, and that the temporary directory is gone afterwards.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	s := out.String()

	first, _, _ := strings.Cut(s, "\n")
	dir, ok := strings.CutPrefix(first, "device root: ")
	require.True(t, ok, first)
	assert.NoDirExists(t, dir, "the temporary directory was not removed")

	dry, rest, ok := strings.Cut(s, "== 2. apply")
	require.True(t, ok)
	apply, rest, ok := strings.Cut(rest, "== 3. apply again")
	require.True(t, ok)
	again, clean, ok := strings.Cut(rest, "== 4. clean")
	require.True(t, ok)

	assert.Contains(t, dry, "apply (dry run): 8 items: 8 would-change")
	assert.Contains(t, dry, "+++ b/etc/app/app.conf\n    @@ -0,0 +1,2 @@\n    +listen = :8080\n")
	assert.Contains(t, dry, "    -arm_boost=1\n    +arm_boost=0\n")
	assert.Contains(t, dry, "mkdir /etc/app (0755)")
	assert.Contains(t, dry, "content of /etc/app/env changes (sensitive, not shown): absent -> 13 bytes")
	assert.NotContains(t, out.String(), "s3cret", "a sensitive file never shows its content")

	assert.Contains(t, apply, "[8] changed")
	assert.Contains(t, apply, "apply: 8 items: 8 changed")
	assert.Contains(t, apply, "flowchart LR\n\tn0[\"dir:/etc/app<br/>changed\"]\n", "the graph is drawn, colored by the apply")
	assert.Contains(t, apply, "\tn0 --> n1\n")
	assert.Contains(t, apply, "reboot       configkey:/boot/firmware/config.txt:gpu_mem: gpu_mem=128 set in /boot/firmware/config.txt")

	assert.Contains(t, again, "apply: 8 items: 8 unchanged")
	assert.NotContains(t, again, "reboot")

	assert.Contains(t, clean, "clean: 8 items: 8 changed")
	assert.Contains(t, clean, "changed      dir:/etc/app (absent)")
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	require.Error(t, run(ctx, &out))
}
