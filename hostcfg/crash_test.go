package hostcfg

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// crashChildEnv switches the test binary into the crash child: it writes
// the file under the root named by the variable in a loop until killed.
const crashChildEnv = "HOSTCFG_CRASH_CHILD"

const crashPath = "/data/blob"

// crashContent is a large content made of numbered lines, so that a torn
// file cannot pass for either version.
func crashContent(tag string) []byte {
	var b bytes.Buffer
	for i := range 20000 {
		fmt.Fprintf(&b, "%s line %05d of the %s version\n", tag, i, tag)
	}
	return b.Bytes()
}

// crashChild is run by TestMain in the child process.
func crashChild() {
	r, err := OpenRoot(os.Getenv(crashChildEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	oldG := graph((&File{Root: r, Path: crashPath, Content: crashContent("old")}).Node())
	newG := graph((&File{Root: r, Path: crashPath, Content: crashContent("new")}).Node())
	fmt.Println("ready")
	ctx := context.Background()
	for {
		if _, err := converge.Apply(ctx, newG); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		if _, err := converge.Apply(ctx, oldG); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
	}
}

// TestCrashDuringWrite kills (SIGKILL) a child process that rewrites a file
// in a loop at random points, 50 times. Every time the file is the old or
// the new content, and a later run converges and removes the temporary
// files the crash left.
func TestCrashDuringWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs 50 child processes")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	_, dir, _ := newRoot(t)
	oldC, newC := crashContent("old"), crashContent("new")
	writeFile(t, filepath.Join(dir, "data/blob"), string(oldC))

	leftovers := 0
	for run := range 50 {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "ready\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("run %d: the child did not start: %q, %v: %s", run, line, err, stderr.String())
		}
		// The crash point is random by design: let the child write for a
		// random while, then kill it without warning.
		time.Sleep(time.Duration(rand.IntN(40_000)) * time.Microsecond)
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		require.Empty(t, stderr.String(), "run %d: the child failed", run)

		got, err := os.ReadFile(filepath.Join(dir, "data/blob"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(got, oldC) || bytes.Equal(got, newC), "run %d: torn file of %d bytes", run, len(got))
		if temps(t, filepath.Join(dir, "data")) > 0 {
			leftovers++
		}

		// A later run (a new process: a new Root) converges and cleans up.
		r, err := OpenRoot(dir)
		require.NoError(t, err)
		want := oldC
		if run%2 == 1 {
			want = newC
		}
		g := graph((&File{Root: r, Path: crashPath, Content: want}).Node())
		mustApply(t, g)
		rep := mustApply(t, g)
		assert.Equal(t, converge.OutcomeUnchanged, rep.Items[0].Outcome, "run %d: second apply", run)
		assert.Equal(t, want, []byte(readFile(t, filepath.Join(dir, "data/blob"))))
		assert.Zero(t, temps(t, filepath.Join(dir, "data")), "run %d: temporary files left", run)
		require.NoError(t, r.Close())
	}
	t.Logf("%d of 50 crashes left a temporary file behind", leftovers)
}

func temps(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		if strings.Contains(e.Name(), tempMarker) {
			n++
		}
	}
	return n
}
