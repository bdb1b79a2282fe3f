package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFleetStopsCleanlyOnInterrupt runs the built program, as a user does,
// and interrupts it (Ctrl-C sends SIGINT) while it converges: served with
// -http, an interrupt is the way to stop it and it exits 0; run once, it
// exits 130 and says it was interrupted, never "context canceled".
func TestFleetStopsCleanlyOnInterrupt(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fleet")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, tc := range []struct {
		name  string
		args  []string
		ready string // a line printed once the fleet runs
		code  int
	}{
		{"served", []string{"-http", "127.0.0.1:0"}, "status page on http://", 0},
		{"once", nil, "state kept in ", 130},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, append(tc.args, "-state", filepath.Join(t.TempDir(), "fleet.db"))...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			sc := bufio.NewScanner(stdout)
			for sc.Scan() && !strings.HasPrefix(sc.Text(), tc.ready) {
			}
			require.NoError(t, cmd.Process.Signal(os.Interrupt))
			go func() { // drain, so the program never blocks on its output
				for sc.Scan() {
				}
			}()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Signal(syscall.SIGKILL)
				t.Fatalf("still running a minute after the interrupt")
			}
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.code, code, "stderr: %s", stderr.String())
			assert.NotContains(t, stderr.String(), "context canceled")
			if tc.code != 0 {
				assert.Contains(t, stderr.String(), "fleet: interrupted before every host was ready")
			}
		})
	}
}
