package hostcfg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/convergekit/converge"
)

// DefaultCommandTimeout bounds each process a Command starts (the command
// and each of its guards, separately) when Command.Timeout is 0: five
// minutes, the default of Puppet's exec.
const DefaultCommandTimeout = 5 * time.Minute

// DefaultCommandPath is the PATH of a Command whose Env sets none, when the
// agent itself has no PATH either.
const DefaultCommandPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// CommandShell is the shell that runs a Command with Shell set.
const CommandShell = "/bin/sh"

// CommandError.Output holds at most the last commandTailLines lines and
// commandTailBytes bytes of a process's combined output. commandKeepBytes
// is what is kept of the raw output to find them: more than the tail, so
// that a secret cut by the tail's edge is still whole when it is redacted.
const (
	commandTailBytes = 4 << 10
	commandTailLines = 20
	commandKeepBytes = 64 << 10
)

// commandDrain bounds the wait for the end of a process's output once its
// process group is gone: only a process that left the group (setsid) can
// still hold the output open, and it is not waited for.
const commandDrain = 2 * time.Second

// redacted replaces secret values in the output and messages of commands.
// It is the marker of the docker package as well.
const redacted = converge.Redacted

var (
	// ErrCommandFailed is matched by every *CommandError of a process that
	// did not succeed: it did not start, exited with a non-zero code, was
	// killed by a signal, timed out or was cancelled. A command that ran
	// but left its guards unconverged matches converge.ErrNotConverged
	// instead.
	ErrCommandFailed = errors.New("hostcfg: command failed")
	// ErrCommandUnsupported means a Command ran on a system where hostcfg
	// cannot run processes with the guarantees Command documents (every
	// system but Linux).
	ErrCommandUnsupported = errors.New("hostcfg: commands are not supported on this system")
)

