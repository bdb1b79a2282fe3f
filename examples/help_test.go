package examples_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryExampleAnswersHelp builds every example (each directory here
// with a main.go) and runs it with -h, as a newcomer would: it must exit
// with status 0 at once, having printed its usage line and, for those
// with flags, their list, without running (no example prints "usage:"
// when it runs, and none finishes in that time without doing nothing).
func TestEveryExampleAnswersHelp(t *testing.T) {
	mains, err := filepath.Glob("*/main.go")
	require.NoError(t, err)
	require.NotEmpty(t, mains)
	bin := t.TempDir()
	args := []string{"build", "-o", bin + string(filepath.Separator)}
	for _, m := range mains {
		args = append(args, "./"+filepath.Dir(m))
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	require.NoError(t, err, "%s", out)

	for _, m := range mains {
		name := filepath.Dir(m)
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(m)
			require.NoError(t, err)
			hasFlags := regexp.MustCompile(`flag\.(String|Bool|Int|Duration)(Var)?\(`).Match(src)

			cmd := exec.Command(filepath.Join(bin, name), "-h")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("%s -h still runs after a minute: it ran instead of printing its usage", name)
			}
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				t.Fatalf("%s -h exited with %d:\n%s%s", name, exit.ExitCode(), stdout.String(), stderr.String())
			}
			require.NoError(t, err)
			help := stderr.String()
			assert.Regexp(t, `^usage: `+name+`\b`, help, "the usage line names the example")
			assert.Empty(t, stdout.String(), "it did not run: nothing on stdout")
			if hasFlags {
				assert.Contains(t, help, "\nflags:\n", "the flags are listed")
				assert.Regexp(t, `\n  -[a-z]`, help)
			}
		})
	}
}
