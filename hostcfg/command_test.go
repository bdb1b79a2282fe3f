//go:build linux

package hostcfg

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// cmdFixture is a root with the host paths a test's commands write: a
// counter file each run appends a line to, and a marker file.
type cmdFixture struct {
	r                    *Root
	dir, outside         string
	count, marker, state string // host paths
}

func newCmdFixture(t *testing.T) *cmdFixture {
	t.Helper()
	r, dir, outside := newRoot(t)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "etc"), 0o755))
	return &cmdFixture{r: r, dir: dir, outside: outside,
		count: filepath.Join(dir, "count"), marker: filepath.Join(dir, "marker"), state: filepath.Join(dir, "state")}
}

// runs is the number of times a command appended to the counter.
func (f *cmdFixture) runs(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(f.count)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

// counting is a Shell Argv that counts its run and then runs script,
// which sees the marker's host path as $1.
func (f *cmdFixture) counting(script string) []string {
	return []string{`echo run >> "$2"; ` + script, f.marker, f.count}
}

// walker returns a Walker of its own, so that refreshes pending in one
// test never reach another.
func cmdWalker(t *testing.T) *converge.Walker {
	t.Helper()
	w, err := converge.NewWalker(converge.DefaultWalkerConfig())
	require.NoError(t, err)
	return w
}

func TestCommandGuards(t *testing.T) {
	type walk struct {
		outcome converge.Outcome
		runs    int // total runs after the walk
	}
	tests := []struct {
		name     string
		marker   bool // the marker exists before the first walk
		setup    func(t *testing.T, f *cmdFixture)
		cmd      func(f *cmdFixture) *Command
		first    walk
		unchange string // the Reason once converged
	}{
		{name: "creates/missing-runs-once", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, Creates: "/marker"}
		}, first: walk{converge.OutcomeChanged, 1}, unchange: "/marker exists"},
		{name: "creates/exists-never-runs", marker: true, cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, Creates: "/marker"}
		}, first: walk{converge.OutcomeUnchanged, 0}, unchange: "/marker exists"},
		{name: "unless/fails-runs-once", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, Unless: []string{`test -e "$1"`, f.marker}}
		}, first: walk{converge.OutcomeChanged, 1}, unchange: "Unless succeeded"},
		{name: "unless/succeeds-never-runs", marker: true, cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, Unless: []string{`test -e "$1"`, f.marker}}
		}, first: walk{converge.OutcomeUnchanged, 0}, unchange: "Unless succeeded"},
		{name: "onlyif/succeeds-runs-once", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, OnlyIf: []string{`test ! -e "$1"`, f.marker}}
		}, first: walk{converge.OutcomeChanged, 1}, unchange: "OnlyIf exited with code 1"},
		{name: "onlyif/fails-never-runs", marker: true, cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, OnlyIf: []string{`test ! -e "$1"`, f.marker}}
		}, first: walk{converge.OutcomeUnchanged, 0}, unchange: "OnlyIf exited with code 1"},
		{name: "argv-without-shell", cmd: func(f *cmdFixture) *Command {
			// No shell: argv runs as it is.
			return &Command{Argv: []string{"touch", f.marker}, Unless: []string{"test", "-e", f.marker}}
		}, first: walk{converge.OutcomeChanged, 0}, unchange: "Unless succeeded"},
		{name: "relative-program-in-dir", setup: func(t *testing.T, f *cmdFixture) {
			writeFile(t, filepath.Join(f.dir, "opt/tool/run.sh"), "#!/bin/sh\necho run >> \"$2\"; touch \"$1\"\n")
			require.NoError(t, os.Chmod(filepath.Join(f.dir, "opt/tool/run.sh"), 0o755))
		}, cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: []string{"./run.sh", f.marker, f.count}, Dir: "/opt/tool", Creates: "/marker"}
		}, first: walk{converge.OutcomeChanged, 1}, unchange: "/marker exists"},
		{name: "creates-holds-first-unless-not-run", cmd: func(f *cmdFixture) *Command {
			// Unless would count a run of its own if it ran once converged.
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, Creates: "/marker",
				Unless: []string{`echo unless >> "$1"; exit 1`, f.state}}
		}, first: walk{converge.OutcomeChanged, 1}, unchange: "/marker exists"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCmdFixture(t)
			if tt.marker {
				writeFile(t, f.marker, "")
			}
			if tt.setup != nil {
				tt.setup(t, f)
			}
			c := tt.cmd(f)
			c.Root, c.Name = f.r, "guarded"
			g := graph(c.Node())

			rep := mustApply(t, g)
			res := mustItem(t, rep, "command:guarded")
			assert.Equal(t, tt.first.outcome, res.Outcome, "first walk")
			assert.Equal(t, tt.first.runs, f.runs(t), "runs after the first walk")
			assert.FileExists(t, f.marker)
			assert.Equal(t, tt.unchange, res.After.(CommandState).Reason)

			rep = mustApply(t, g)
			res = mustItem(t, rep, "command:guarded")
			assert.Equal(t, converge.OutcomeUnchanged, res.Outcome, "second walk")
			assert.Equal(t, tt.first.runs, f.runs(t), "the second walk ran the command")
			assert.Equal(t, tt.unchange, res.After.(CommandState).Reason)
			if c.Unless != nil && c.Creates != "" {
				// Unless ran in the first walk's discovery and Apply (the
				// marker was missing), never once Creates held.
				b, err := os.ReadFile(f.state)
				require.NoError(t, err)
				assert.Equal(t, 2, strings.Count(string(b), "unless"))
			}
		})
	}
}