// Command is an Item that runs a program, made idempotent by guards: the
// exec of Puppet, the command and shell modules of Ansible, the execute
// resource of Chef. Guards decide whether the item is converged; the
// program runs only in Apply (or Refresh), when they say it must.
//
// Guards. The item is converged when any of its guards holds:
//
//   - Creates, a path inside the root, exists (a file, a directory, or a
//     symbolic link whose target exists);
//   - Unless, a command, succeeds (exits with code 0);
//   - OnlyIf, a command, fails (exits with a non-zero code).
//
// So the program runs only when Creates is missing and Unless fails and
// OnlyIf succeeds, the guards it has, in that order of evaluation; the
// first guard that holds ends the evaluation (Creates costs no process).
// Guards are verification as well: after the program ran, Apply evaluates
// them again and fails with a *CommandError matching
// converge.ErrNotConverged when none holds ("did not create /x"). There is
// no one-shot command: an OnlyIf alone must fail once the program ran
// (the program removes the condition it was run for), or the item would
// run it on every pass. A program whose condition stays true after it ran
// belongs in a RefreshOnly item or needs a Creates or Unless.
//
// Guard commands only read: they run in StateCurrent, in dry runs too,
// and as often as a walk looks: once per walk when converged, up to four
// times when the program runs (discovery; in Apply just before the run,
// and after it; the walk's verification). A guard with side effects
// breaks the promise of a dry run.
//
// A command without any guard that is not RefreshOnly is refused with an
// *ItemError (ErrInvalidItem): it would run on every pass, the known
// footgun of Puppet's unguarded exec.
//
// RefreshOnly (Puppet's refreshonly): the item is always converged and
// its program runs only from Refresh, which a walk calls when a
// dependency of the item changed (a service's configuration file, say),
// once per walk, and never in a dry run. Guards, if any, are evaluated
// then too and may still skip the run, and verify it after.
//
// Processes. Argv runs as is, without a shell: Argv[0] is looked up in
// the command's PATH (not the agent's) unless it holds a slash (a
// relative one is then relative to Dir); relative PATH entries are
// ignored. With Shell set, Argv[0] is a script for CommandShell
// ("/bin/sh -c Argv[0] sh Argv[1:]..."), and so are Unless and OnlyIf:
// Argv[1:] become the script's $1, $2, ... Pass values that way, never by
// pasting them into the script: a value with a quote, a space, a ";" or a
// "$(...)" pasted into a script is a shell injection. Guard commands run
// with the program's Env, Dir and Timeout.
//
// Environment: Env is the whole environment of the processes; the
// agent's environment is not inherited (its secrets, proxies and locale
// would leak into commands and make them behave differently from one
// host to another), except PATH: when Env sets no PATH, the processes get
// the agent's, or DefaultCommandPath when the agent has none. No HOME, no
// LANG: programs see the C locale unless Env says otherwise.
//
// Working directory: Dir, a directory inside the root, resolved like
// every path of hostcfg (an escape through ".." or a symbolic link is an
// *EscapeError); "" is the root's directory. The process is started in
// the very directory that was opened through the root (on Linux, through
// /proc/self/fd), so a directory swapped for a link after the check
// cannot move it outside. The root confines hostcfg's paths, not the
// program: it runs on the host with the agent's privileges and can reach
// any file it is allowed to. Argv[0] is a host program, not one inside
// the root, and Creates names <root>/<Creates>, so a command that creates
// it must be given the host path (Root.Dir() joined with Creates; the
// same path on a device, whose root is "/").
//
// Standard input is empty (/dev/null). Standard output and error go to
// one pipe; the last 20 lines (at most 4 KiB) of a process that fails are
// in its *CommandError, secret values redacted. A value is secret when
// its environment key is secret by converge.IsSecretEnv (PASSWORD, TOKEN,
// SECRET, API_KEY, ... or ending in _KEY, _PASS, _DSN, ...), SecretEnv
// listing the others; the password of any URL with credentials in Env,
// Argv, Unless or OnlyIf is secret too.
//
// Each process runs in a process group of its own. On timeout (Timeout,
// DefaultCommandTimeout when 0) and on cancellation of the context, the
// whole group is killed with SIGKILL, and so is whatever the group still
// holds once its leader exited: a command leaves no process behind (start
// daemons through a service manager). A process that leaves the group
// (setsid, setpgid) escapes this, and its output is not waited for more
// than two seconds. Commands run only on Linux; elsewhere they fail with
// ErrCommandUnsupported.
//
// A Command has no clean state: what a program did cannot be undone, so
// it cannot be marked Absent (the graph refuses it with
// converge.ErrNoClean).
//
// The zero value has no Root and fails; set Root, Name, Argv and a guard
// (or RefreshOnly) at least.
type Command struct {
	// Root resolves Dir and Creates.
	Root *Root
	// Name names the item: its ID is "command:" + Name. Required; no
	// control characters.
	Name string
	// Argv is the program and its arguments, or with Shell the script and
	// its positional parameters. Required.
	Argv []string
	// Shell runs Argv, Unless and OnlyIf as scripts of CommandShell (see
	// Command on quoting).
	Shell bool
	// Env is the whole environment of the processes, "KEY=value" each,
	// keys unique. The agent's is not inherited but for PATH.
	Env []string
	// SecretEnv lists environment keys whose values are secret on top of
	// those converge.IsSecretEnv matches; their values are redacted from
	// errors.
	SecretEnv []string
	// Dir is the working directory, inside the root; "" (or "/") is the
	// root's directory.
	Dir string
	// Timeout bounds each process; 0 means DefaultCommandTimeout.
	Timeout time.Duration
	// Creates is a path inside the root: when it exists, the item is
	// converged.
	Creates string
	// Unless is a guard command: when it succeeds, the item is converged.
	Unless []string
	// OnlyIf is a guard command: when it fails, the item is converged.
	OnlyIf []string
	// RefreshOnly makes the item run its program only from Refresh, when
	// a dependency changed; it is otherwise always converged.
	RefreshOnly bool
}

