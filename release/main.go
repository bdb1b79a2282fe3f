// Command release makes a release of every module of this repository in
// lockstep, as River and opentelemetry-go do: one version for all.
//
// From the repository root, on a clean tree:
//
//	go run ./release -version v0.2.0
//
// rewrites every requirement of one module of the repository on another to
// v0.2.0, turns the "## Unreleased" section of CHANGELOG.md into the
// entry of v0.2.0 followed by the subjects of the commits since the
// previous release, runs the tests (the command README gives), commits,
// and tags every published module following Go's rule for modules in
// subdirectories: v0.2.0 for the core, docker/v0.2.0, pgstore/v0.2.0, and
// so on. Push the commit and the tags with `git push --follow-tags` (or
// `git push origin main <tags>`).
//
// Other modes:
//
//	go run ./release -check           # the modules require each other at one version
//	go run ./release -proxy DIR       # write a GOPROXY=file://DIR proxy: the tree, its dependencies, DIR/go.sum
//	go run ./release -version V -dry-run
//
// The bench and release modules are tools of the repository: they are
// not tagged. A command module (convergectl), which users install with
// `go install <module>@<version>`, is tagged with a go.mod without its
// replace lines, since go install refuses them; a second commit after the
// tags puts them back, for building it alone in the repository.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "", "the version to release, e.g. v0.2.0")
	check := fs.Bool("check", false, "only check that the modules require each other at one version")
	proxy := fs.String("proxy", "", "only write a module proxy directory of the working tree at its current version")
	dry := fs.Bool("dry-run", false, "say what a release would change, and change nothing")
	skipTests := fs.Bool("skip-tests", false, "do not run the tests before tagging (for a tree whose tests just passed)")
	root := fs.String("C", ".", "the repository root")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("release: unexpected argument %q", fs.Arg(0))
	}
	mods, err := readModules(*root)
	if err != nil {
		return err
	}
	current, err := lockstepVersion(mods)
	if err != nil {
		return err
	}
	switch {
	case *check:
		fmt.Fprintf(stdout, "every module requires its siblings at %s\n", current)
		return nil
	case *proxy != "":
		paths, err := writeProxy(*root, *proxy, current, time.Now())
		if err != nil {
			return err
		}
		for _, p := range paths {
			fmt.Fprintf(stdout, "%s@%s\n", p, current)
		}
		return nil
	case *version == "":
		return errors.New("release: -version is required (or -check, -proxy)")
	}
	return release(releaseArgs{
		root: *root, mods: mods, current: current, version: *version,
		dry: *dry, tests: !*skipTests, now: time.Now(), out: stdout,
	})
}

type releaseArgs struct {
	root, current, version string
	mods                   []workModule
	dry, tests             bool
	now                    time.Time
	out                    io.Writer
}

func release(a releaseArgs) error {
	v := a.version
	if !semver.IsValid(v) || semver.Canonical(v) != v {
		return fmt.Errorf("release: version %q is not a canonical semantic version like v0.2.0", v)
	}
	prev, err := latestTag(a.root)
	if err != nil {
		return err
	}
	if prev != "" && semver.Compare(v, prev) <= 0 {
		return fmt.Errorf("release: version %s is not above the latest release %s", v, prev)
	}
	if semver.Compare(v, a.current) < 0 {
		return fmt.Errorf("release: version %s is below the version the modules require, %s", v, a.current)
	}
	if out, err := git(a.root, "status", "--porcelain"); err != nil {
		return err
	} else if strings.TrimSpace(out) != "" {
		return fmt.Errorf("release: the tree is not clean; commit or stash first:\n%s", out)
	}

	gomods, err := setVersion(a.mods, v)
	if err != nil {
		return err
	}
	var commits []string
	if prev != "" {
		out, err := git(a.root, "log", "--no-merges", "--format=%s", prev+"..HEAD")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l != "" {
				commits = append(commits, l)
			}
		}
	}
	clPath := filepath.Join(a.root, "CHANGELOG.md")
	cl, err := os.ReadFile(clPath)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	newCL, err := changelogEntry(string(cl), v, a.now.UTC().Format("2006-01-02"), commits)
	if err != nil {
		return err
	}
	var tags []string
	for _, m := range a.mods {
		if m.Published {
			tags = append(tags, m.Tag(v))
		}
	}
	// A command is tagged without its replace lines, and gets them back
	// in the commit after the tags.
	restored := map[string][]byte{}
	for _, m := range a.mods {
		if !m.Command {
			continue
		}
		data, ok := gomods[m.Dir]
		if !ok {
			data = m.raw
		}
		tagged, err := taggedGoMod(m, data)
		if err != nil {
			return err
		}
		if !bytes.Equal(tagged, data) {
			gomods[m.Dir], restored[m.Dir] = tagged, data
		}
	}
	if a.dry {
		for dir := range gomods {
			fmt.Fprintf(a.out, "would set sibling requirements in %s/go.mod to %s\n", dir, v)
		}
		for dir := range restored {
			fmt.Fprintf(a.out, "would tag %s/go.mod without its replace lines and put them back in a commit after the tags\n", dir)
		}
		fmt.Fprintf(a.out, "would add the %s entry to CHANGELOG.md with %d commits\n", v, len(commits))
		fmt.Fprintf(a.out, "would tag %s\n", strings.Join(tags, " "))
		return nil
	}

	restore := func() {
		_, _ = git(a.root, "checkout", "--", ".")
	}
	for dir, data := range gomods {
		if err := os.WriteFile(filepath.Join(a.root, dir, "go.mod"), data, 0o644); err != nil {
			restore()
			return fmt.Errorf("release: %w", err)
		}
	}
	if err := os.WriteFile(clPath, []byte(newCL), 0o644); err != nil {
		restore()
		return fmt.Errorf("release: %w", err)
	}
	if a.tests {
		cmd := exec.Command("go", "test", "-race", "-count=1", "work")
		cmd.Dir = a.root
		cmd.Stdout, cmd.Stderr = a.out, a.out
		if err := cmd.Run(); err != nil {
			restore()
			return fmt.Errorf("release: the tests failed, nothing was committed or tagged: %w", err)
		}
	}
	if _, err := git(a.root, "commit", "-a", "-m", "release: "+v); err != nil {
		restore()
		return err
	}
	for _, t := range tags {
		if _, err := git(a.root, "tag", "-a", t, "-m", "converge "+t); err != nil {
			return err
		}
		fmt.Fprintln(a.out, "tagged", t)
	}
	if len(restored) == 0 {
		return nil
	}
	var dirs []string
	for dir, data := range restored {
		if err := os.WriteFile(filepath.Join(a.root, dir, "go.mod"), data, 0o644); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	_, err = git(a.root, "commit", "-a", "-m", "release: "+strings.Join(dirs, ", ")+" builds alone in the repository again (replace lines back after tagging "+v+")")
	return err
}

// latestTag returns the highest release tag of the core module (vX.Y.Z at
// the top level), or "" when there is none.
func latestTag(root string) (string, error) {
	out, err := git(root, "tag", "--list", "v*")
	if err != nil {
		return "", err
	}
	best := ""
	for _, t := range strings.Fields(out) {
		if semver.IsValid(t) && (best == "" || semver.Compare(t, best) > 0) {
			best = t
		}
	}
	return best, nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("release: git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}