// TestCommandNotConverged runs programs that succeed without making
// their guards hold: the item fails, its error matching
// converge.ErrNotConverged and saying which guard.
func TestCommandNotConverged(t *testing.T) {
	tests := []struct {
		name   string
		cmd    func(f *cmdFixture) *Command
		reason string
	}{
		{name: "creates", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: []string{"true"}, Creates: "/never"}
		}, reason: "did not create /never"},
		{name: "unless", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: []string{"true"}, Unless: []string{"false"}}
		}, reason: "Unless still fails"},
		{name: "onlyif", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: []string{"true"}, OnlyIf: []string{"true"}}
		}, reason: "OnlyIf still succeeds"},
		{name: "all", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: []string{"true"}, Creates: "/never", Unless: []string{"false"}, OnlyIf: []string{"true"}}
		}, reason: "did not create /never; Unless still fails; OnlyIf still succeeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCmdFixture(t)
			c := tt.cmd(f)
			c.Root, c.Name = f.r, "lazy"
			_, err := converge.Apply(t.Context(), graph(c.Node()))
			require.ErrorIs(t, err, converge.ErrNotConverged)
			assert.NotErrorIs(t, err, ErrCommandFailed)
			var ce *CommandError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.reason, ce.Reason)
			assert.Equal(t, "Argv", ce.Role)
			var ie *converge.ItemError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, converge.ID("command:lazy"), ie.ID)
			assert.Equal(t, converge.PhaseApply, ie.Phase)
			assert.Contains(t, err.Error(), `command "true" succeeded but `+tt.reason)
		})
	}
}

// pidGone waits for the process pid, which must have become a child of
// the test (the test process is a subreaper while the test runs), and
// requires that it was killed by SIGKILL and is gone: kill(pid, 0) fails
// with ESRCH.
func pidGone(t *testing.T, pid int) {
	t.Helper()
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		require.NoError(t, err, "pid %d is not a child of the test: it was not orphaned", pid)
		break
	}
	assert.True(t, ws.Signaled() && ws.Signal() == unix.SIGKILL, "pid %d ended with status %v, not by SIGKILL", pid, ws)
	assert.ErrorIs(t, unix.Kill(pid, 0), unix.ESRCH, "pid %d is still there", pid)
}