// CommandState is the state of a Command.
type CommandState struct {
	// Name is the item's Name.
	Name string
	// Converged reports whether a guard holds (always, for a RefreshOnly
	// item, and on the state ApplyDry returns). Check compares nothing
	// else.
	Converged bool
	// Reason says what the guards found ("/var/lib/app/.done exists",
	// "Unless exited with code 1; OnlyIf succeeded"), or "refresh-only".
	Reason string
	// Ran is set on the state Apply or Refresh returns when the program
	// ran; StateCurrent never sets it.
	Ran bool
	// Dry is set on the state ApplyDry returns: the program would run.
	Dry bool
	// Changed lists, on the state Refresh returns, the dependencies whose
	// change it acted on.
	Changed []converge.ID
}

var _ converge.Item[CommandState] = (*Command)(nil)

// ID returns "command:" and the Name.
func (c *Command) ID() converge.ID { return converge.ID("command:" + c.Name) }

// Validate checks the item's fields without running anything or looking
// at the file system: it returns an *ItemError (ErrInvalidItem) naming the
// field at fault, or an *EscapeError for a Dir or Creates that climbs out
// of the root with "..". A symbolic link leading out is found when the
// path is resolved, in StateCurrent. Every method of the item validates
// first.
func (c *Command) Validate() error {
	fail := func(format string, args ...any) error {
		return &ItemError{Item: string(c.ID()), Reason: fmt.Sprintf(format, args...)}
	}
	if c.Root == nil || c.Root.r == nil {
		return fail("Root is nil")
	}
	if c.Name == "" {
		return fail("Name is empty")
	}
	if !utf8.ValidString(c.Name) || strings.ContainsFunc(c.Name, unicode.IsControl) {
		return fail("Name %q has control characters or invalid UTF-8", c.Name)
	}
	if len(c.Argv) == 0 {
		return fail("Argv is empty")
	}
	for _, f := range []struct {
		field string
		argv  []string
	}{{"Argv", c.Argv}, {"Unless", c.Unless}, {"OnlyIf", c.OnlyIf}} {
		if err := checkArgv(f.argv); err != "" {
			return fail("%s%s", f.field, err)
		}
	}
	keys := map[string]bool{}
	for i, kv := range c.Env {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return fail("Env[%d] is not KEY=value", i)
		case strings.IndexByte(kv, 0) >= 0:
			return fail("Env[%d] (%s) contains a NUL byte", i, k)
		case keys[k]:
			return fail("Env sets %s twice", k)
		}
		keys[k] = true
	}
	if c.Timeout < 0 {
		return fail("Timeout %v is negative", c.Timeout)
	}
	if c.Dir != "" && c.Dir != "/" {
		if _, err := cleanPath(c.Dir); err != nil {
			return err
		}
	}
	if c.Creates != "" {
		if _, err := cleanPath(c.Creates); err != nil {
			return err
		}
	}
	if !c.RefreshOnly && c.Creates == "" && len(c.Unless) == 0 && len(c.OnlyIf) == 0 {
		return fail("command has no guard: set Creates, Unless or OnlyIf, or RefreshOnly (an unguarded command would run on every pass)")
	}
	return nil
}

// checkArgv returns what is wrong with an argv ("" when nothing); an
// empty argv is a guard left unset.
func checkArgv(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	if argv[0] == "" {
		return "[0] is empty"
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Sprintf("[%d] contains a NUL byte", i)
		}
	}
	return ""
}

func (c *Command) hasGuards() bool {
	return c.Creates != "" || len(c.Unless) > 0 || len(c.OnlyIf) > 0
}

