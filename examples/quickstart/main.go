// Command quickstart shows converge at work on host configuration, with no
// services needed: a dry run with diffs, an apply with progress and the
// graph it walked, a second apply that changes nothing, and a clean.
//
// It works in a temporary directory standing for a device's root file
// system, on a graph of hostcfg items (a directory, files in it, a
// symlink, keys of a Raspberry Pi config.txt, a line of /etc/hosts), and
// prints the graph as Mermaid text.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/examples/internal/cli"
	"github.com/convergekit/converge/hostcfg"
)

func main() {
	cli.Parse("quickstart", "", "Builds a graph of host configuration items in a temporary directory standing for a\n"+
		"device's root file system, and prints a dry run with diffs, an apply with progress, the\n"+
		"graph as Mermaid, a second apply that changes nothing, and a clean. It needs no services.")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// deviceFiles is what the pretend device has before the first run.
var deviceFiles = map[string]string{
	"boot/firmware/config.txt": "# Raspberry Pi configuration\ndtparam=audio=on\ncamera_auto_detect=1\n\n[pi4]\narm_boost=1\n\n[all]\nenable_uart=1\n",
	"etc/hosts":                "127.0.0.1\tlocalhost\n127.0.1.1\traspberrypi\n",
}

// run does the whole demonstration in a temporary directory, removed at
// the end, and writes what happens to out.
func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "converge-quickstart-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for name, content := range deviceFiles {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	root, err := hostcfg.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	fmt.Fprintf(out, "device root: %s\n", dir)

	g := buildGraph(root)
	walker, err := converge.NewWalker(converge.WalkerConfig{Observer: progress(out)})
	if err != nil {
		return err
	}
	quiet, err := converge.NewWalker(converge.WalkerConfig{})
	if err != nil {
		return err
	}

	section(out, "1. dry run: what would change (nothing is written)")
	rep, err := quiet.ApplyDry(ctx, g)
	if err != nil {
		return err
	}
	for _, d := range hostcfg.Diffs(rep) {
		fmt.Fprintf(out, "%s\n%s", d.ID, indent(d.Diff))
	}
	headline, _, _ := strings.Cut(rep.Summary(), "\n")
	fmt.Fprintln(out, headline)

	section(out, "2. apply, with progress")
	rep, err = walker.Apply(ctx, g)
	if err != nil {
		return err
	}
	fmt.Fprint(out, rep.Summary())
	fmt.Fprintln(out, "\nthe graph, colored by this apply (Mermaid: paste it into Markdown to see it):")
	if err := g.WriteMermaid(out, rep); err != nil {
		return err
	}

	section(out, "3. apply again: already converged")
	rep, err = quiet.Apply(ctx, g)
	if err != nil {
		return err
	}
	fmt.Fprint(out, rep.Summary())

	section(out, "4. clean: remove what the graph manages")
	rep, err = quiet.Clean(ctx, g)
	if err != nil {
		return err
	}
	fmt.Fprint(out, rep.Summary())
	return nil
}

// buildGraph declares the configuration: an application directory with a
// config file, a secret and a symlink, three config.txt settings and the
// host name in /etc/hosts.
func buildGraph(root *hostcfg.Root) *converge.Graph {
	g := converge.NewGraph()
	appDir := &hostcfg.Dir{Root: root, Path: "/etc/app", Mode: 0o755}
	conf := &hostcfg.File{Root: root, Path: "/etc/app/app.conf", Content: []byte("listen = :8080\nlog_level = info\n")}
	env := &hostcfg.File{Root: root, Path: "/etc/app/env", Content: []byte("TOKEN=s3cret\n"), Mode: 0o600, Sensitive: true}
	current := &hostcfg.Symlink{Root: root, Path: "/etc/app/current.conf", Target: "app.conf"}
	g.Add(appDir.Node(), converge.Present)
	g.Add(conf.Node(), converge.Present, appDir.ID())
	g.Add(env.Node(), converge.Present, appDir.ID())
	g.Add(current.Node(), converge.Present, conf.ID())

	boot := hostcfg.NewConfigFile(root, "/boot/firmware/config.txt")
	g.Add(boot.Key("", "gpu_mem", "128").Node(), converge.Present)
	g.Add(boot.Key("pi4", "arm_boost", "0").Node(), converge.Present)
	g.Add(boot.Entry("", "dtoverlay", "i2c-rtc,ds3231").Node(), converge.Present)

	hosts := &hostcfg.Line{Root: root, Path: "/etc/hosts", Line: "127.0.1.1 edge-01", Replace: regexp.MustCompile(`^127\.0\.1\.1\s`)}
	g.Add(hosts.Node(), converge.Present)
	return g
}

// progress draws one line per finished item, numbered as they finish
// (independent items run in parallel, so the order varies).
func progress(out io.Writer) converge.Observer {
	done := 0
	return converge.ObserverFunc(func(e converge.Event) {
		switch e.Kind {
		case converge.EventDone, converge.EventFailed, converge.EventSkipped:
			done++
			fmt.Fprintf(out, "  [%d] %-9s %s\n", done, e.Outcome, e.ID)
		}
	})
}

func section(out io.Writer, title string) {
	fmt.Fprintf(out, "\n== %s ==\n", title)
}

func indent(s string) string {
	lines := strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
	return "    " + strings.Join(lines, "    ") + "\n"
}