// subreaper makes the test process the reaper of orphaned descendants
// for the test's duration, so that a grandchild killed with its process
// group can be waited for (and not be left to an init that might not reap).
func subreaper(t *testing.T) {
	t.Helper()
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// TestCommandKillsProcessGroup runs a shell that starts `sleep 60` and
// waits for it; on timeout and on cancellation, the sleep (a grandchild)
// is killed with the shell, and the error says why.
func TestCommandKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name string
		// pidFile is where the script writes the sleep's pid: a regular
		// file for the timeout, a named pipe for the cancellation, which
		// the test reads before it cancels.
		fifo    bool
		timeout time.Duration
		check   func(t *testing.T, err error, ce *CommandError)
	}{
		{name: "timeout", timeout: 2 * time.Second, check: func(t *testing.T, err error, ce *CommandError) {
			assert.True(t, ce.TimedOut)
			assert.Equal(t, 2*time.Second, ce.Timeout)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Contains(t, err.Error(), `command "/bin/sh" timed out after 2s; its process group was killed`)
			assert.Contains(t, ce.Output, "started")
		}},
		{name: "cancel", fifo: true, check: func(t *testing.T, err error, ce *CommandError) {
			assert.False(t, ce.TimedOut)
			assert.ErrorIs(t, err, context.Canceled)
			assert.Contains(t, err.Error(), `command "/bin/sh" was cancelled (context canceled); nothing of it is left running`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subreaper(t)
			f := newCmdFixture(t)
			pidFile := filepath.Join(f.dir, "pid")
			if tt.fifo {
				require.NoError(t, unix.Mkfifo(pidFile, 0o600))
			}
			c := &Command{Root: f.r, Name: "hang", Shell: true, Creates: "/never", Timeout: tt.timeout,
				Argv: []string{`echo started; sleep 60 & echo $! > "$1"; wait`, pidFile}}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := converge.Apply(ctx, graph(c.Node()))
				done <- err
			}()
			var pid int
			if tt.fifo {
				b, err := os.ReadFile(pidFile) // returns once the script wrote and closed it
				require.NoError(t, err)
				pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
				require.NoError(t, err)
				cancel()
			}
			err := <-done
			require.Less(t, time.Since(start), 30*time.Second, "the walk waited for the sleep")
			if !tt.fifo {
				b, rerr := os.ReadFile(pidFile)
				require.NoError(t, rerr)
				pid, rerr = strconv.Atoi(strings.TrimSpace(string(b)))
				require.NoError(t, rerr)
			}
			require.ErrorIs(t, err, ErrCommandFailed)
			var ce *CommandError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, -1, ce.ExitCode)
			tt.check(t, err, ce)
			pidGone(t, pid)
		})
	}
}

// TestCommandLeavesNoProcessBehind: a program that exits while a child
// it started in the background still runs has that child killed (and its
// output does not hold the walk up).
func TestCommandLeavesNoProcessBehind(t *testing.T) {
	subreaper(t)
	f := newCmdFixture(t)
	pidFile := filepath.Join(f.dir, "pid")
	c := &Command{Root: f.r, Name: "daemon", Shell: true, Unless: []string{`test -e "$1"`, pidFile},
		Argv: []string{`sleep 60 & echo $! > "$1"`, pidFile}}
	start := time.Now()
	rep := mustApply(t, graph(c.Node()))
	assert.Less(t, time.Since(start), 30*time.Second)
	assert.Equal(t, converge.OutcomeChanged, mustItem(t, rep, c.ID()).Outcome)
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, pidFile)))
	require.NoError(t, err)
	pidGone(t, pid)
}