// StateCurrent evaluates the guards (see Command); it runs Unless and
// OnlyIf, which must only read. A RefreshOnly item runs nothing here. It
// returns an error wrapping converge.ErrStateUnknown when a guard command
// must run and Dir does not exist yet (a predecessor creates it).
func (c *Command) StateCurrent(ctx context.Context, _ converge.DepStates) (CommandState, error) {
	if err := c.Validate(); err != nil {
		return CommandState{}, err
	}
	if c.RefreshOnly {
		// The paths are still resolved, so that an escape shows now.
		if _, err := c.workDir(); err != nil {
			return CommandState{}, err
		}
		if c.Creates != "" {
			if _, _, err := c.created(); err != nil {
				return CommandState{}, err
			}
		}
		return CommandState{Name: c.Name, Converged: true, Reason: "refresh-only"}, nil
	}
	return c.evaluate(ctx, true)
}

// StateGoal is the item converged.
func (c *Command) StateGoal(context.Context, converge.DepStates) (CommandState, error) {
	if err := c.Validate(); err != nil {
		return CommandState{}, err
	}
	return CommandState{Name: c.Name, Converged: true}, nil
}

// Check requires Apply when target is converged (a goal always is) and
// current is not: no guard holds.
func (c *Command) Check(_ context.Context, current, target CommandState) (converge.Decision, error) {
	if target.Converged && !current.Converged {
		return converge.Required(1), nil
	}
	return converge.NotRequired(), nil
}

// Apply evaluates the guards again and, when none holds, runs the
// program, then evaluates them once more: a program that fails, or that
// leaves every guard unconverged, fails with a *CommandError. A
// RefreshOnly item runs nothing here.
func (c *Command) Apply(ctx context.Context, _, _ CommandState) (CommandState, error) {
	if err := c.Validate(); err != nil {
		return CommandState{}, err
	}
	if c.RefreshOnly {
		return CommandState{Name: c.Name, Converged: true, Reason: "refresh-only"}, nil
	}
	return c.runGuarded(ctx)
}

// ApplyDry runs nothing, guards included: it returns the state the run
// would reach (Converged, Dry).
func (c *Command) ApplyDry(_ context.Context, current, _ CommandState) (CommandState, error) {
	if err := c.Validate(); err != nil {
		return CommandState{}, err
	}
	if c.RefreshOnly {
		return CommandState{Name: c.Name, Converged: true, Reason: "refresh-only"}, nil
	}
	reason := "dry run: the program would run"
	if current.Reason != "" {
		reason += " (" + current.Reason + ")"
	}
	return CommandState{Name: c.Name, Converged: true, Dry: true, Reason: reason}, nil
}

// runGuarded runs the program unless a guard holds, and verifies the
// guards after the run; without guards (a RefreshOnly item's Refresh) it
// only runs the program.
func (c *Command) runGuarded(ctx context.Context) (CommandState, error) {
	if c.hasGuards() {
		st, err := c.evaluate(ctx, false)
		if err != nil {
			return CommandState{}, err
		}
		if st.Converged {
			return st, nil
		}
	}
	if err := c.run(ctx, "Argv", c.Argv, false).err(c); err != nil {
		return CommandState{}, err
	}
	if !c.hasGuards() {
		return CommandState{Name: c.Name, Converged: true, Ran: true, Reason: "ran"}, nil
	}
	st, err := c.evaluate(ctx, false)
	if err != nil {
		return CommandState{}, err
	}
	if !st.Converged {
		return CommandState{}, &CommandError{Role: "Argv", Program: c.redactor().string(c.program()), Reason: c.notConverged(), Err: converge.ErrNotConverged}
	}
	st.Ran = true
	return st, nil
}

