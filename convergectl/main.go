package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// Exit codes, as the package documentation gives them.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env is what a command writes to and reads the time from.
type env struct {
	out, errOut io.Writer
	now         time.Time
}

// command is one subcommand.
type command struct {
	name    string
	args    string // the positional arguments, for the usage line
	short   string // one line for the list of commands; "" means summary
	summary string
	// write says the command changes the store: it opens it for writing.
	write bool
	// flags registers the command's own flags.
	flags func(fs *flag.FlagSet)
	// nargs is the number of positional arguments it takes.
	nargs int
	run   func(ctx context.Context, e *env, c *common, args []string) error
}

var commands []*command

func register(c *command) { commands = append(commands, c) }

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{out: stdout, errOut: stderr, now: time.Now()}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			if c := findCommand(args[1]); c != nil {
				fs, _ := c.flagSet(io.Discard)
				fs.SetOutput(stdout)
				fs.Usage()
				return exitOK
			}
		}
		usage(stdout)
		return exitOK
	}
	c := findCommand(args[0])
	if c == nil {
		err := &usageError{msg: fmt.Sprintf("unknown command %q (convergectl -h lists them)", args[0])}
		report(stderr, false, err)
		return exitUsage
	}
	fs, com := c.flagSet(stderr)
	// The flag package would print the usage on -h and on a bad flag, to
	// stderr: print it once, here, to stdout when asked for.
	printUsage := fs.Usage
	fs.Usage = func() {}
	pos, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		printUsage()
		return exitOK
	}
	if err != nil {
		// The flag package printed the problem.
		printUsage()
		return exitUsage
	}
	if err := com.check(c, pos); err != nil {
		report(stderr, com.json(), err)
		return exitUsage
	}
	runCmd := c.run
	if com.watch {
		runCmd = func(ctx context.Context, e *env, com *common, args []string) error {
			return watch(ctx, e, c, com, args)
		}
	}
	if err := runCmd(ctx, e, com, pos); err != nil {
		if com.showSecrets && com.keyFile == "" && errors.Is(err, converge.ErrSealed) {
			err = &needKeyError{err: err}
		}
		report(stderr, com.json(), err)
		var ue *usageError
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitError
	}
	return exitOK
}

// flagSet returns the command's FlagSet, with the flags every command
// takes, and where they are parsed to.
func (c *command) flagSet(stderr io.Writer) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet("convergectl "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	com := &common{}
	com.register(fs, c.write)
	if c.flags != nil {
		c.flags(fs)
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: convergectl %s (--bolt FILE | --pg DSN) [flags]%s\n\n%s\n\nflags:\n", c.name, prefixed(" ", c.args), c.summary)
		fs.PrintDefaults()
	}
	return fs, com
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// parseInterspersed parses args with fs, letting flags come after the
// positional arguments too, and returns the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `convergectl looks into a converge store (a boltstore file or a PostgreSQL
database) and does what an operator does: release a halted object, abort or
retry a plan. It opens the store read-only unless the command changes it.

usage: convergectl COMMAND (--bolt FILE | --pg DSN) [flags] [ARGS]

commands:
`)
	cs := append([]*command(nil), commands...)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].write == false && cs[j].write })
	for _, c := range cs {
		short := c.short
		if short == "" {
			short = firstLine(c.summary)
		}
		fmt.Fprintf(w, "  %-8s %-12s %s\n", c.name, c.args, short)
	}
	fmt.Fprint(w, `
Every command answers -h with its flags. Output is a table, or JSON or YAML with
-o json or -o yaml. No secret is printed unless asked with --show-secrets.
Exit codes: 0 done, 1 the command failed (the store, the object, the lock),
2 the command line is wrong.
`)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