func TestCommandFailure(t *testing.T) {
	const token, password = "s3cr3t-t0ken-value", "pw-9f8e7d"
	tests := []struct {
		name  string
		cmd   *Command
		phase converge.Phase
		check func(t *testing.T, ce *CommandError, msg string)
	}{
		{name: "exit-code-and-tail", phase: converge.PhaseApply,
			cmd: &Command{Shell: true, Creates: "/never",
				Env: []string{"API_TOKEN=" + token, "DB_URL=postgres://app:" + password + "@db/app", "MONKEY=" + "plain-value"},
				Argv: []string{`i=1; while [ $i -le 30 ]; do echo "line $i"; i=$((i+1)); done
echo "token is $API_TOKEN" >&2
echo "url is $DB_URL"
echo "monkey is $MONKEY"
exit 3`}},
			check: func(t *testing.T, ce *CommandError, msg string) {
				assert.Equal(t, "Argv", ce.Role)
				assert.Equal(t, "/bin/sh", ce.Program)
				assert.Equal(t, 3, ce.ExitCode)
				assert.False(t, ce.TimedOut)
				assert.NoError(t, ce.Err)
				lines := strings.Split(ce.Output, "\n")
				require.Len(t, lines, commandTailLines)
				assert.Equal(t, "line 14", lines[0])
				assert.Equal(t, "token is "+redacted, lines[17])
				assert.Equal(t, "url is postgres://app:"+redacted+"@db/app", lines[18])
				assert.Equal(t, "monkey is plain-value", lines[19], "MONKEY is not secret")
				assert.Contains(t, msg, `command "/bin/sh" exited with code 3; last lines of its output:`)
				assert.NotContains(t, msg, token)
				assert.NotContains(t, msg, password)
			}},
		{name: "secret-env-listed", phase: converge.PhaseApply,
			cmd: &Command{Argv: []string{"sh", "-c", `echo "pin $PIN"; exit 1`}, Creates: "/never",
				Env: []string{"PIN=4711-1234"}, SecretEnv: []string{"PIN"}},
			check: func(t *testing.T, ce *CommandError, msg string) {
				assert.Equal(t, "sh", ce.Program)
				assert.Equal(t, 1, ce.ExitCode)
				assert.Equal(t, "pin "+redacted, ce.Output)
				assert.NotContains(t, msg, "4711-1234")
			}},
		{name: "long-output-bytes", phase: converge.PhaseApply,
			cmd: &Command{Shell: true, Creates: "/never", Env: []string{"SECRET=" + strings.Repeat("k", 100)},
				Argv: []string{`x=$(printf 'x%.0s' $(seq 1 100)); i=0; while [ $i -lt 200 ]; do printf '%s%s\n' "$x" "$SECRET"; i=$((i+1)); done; exit 1`}},
			check: func(t *testing.T, ce *CommandError, _ string) {
				assert.LessOrEqual(t, len(ce.Output), commandTailBytes)
				assert.NotContains(t, ce.Output, "kkkkkkkk")
				for _, l := range strings.Split(ce.Output, "\n") {
					assert.Equal(t, strings.Repeat("x", 100)+redacted, l, "a cut line is dropped whole")
				}
			}},
		{name: "not-found", phase: converge.PhaseApply,
			cmd: &Command{Argv: []string{"no-such-program-hostcfg"}, Creates: "/never", Env: []string{"PATH=/usr/bin:/bin"}},
			check: func(t *testing.T, ce *CommandError, msg string) {
				assert.Equal(t, -1, ce.ExitCode)
				require.Error(t, ce.Err)
				assert.Contains(t, msg, `command "no-such-program-hostcfg" did not start: "no-such-program-hostcfg" not found in PATH "/usr/bin:/bin"`)
			}},
		{name: "killed-by-signal", phase: converge.PhaseApply,
			cmd: &Command{Shell: true, Creates: "/never", Argv: []string{`kill -TERM $$`}},
			check: func(t *testing.T, ce *CommandError, msg string) {
				assert.Equal(t, -1, ce.ExitCode)
				assert.Equal(t, "terminated", ce.Signal)
				assert.Contains(t, msg, `was killed by signal "terminated"`)
			}},
		{name: "guard-not-found", phase: converge.PhaseDiscover,
			cmd: &Command{Argv: []string{"true"}, Unless: []string{"/nonexistent/guard"}},
			check: func(t *testing.T, ce *CommandError, msg string) {
				assert.Equal(t, "Unless", ce.Role)
				assert.Contains(t, msg, `hostcfg: Unless command "/nonexistent/guard" did not start`)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCmdFixture(t)
			tt.cmd.Root, tt.cmd.Name = f.r, "fail"
			_, err := converge.Apply(t.Context(), graph(tt.cmd.Node()))
			require.ErrorIs(t, err, ErrCommandFailed)
			var ie *converge.ItemError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, converge.ID("command:fail"), ie.ID)
			assert.Equal(t, tt.phase, ie.Phase)
			assert.Equal(t, 1, namings(err.Error(), "command:fail"), err.Error())
			var ce *CommandError
			require.ErrorAs(t, err, &ce)
			tt.check(t, ce, err.Error())
		})
	}
}