// evaluate runs the guards in order, stopping at the first that holds.
// discover tells StateCurrent's evaluation, where a missing Dir makes the
// state unknown rather than an error.
func (c *Command) evaluate(ctx context.Context, discover bool) (CommandState, error) {
	st := CommandState{Name: c.Name}
	var findings []string
	done := func(reason string) (CommandState, error) {
		st.Converged = true
		st.Reason = reason
		return st, nil
	}
	if _, err := c.workDir(); err != nil {
		return CommandState{}, err
	}
	if c.Creates != "" {
		name, exists, err := c.created()
		if err != nil {
			return CommandState{}, err
		}
		if exists {
			return done(name + " exists")
		}
		findings = append(findings, name+" is missing")
	}
	for _, g := range []struct {
		field string
		argv  []string
		holds func(code int) bool
	}{
		{"Unless", c.Unless, func(code int) bool { return code == 0 }},
		{"OnlyIf", c.OnlyIf, func(code int) bool { return code != 0 }},
	} {
		if len(g.argv) == 0 {
			continue
		}
		res := c.run(ctx, g.field, g.argv, discover)
		if res.unknown != nil {
			return CommandState{}, res.unknown
		}
		if res.exit < 0 {
			return CommandState{}, res.err(c)
		}
		found := g.field + " succeeded"
		if res.exit != 0 {
			found = fmt.Sprintf("%s exited with code %d", g.field, res.exit)
		}
		if g.holds(res.exit) {
			return done(found)
		}
		findings = append(findings, found)
	}
	st.Reason = strings.Join(findings, "; ")
	return st, nil
}

// notConverged says why the guards are not converged after a run ("did
// not create /x; Unless still fails"): every guard was evaluated, since
// none held.
func (c *Command) notConverged() string {
	var parts []string
	if c.Creates != "" {
		parts = append(parts, "did not create "+canonical(c.Creates))
	}
	if len(c.Unless) > 0 {
		parts = append(parts, "Unless still fails")
	}
	if len(c.OnlyIf) > 0 {
		parts = append(parts, "OnlyIf still succeeds")
	}
	return strings.Join(parts, "; ")
}

// created resolves Creates and reports whether something is there
// (following links: a dangling link is missing).
func (c *Command) created() (name string, exists bool, err error) {
	name, err = cleanPath(c.Creates)
	if err != nil {
		return "", false, err
	}
	_, fi, err := c.Root.resolveInfo(name, true)
	if err != nil {
		return "", false, err
	}
	return name, fi != nil, nil
}

// workDir resolves Dir: its canonical name ("/" for the root) and its
// root-relative path ("." for the root).
func (c *Command) workDir() (cmdDir, error) {
	if c.Dir == "" || c.Dir == "/" {
		return cmdDir{name: "/", rel: "."}, nil
	}
	name, rel, err := resolveItem(c.Root, c.Dir, true)
	if err != nil {
		return cmdDir{}, err
	}
	return cmdDir{name: name, rel: rel}, nil
}

// cmdDir is a resolved working directory.
type cmdDir struct{ name, rel string }

// program is what Program of a CommandError names: Argv[0], or the shell.
func (c *Command) program() string {
	if c.Shell {
		return CommandShell
	}
	return c.Argv[0]
}

// procSpec is one process to run.
type procSpec struct {
	path    string   // the program's host path
	args    []string // argv, args[0] included
	env     []string
	root    *Root
	dir     cmdDir
	timeout time.Duration
}

// procResult is how a process ended.
type procResult struct {
	// exit is the exit code, -1 when the process did not exit by itself
	// (it did not start, was killed by a signal, timed out or was
	// cancelled).
	exit int
	// signal is the signal that killed it, if any.
	signal string
	// timedOut and cancelled tell why it was killed.
	timedOut  bool
	cancelled error
	// output is the tail of the raw combined output (commandKeepBytes).
	output []byte
	// startErr is why it did not start.
	startErr error
}

// runResult is a procResult with what it takes to describe it.
type runResult struct {
	procResult
	role, program string
	timeout       time.Duration
	// unknown is set instead when the process could not run because Dir
	// does not exist yet, in discovery.
	unknown error
}