// TestCommandEnvironment: the agent's environment is not inherited but
// for PATH; Env is what the process sees; Dir is resolved in the root.
func TestCommandEnvironment(t *testing.T) {
	t.Setenv("HOSTCFG_AGENT_ONLY", "leak")
	tests := []struct {
		name    string
		env     []string
		dir     string
		setup   func(t *testing.T, f *cmdFixture)
		want    []string
		wantDir string // root-relative
		absent  []string
	}{
		{name: "path-inherited", want: []string{"PATH=" + os.Getenv("PATH")}, absent: []string{"HOSTCFG_AGENT_ONLY", "HOME="}, wantDir: ""},
		{name: "env-explicit", env: []string{"A=1", "PATH=/bin:/usr/bin", "LANG=C.UTF-8"},
			want: []string{"A=1", "PATH=/bin:/usr/bin", "LANG=C.UTF-8"}, absent: []string{"HOSTCFG_AGENT_ONLY", "PATH=" + os.Getenv("PATH") + "\n"}},
		{name: "dir", dir: "/srv/app", setup: func(t *testing.T, f *cmdFixture) {
			require.NoError(t, os.MkdirAll(filepath.Join(f.dir, "srv/app"), 0o755))
		}, wantDir: "srv/app"},
		{name: "dir-through-inside-link", dir: "/app", setup: func(t *testing.T, f *cmdFixture) {
			require.NoError(t, os.MkdirAll(filepath.Join(f.dir, "srv/app"), 0o755))
			require.NoError(t, os.Symlink("srv/app", filepath.Join(f.dir, "app")))
		}, wantDir: "srv/app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCmdFixture(t)
			if tt.setup != nil {
				tt.setup(t, f)
			}
			out := filepath.Join(f.dir, "env.out")
			c := &Command{Root: f.r, Name: "env", Env: tt.env, Dir: tt.dir, Creates: "/env.out",
				Argv: []string{"/bin/sh", "-c", `env > "$1.tmp"; echo "CWD=$(pwd -P)" >> "$1.tmp"; mv "$1.tmp" "$1"`, "sh", out}}
			mustApply(t, graph(c.Node()))
			got := readFile(t, out)
			for _, w := range tt.want {
				assert.Contains(t, got, w+"\n")
			}
			for _, a := range tt.absent {
				assert.NotContains(t, got, a)
			}
			wantDir := f.r.Dir()
			if tt.wantDir != "" {
				wantDir = filepath.Join(wantDir, tt.wantDir)
			}
			assert.Contains(t, got, "CWD="+wantDir+"\n")
			assert.NotContains(t, got, "/proc/self/fd", "the process's PWD is its real directory")
		})
	}
}

// TestCommandDryRunRunsNothing: a dry run runs no program (a guard may
// run: guards only read), reports WouldChange when the guards say the
// program must run, and Unchanged when a guard holds.
func TestCommandDryRunRunsNothing(t *testing.T) {
	tests := []struct {
		name    string
		marker  bool
		cmd     func(f *cmdFixture) *Command
		outcome converge.Outcome
	}{
		{name: "creates-missing", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, Creates: "/marker"}
		}, outcome: converge.OutcomeWouldChange},
		{name: "unless-fails", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, Unless: []string{`test -e "$1"`, f.marker}}
		}, outcome: converge.OutcomeWouldChange},
		{name: "onlyif-succeeds", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, OnlyIf: []string{`test ! -e "$1"`, f.marker}}
		}, outcome: converge.OutcomeWouldChange},
		{name: "creates-exists", marker: true, cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, Creates: "/marker"}
		}, outcome: converge.OutcomeUnchanged},
		{name: "refresh-only", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, RefreshOnly: true}
		}, outcome: converge.OutcomeUnchanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCmdFixture(t)
			if tt.marker {
				writeFile(t, f.marker, "")
			}
			c := tt.cmd(f)
			c.Root, c.Name = f.r, "dry"
			before := snapshot(t, f.dir)
			rep, err := converge.ApplyDry(t.Context(), graph(c.Node()))
			require.NoError(t, err)
			res := mustItem(t, rep, c.ID())
			assert.Equal(t, tt.outcome, res.Outcome)
			assert.Equal(t, 0, f.runs(t), "a dry run ran the program")
			assert.Equal(t, before, snapshot(t, f.dir), "a dry run wrote something")
			if tt.outcome == converge.OutcomeWouldChange {
				st := res.After.(CommandState)
				assert.True(t, st.Dry)
				assert.False(t, st.Ran)
			}
		})
	}
}

// TestCommandRefreshOnly: a RefreshOnly command depending on a File runs
// once in a walk where the file changed, never in a walk where nothing
// changed, and not in a dry run (which says it would refresh).
func TestCommandRefreshOnly(t *testing.T) {
	f := newCmdFixture(t)
	w := cmdWalker(t)
	conf := &File{Root: f.r, Path: "/etc/app.conf", Content: []byte("v=1\n")}
	c := &Command{Root: f.r, Name: "reload", RefreshOnly: true, Argv: f.counting(`:`), Shell: true}
	g := converge.NewGraph()
	g.Add(conf.Node(), converge.Present)
	g.Add(c.Node(), converge.Present, conf.ID())
	ctx := t.Context()

	steps := []struct {
		name    string
		before  func()
		dry     bool
		outcome converge.Outcome
		refresh []converge.ID
		runs    int
	}{
		{name: "dry-run-first", dry: true, outcome: converge.OutcomeWouldChange, refresh: []converge.ID{conf.ID()}, runs: 0},
		{name: "file-created", outcome: converge.OutcomeChanged, refresh: []converge.ID{conf.ID()}, runs: 1},
		{name: "nothing-changed", outcome: converge.OutcomeUnchanged, runs: 1},
		{name: "nothing-changed-again", outcome: converge.OutcomeUnchanged, runs: 1},
		{name: "file-drifted", before: func() { writeFile(t, filepath.Join(f.dir, "etc/app.conf"), "v=0\n") },
			outcome: converge.OutcomeChanged, refresh: []converge.ID{conf.ID()}, runs: 2},
		{name: "settled", outcome: converge.OutcomeUnchanged, runs: 2},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		var rep *converge.Report
		var err error
		if s.dry {
			rep, err = w.ApplyDry(ctx, g)
		} else {
			rep, err = w.Apply(ctx, g)
		}
		require.NoError(t, err, s.name)
		res := mustItem(t, rep, c.ID())
		assert.Equal(t, s.outcome, res.Outcome, s.name)
		assert.Equal(t, s.refresh, res.Refresh, s.name)
		assert.Equal(t, s.runs, f.runs(t), s.name)
		if s.refresh != nil && !s.dry {
			st := res.After.(CommandState)
			assert.True(t, st.Ran, s.name)
			assert.Equal(t, s.refresh, st.Changed, s.name)
		}
	}
}

// TestCommandRefreshFailsAndStaysDue: a refresh that fails fails the item
// in PhaseRefresh; the next walk refreshes again although nothing changed.
func TestCommandRefreshFailsAndStaysDue(t *testing.T) {
	f := newCmdFixture(t)
	w := cmdWalker(t)
	conf := &File{Root: f.r, Path: "/etc/app.conf", Content: []byte("v=1\n")}
	// Fails on its first run, succeeds after.
	c := &Command{Root: f.r, Name: "restart", RefreshOnly: true, Shell: true,
		Argv: f.counting(`if [ -e "$1" ]; then exit 0; fi; touch "$1"; echo "not yet"; exit 7`)}
	g := converge.NewGraph()
	g.Add(conf.Node(), converge.Present)
	g.Add(c.Node(), converge.Present, conf.ID())

	_, err := w.Apply(t.Context(), g)
	require.ErrorIs(t, err, ErrCommandFailed)
	var ie *converge.ItemError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, converge.PhaseRefresh, ie.Phase)
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 7, ce.ExitCode)
	assert.Equal(t, "not yet", ce.Output)
	assert.Equal(t, 1, f.runs(t))

	rep, err := w.Apply(t.Context(), g)
	require.NoError(t, err)
	res := mustItem(t, rep, c.ID())
	assert.Equal(t, converge.OutcomeChanged, res.Outcome)
	assert.Equal(t, []converge.ID{conf.ID()}, res.Refresh)
	assert.Equal(t, 2, f.runs(t))

	rep, err = w.Apply(t.Context(), g)
	require.NoError(t, err)
	assert.Equal(t, converge.OutcomeUnchanged, mustItem(t, rep, c.ID()).Outcome)
	assert.Equal(t, 2, f.runs(t))
}

// TestCommandGuardedIsNotRefreshed: a command with guards (not
// RefreshOnly) is not a refresher: its dependency changing neither runs
// it nor reports it changed.
func TestCommandGuardedIsNotRefreshed(t *testing.T) {
	f := newCmdFixture(t)
	w := cmdWalker(t)
	conf := &File{Root: f.r, Path: "/etc/app.conf", Content: []byte("v=1\n")}
	c := &Command{Root: f.r, Name: "init", Creates: "/marker", Argv: f.counting(`touch "$1"`), Shell: true}
	g := converge.NewGraph()
	g.Add(conf.Node(), converge.Present)
	g.Add(c.Node(), converge.Present, conf.ID())
	_, isRefresher := c.Node().(converge.RefreshNode)
	assert.False(t, isRefresher)
	_, isRefresher = (&Command{RefreshOnly: true}).Node().(converge.RefreshNode)
	assert.True(t, isRefresher)

	rep, err := w.Apply(t.Context(), g)
	require.NoError(t, err)
	assert.Equal(t, converge.OutcomeChanged, mustItem(t, rep, c.ID()).Outcome)
	writeFile(t, filepath.Join(f.dir, "etc/app.conf"), "drift\n")
	rep, err = w.Apply(t.Context(), g)
	require.NoError(t, err)
	res := mustItem(t, rep, c.ID())
	assert.Equal(t, converge.OutcomeUnchanged, res.Outcome)
	assert.Empty(t, res.Refresh)
	assert.Equal(t, 1, f.runs(t))

	// Called directly, Refresh of a guarded command runs nothing.
	st, err := c.Refresh(t.Context(), CommandState{Name: "init", Converged: true}, []converge.ID{conf.ID()})
	require.NoError(t, err)
	assert.False(t, st.Ran)
	assert.Equal(t, 1, f.runs(t))
}