// run runs argv (of the field role) with the item's environment,
// directory and timeout.
func (c *Command) run(ctx context.Context, role string, argv []string, discover bool) runResult {
	res := runResult{role: role, program: argv[0], timeout: c.timeout()}
	args := argv
	if c.Shell {
		res.program = CommandShell
		args = append([]string{CommandShell, "-c", argv[0], "sh"}, argv[1:]...)
	}
	d, err := c.workDir()
	if err == nil {
		var fi fs.FileInfo
		fi, err = c.Root.r.Stat(d.rel)
		switch {
		case errors.Is(err, fs.ErrNotExist) && discover:
			res.unknown = &PathError{Op: "chdir", Path: d.name, Err: fmt.Errorf("%w: the working directory does not exist yet: %w", converge.ErrStateUnknown, fs.ErrNotExist)}
			return res
		case err != nil:
			err = c.Root.fail("chdir", d.name, err)
		case !fi.IsDir():
			err = wrongType("chdir", d.name, fi.Mode())
		}
	}
	if err != nil {
		res.exit, res.startErr = -1, err
		return res
	}
	env := c.environ()
	path, err := lookPath(args[0], envValue(env, "PATH"))
	if err != nil {
		res.exit, res.startErr = -1, err
		return res
	}
	res.procResult = runProcess(ctx, procSpec{path: path, args: args, env: env, root: c.Root, dir: d, timeout: res.timeout})
	return res
}

func (c *Command) timeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultCommandTimeout
	}
	return c.Timeout
}

// environ is Env with PATH added when Env has none.
func (c *Command) environ() []string {
	env := slices.Clone(c.Env)
	if env == nil {
		env = []string{} // nil would make os/exec inherit the agent's
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		p := os.Getenv("PATH")
		if p == "" {
			p = DefaultCommandPath
		}
		env = append(env, "PATH="+p)
	}
	return env
}

// envValue returns the value of key in env ("" when unset).
func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// lookPath finds the program name in the directories of pathList, the
// command's own PATH (exec.LookPath would use the agent's). A name with a
// slash is used as it is; relative PATH entries are skipped.
func lookPath(name, pathList string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, d := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %q", name, pathList)
}

// err returns the *CommandError of a run that did not succeed, nil when
// it exited with code 0.
func (r runResult) err(c *Command) error {
	if r.exit == 0 {
		return nil
	}
	red := c.redactor()
	e := &CommandError{
		Role:     r.role,
		Program:  red.string(r.program),
		ExitCode: r.exit,
		Signal:   r.signal,
		TimedOut: r.timedOut,
		Output:   red.tail(r.output),
	}
	switch {
	case r.startErr != nil:
		e.Err = r.startErr
	case r.timedOut:
		e.Timeout = r.timeout
		e.Err = context.DeadlineExceeded
	case r.cancelled != nil:
		e.Err = r.cancelled
	}
	return e
}

// CommandError reports a process of a Command that did not succeed, or a
// program that ran but left every guard unconverged. It matches
// ErrCommandFailed in the first case and converge.ErrNotConverged in the
// second; errors.Is also finds context.DeadlineExceeded on a timeout and
// context.Canceled on a cancellation. Its strings carry no secret value
// (see Command): they are redacted as "[redacted]".
type CommandError struct {
	// Role is the field of the Command whose process this is: "Argv" (the
	// program), "Unless" or "OnlyIf".
	Role string
	// Program is the process's Argv[0], or CommandShell with Shell set.
	Program string
	// ExitCode is the exit code; -1 when the process did not exit by
	// itself (it did not start, or was killed).
	ExitCode int
	// Signal names the signal that killed the process ("killed"), if any.
	Signal string
	// TimedOut reports that the process ran longer than Timeout, the
	// bound it had, and its process group was killed.
	TimedOut bool
	Timeout  time.Duration
	// Output is at most the last 20 lines and 4 KiB of the process's
	// combined standard output and error, secrets redacted.
	Output string
	// Reason says, for a program that left its guards unconverged, which
	// ("did not create /var/lib/app/.done").
	Reason string
	// Err is the cause: why the process did not start, the context's
	// error on a timeout or cancellation, converge.ErrNotConverged; nil
	// for a process that exited with a non-zero code or was killed by a
	// signal from elsewhere.
	Err error
}

// Error describes the problem, naming the process at fault; the item is
// named by the walk's *converge.ItemError.
func (e *CommandError) Error() string {
	var b strings.Builder
	b.WriteString("hostcfg: ")
	if e.Role != "" && e.Role != "Argv" {
		b.WriteString(e.Role + " ")
	}
	fmt.Fprintf(&b, "command %q ", e.Program)
	switch {
	case errors.Is(e.Err, converge.ErrNotConverged):
		fmt.Fprintf(&b, "succeeded but %s: %s", e.Reason, "not converged")
	case e.TimedOut:
		fmt.Fprintf(&b, "timed out after %v; its process group was killed", e.Timeout)
	case e.Err != nil && (errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded)):
		fmt.Fprintf(&b, "was cancelled (%s); nothing of it is left running", message(e.Err))
	case e.Err != nil:
		fmt.Fprintf(&b, "did not start: %s", message(e.Err))
	case e.Signal != "":
		fmt.Fprintf(&b, "was killed by signal %q", e.Signal)
	default:
		fmt.Fprintf(&b, "exited with code %d", e.ExitCode)
	}
	if e.Output != "" {
		b.WriteString("; last lines of its output:\n" + e.Output)
	}
	return b.String()
}

// Is makes CommandError match ErrCommandFailed, unless the program ran
// and only its guards did not converge.
func (e *CommandError) Is(target error) bool {
	return target == ErrCommandFailed && !errors.Is(e.Err, converge.ErrNotConverged)
}

// Unwrap returns the cause, if any.
func (e *CommandError) Unwrap() error { return e.Err }

// commandRedactor lists the secret values of a Command, longest first.
type commandRedactor []string

func (c *Command) redactor() commandRedactor {
	var r commandRedactor
	add := func(v string) {
		if v != "" && !slices.Contains(r, v) {
			r = append(r, v)
		}
	}
	addURLs := func(v string) {
		for _, pw := range converge.URLPasswords(v) {
			add(pw)
		}
	}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		if converge.IsSecretEnv(k, c.SecretEnv) {
			add(v)
		}
		addURLs(v)
	}
	for _, argv := range [][]string{c.Argv, c.Unless, c.OnlyIf} {
		for _, a := range argv {
			addURLs(a)
		}
	}
	// Longest first, so a secret holding another is replaced whole.
	sort.SliceStable(r, func(i, j int) bool { return len(r[i]) > len(r[j]) })
	return r
}

// string replaces the secrets in s, and the password of any URL.
func (r commandRedactor) string(s string) string {
	for _, v := range r {
		s = strings.ReplaceAll(s, v, redacted)
	}
	return converge.RedactURLs(s)
}

// tail redacts the raw output, then keeps its last commandTailLines lines
// and commandTailBytes bytes (whole lines when it cuts), valid UTF-8,
// without the final line end. Redacting first keeps a secret that the cut
// would split from showing in part.
func (r commandRedactor) tail(raw []byte) string {
	s := r.string(strings.ToValidUTF8(string(raw), "\uFFFD"))
	s = strings.TrimRight(s, "\n")
	if len(s) > commandTailBytes {
		s = s[len(s)-commandTailBytes:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
		s = strings.ToValidUTF8(s, "")
	}
	if n := strings.Count(s, "\n"); n >= commandTailLines {
		for range n - commandTailLines + 1 {
			s = s[strings.IndexByte(s, '\n')+1:]
		}
	}
	return s
}

// tailBuffer keeps the last max bytes written to it. It is written by one
// goroutine and read once that goroutine is done.
type tailBuffer struct {
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) bytes() []byte {
	if len(t.buf) > t.max {
		return t.buf[len(t.buf)-t.max:]
	}
	return t.buf
}