// TestCommandInvalid: invalid items are refused before anything runs,
// with typed errors, and the walk's error names the item once.
func TestCommandInvalid(t *testing.T) {
	valid := func(f *cmdFixture) Command {
		return Command{Root: f.r, Name: "bad", Argv: f.counting(`touch "$1"`), Shell: true, Creates: "/marker"}
	}
	linkOut := func(t *testing.T, f *cmdFixture) {
		require.NoError(t, os.Symlink(f.outside, filepath.Join(f.dir, "out")))
	}
	linkOutRel := func(t *testing.T, f *cmdFixture) {
		require.NoError(t, os.MkdirAll(filepath.Join(f.dir, "srv"), 0o755))
		require.NoError(t, os.Symlink("../../outside", filepath.Join(f.dir, "srv/data")))
	}
	tests := []struct {
		name   string
		setup  func(t *testing.T, f *cmdFixture)
		edit   func(c *Command)
		phase  converge.Phase
		escape bool   // an *EscapeError, else an *ItemError
		reason string // the *ItemError's Reason
	}{
		{name: "empty-argv", edit: func(c *Command) { c.Argv = nil }, reason: "Argv is empty"},
		{name: "empty-argv0", edit: func(c *Command) { c.Argv = []string{""} }, reason: "Argv[0] is empty"},
		{name: "empty-unless0", edit: func(c *Command) { c.Unless = []string{"", "x"} }, reason: "Unless[0] is empty"},
		{name: "nul-in-onlyif", edit: func(c *Command) { c.OnlyIf = []string{"test", "a\x00b"} }, reason: "OnlyIf[1] contains a NUL byte"},
		{name: "unguarded", edit: func(c *Command) { c.Creates = "" },
			reason: "command has no guard: set Creates, Unless or OnlyIf, or RefreshOnly (an unguarded command would run on every pass)"},
		{name: "empty-name", edit: func(c *Command) { c.Name = "" }, reason: "Name is empty"},
		{name: "control-in-name", edit: func(c *Command) { c.Name = "bad\nname" }, reason: `Name "bad\nname" has control characters or invalid UTF-8`},
		{name: "env-not-kv", edit: func(c *Command) { c.Env = []string{"A=1", "JUSTKEY"} }, reason: "Env[1] is not KEY=value"},
		{name: "env-twice", edit: func(c *Command) { c.Env = []string{"A=1", "A=2"} }, reason: "Env sets A twice"},
		{name: "negative-timeout", edit: func(c *Command) { c.Timeout = -time.Second }, reason: "Timeout -1s is negative"},
		{name: "nil-root", edit: func(c *Command) { c.Root = nil }, reason: "Root is nil"},
		{name: "dir-dotdot", edit: func(c *Command) { c.Dir = "/srv/../../outside" }, escape: true},
		{name: "creates-dotdot", edit: func(c *Command) { c.Creates = "../outside/secret" }, escape: true},
		{name: "dir-symlink-absolute", setup: linkOut, edit: func(c *Command) { c.Dir = "/out" }, escape: true},
		{name: "creates-symlink-absolute", setup: linkOut, edit: func(c *Command) { c.Creates = "/out/secret" }, escape: true},
		{name: "dir-symlink-relative", setup: linkOutRel, edit: func(c *Command) { c.Dir = "/srv/data" }, escape: true},
		{name: "creates-symlink-relative", setup: linkOutRel, edit: func(c *Command) { c.Creates = "/srv/data/secret" }, escape: true},
		{name: "refresh-only-creates-symlink", setup: linkOut, edit: func(c *Command) { c.RefreshOnly, c.Creates = true, "/out/secret" }, escape: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCmdFixture(t)
			if tt.setup != nil {
				tt.setup(t, f)
			}
			c := valid(f)
			tt.edit(&c)
			_, err := converge.Apply(t.Context(), graph(c.Node()))
			require.Error(t, err)
			var ie *converge.ItemError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, c.ID(), ie.ID)
			assert.Equal(t, converge.PhaseDiscover, ie.Phase)
			if c.Name != "" {
				assert.Equal(t, 1, namings(err.Error(), string(c.ID())), err.Error())
			}
			if tt.escape {
				require.ErrorIs(t, err, ErrEscape)
				var ee *EscapeError
				require.ErrorAs(t, err, &ee)
			} else {
				require.ErrorIs(t, err, ErrInvalidItem)
				var he *ItemError
				require.ErrorAs(t, err, &he)
				assert.Equal(t, string(c.ID()), he.Item)
				assert.Equal(t, tt.reason, he.Reason)
				assert.Equal(t, he, c.Validate(), "Validate finds it without a walk")
			}
			assert.Equal(t, 0, f.runs(t), "an invalid command ran")
			assert.NoFileExists(t, filepath.Join(f.outside, "marker"))
		})
	}
}

// TestCommandDirMissing: a guard command whose Dir does not exist yet
// makes the state unknown (a dry run says it would run); an Apply then
// fails on the missing directory, running nothing.
func TestCommandDirMissing(t *testing.T) {
	f := newCmdFixture(t)
	c := &Command{Root: f.r, Name: "later", Dir: "/srv/later", Argv: f.counting(`touch "$1"`), Shell: true,
		Unless: []string{`test -e "$1"`, f.marker}}
	g := graph(c.Node())
	rep, err := converge.ApplyDry(t.Context(), g)
	require.NoError(t, err)
	res := mustItem(t, rep, c.ID())
	assert.True(t, res.Unknown)
	assert.Equal(t, converge.OutcomeWouldChange, res.Outcome)

	_, err = converge.Apply(t.Context(), g)
	require.ErrorIs(t, err, ErrCommandFailed)
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "chdir /srv/later")
	assert.Equal(t, 0, f.runs(t))

	// Once a predecessor made it, the command runs there.
	require.NoError(t, os.MkdirAll(filepath.Join(f.dir, "srv/later"), 0o755))
	mustApply(t, g)
	assert.Equal(t, 1, f.runs(t))
}

// TestCommandConformance runs convergetest.Conform on guarded commands.
func TestCommandConformance(t *testing.T) {
	tests := []struct {
		name string
		cmd  func(f *cmdFixture) *Command
	}{
		{name: "creates", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, Creates: "/marker"}
		}},
		{name: "unless", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, Unless: []string{`test -e "$1"`, f.marker}}
		}},
		{name: "refresh-only", cmd: func(f *cmdFixture) *Command {
			return &Command{Argv: f.counting(`touch "$1"`), Shell: true, RefreshOnly: true}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCmdFixture(t)
			c := tt.cmd(f)
			c.Root, c.Name = f.r, "conform"
			snap := func(context.Context) (any, error) { return snapshot(t, f.dir), nil }
			require.NoError(t, convergetest.Conform[CommandState](t.Context(), c, convergetest.ConformOptions{Snapshot: snap}))
			// Conform's Apply on a converged item does not run it again; a
			// RefreshOnly item runs for each of Conform's two Refresh calls
			// and its walk with a changed dependency, never in Apply.
			want := 1
			if c.RefreshOnly {
				want = 3
			}
			assert.Equal(t, want, f.runs(t))
		})
	}
}

// TestCommandTail checks the tail's cuts without a process.
func TestCommandTail(t *testing.T) {
	red := commandRedactor{"secret"}
	tests := []struct {
		name, raw, want string
	}{
		{name: "empty", raw: "", want: ""},
		{name: "short", raw: "a\nb\n", want: "a\nb"},
		{name: "lines", raw: strings.Repeat("l\n", 25) + "last\n", want: strings.TrimSuffix(strings.Repeat("l\n", 19), "\n") + "\nlast"},
		{name: "redacted-before-cut", raw: strings.Repeat("y", commandTailBytes-3) + "secret\n", want: ""},
		{name: "invalid-utf8", raw: "a\xffb\n", want: "a\uFFFDb"},
		{name: "url-in-output", raw: "dial https://u:pw@h/x\n", want: "dial https://u:" + redacted + "@h/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := red.tail([]byte(tt.raw))
			if tt.name == "redacted-before-cut" {
				// One line longer than the tail: it is dropped whole, and
				// no part of the secret shows.
				assert.NotContains(t, got, "secr")
				assert.NotContains(t, got, "cret")
				return
			}
			assert.Equal(t, tt.want, got)
		})
	}
	var tb tailBuffer
	tb.max = 8
	for range 10 {
		_, _ = tb.Write([]byte("0123456789"))
	}
	assert.Equal(t, "23456789", string(tb.bytes()))
}
