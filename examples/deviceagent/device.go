package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/hostcfg"
)

// Device is the agent's target, stored (sealed) in its store: the host's
// configuration, walked first, then the applications.
type Device struct {
	Host Host           `json:"host"`
	Apps docker.Project `json:"apps"`
}

// Host is the host stage: a directory of the applications' configuration
// with one file in it, and keys of the boot configuration (a Raspberry
// Pi's config.txt; changing one asks for a reboot, which the agent keeps
// pending until the device has rebooted).
type Host struct {
	// ConfigDir is the directory, under the agent's root.
	ConfigDir string `json:"config_dir"`
	// Greeting is the content of ConfigDir/greeting.
	Greeting string `json:"greeting,omitempty"`
	// Boot are keys of /boot/config.txt, in its [all] section.
	Boot map[string]string `json:"boot,omitempty"`
}

// hostBuild returns the build of the host stage, whose items resolve every
// path inside root.
func hostBuild(root *hostcfg.Root) converge.TargetBuildFunc[Host] {
	return func(_ context.Context, h Host) ([]converge.TargetStage, error) {
		g := converge.NewGraph()
		dir := &hostcfg.Dir{Root: root, Path: h.ConfigDir, Mode: 0o755}
		g.Add(dir.Node(), converge.Present)
		file := &hostcfg.File{Root: root, Path: h.ConfigDir + "/greeting", Content: []byte(h.Greeting), Mode: 0o644}
		g.Add(file.Node(), converge.Present, dir.ID())
		if len(h.Boot) > 0 {
			bootDir := &hostcfg.Dir{Root: root, Path: "/boot", Mode: 0o755}
			g.Add(bootDir.Node(), converge.Present)
			boot := hostcfg.NewConfigFile(root, "/boot/config.txt")
			for _, k := range slices.Sorted(maps.Keys(h.Boot)) {
				g.Add(boot.Key("all", k, h.Boot[k]).Node(), converge.Present, bootDir.ID())
			}
		}
		return []converge.TargetStage{{Name: "host", Graph: g}}, nil
	}
}

// builtin is the project the agent runs without -f: a database and a web
// service that waits for it to be healthy.
const builtin = `
name: deviceagent
services:
  db:
    image: IMAGE
    command: ["/app", "sleep"]
    environment:
      DB_PASSWORD: not-printed-anywhere
    volumes: [data:/data]
    healthcheck:
      test: ["CMD", "/app", "ok"]
      interval: 1s
  web:
    image: IMAGE
    command: ["/app", "serve"]
    environment:
      GREETING: hello
    depends_on:
      db: {condition: service_healthy, x-timeout: 60s}
volumes:
  data: {}
`

// device returns the target the agent starts from: the Compose file, or
// the built-in project running image, with the default host stage.
func device(ctx context.Context, file, image string) (Device, error) {
	var p *docker.Project
	var err error
	if file != "" {
		p, err = docker.LoadComposeFile(ctx, file, docker.LoadOptions{})
	} else {
		p, err = docker.LoadCompose(ctx, []byte(strings.ReplaceAll(builtin, "IMAGE", image)), docker.LoadOptions{})
	}
	if err != nil {
		return Device{}, err
	}
	return Device{
		Host: Host{ConfigDir: "/etc/" + p.Name, Greeting: "hello\n", Boot: map[string]string{"gpu_mem": "64"}},
		Apps: *p,
	}, nil
}

// printer prints what the agent does, one line per pass: the walks that
// changed something name the items they changed, and a pass that changed
// nothing says so ("verified, no change").
type printer struct {
	mu      sync.Mutex
	changed bool
}

func (p *printer) event(e converge.TargetEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Kind {
	case converge.TargetStateChanged:
		p.changed = true
		for _, it := range e.Report.Items {
			if it.Outcome != converge.OutcomeUnchanged {
				fmt.Printf("  %s: %s\n", it.ID, it.Outcome)
			}
		}
	case converge.TargetPassFinished:
		what := "verified, no change"
		if p.changed {
			what = "converged"
		}
		p.changed = false
		fmt.Printf("pass %d: %s in %s (revision %d)\n", e.Pass, what, e.Duration.Round(1e5), e.Revision)
	case converge.TargetPassFailed:
		p.changed = false
		fmt.Printf("pass %d failed (retry in %s): %v\n", e.Pass, e.Retry.Round(1e6), e.Err)
		if hint := pullHint(e.Err); hint != "" {
			fmt.Println(hint)
		}
	case converge.TargetActionRequired:
		fmt.Printf("host action required: %s\n", e.Action)
	}
}

// setTarget sets the target the Compose file describes, or, without one,
// resumes the stored target (the built-in project when none is stored),
// and returns the name of the target's project. It is
// TargetReconciler.LoadOrSet with the default made only when no target is
// stored: a resumed target is read from the store alone, and no Compose
// file is loaded at a restart.
func setTarget(ctx context.Context, r *converge.TargetReconciler[Device], file, image string) (string, error) {
	found := false
	if file == "" {
		var err error
		if found, err = r.Load(ctx); err != nil {
			return "", err
		}
	}
	if !found {
		def, err := device(ctx, file, image)
		if err != nil {
			return "", err
		}
		if err := r.SetTarget(ctx, def); err != nil {
			return "", err
		}
	}
	t, _ := r.Target()
	return t.Apps.Name, nil
}

// watch triggers a pass of r at every engine event of the containers of
// project until ctx is done, and once when the watch is in place, so that
// a change made before it is not missed.
func watch(ctx context.Context, eng docker.Engine, project string, r *converge.TargetReconciler[Device]) error {
	stop, err := docker.WatchEvents(ctx, eng, project, func(docker.Event) { r.Trigger() })
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopping before the watch was in place
		}
		return err
	}
	defer stop()
	r.Trigger()
	<-ctx.Done()
	return nil
}

// makeDirs creates the directories of the store and the key file (mode
// 0700) and the root of the host stage, where they are missing.
func makeDirs(o options) error {
	for _, d := range []string{filepath.Dir(o.state), filepath.Dir(o.keyFile)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	return os.MkdirAll(o.root, 0o755)
}

// startOver tells that the store was damaged and moved aside: the agent
// starts over from its default target (boltstore.Options.OnCorrupt).
func startOver(r boltstore.Recovery) {
	fmt.Fprintf(os.Stderr, "deviceagent: the store was damaged and is kept as %s; starting over: %v\n", r.MovedTo, r.Err)
}

// printStart says what the agent keeps converged, and the host actions
// still pending from before it started (a reboot asked for and not done).
func printStart(project string, revision uint64, pending []converge.PendingAction) {
	fmt.Printf("keeping %s converged (revision %d)\n", project, revision)
	for _, a := range pending {
		fmt.Printf("host action pending: %s\n", a)
	}
}

// pullHint says what to do about err when an image could not be pulled,
// or "" when err is not about a pull.
func pullHint(err error) string {
	var pe *docker.PullError
	if !errors.As(err, &pe) {
		return ""
	}
	return fmt.Sprintf("the engine cannot pull %s (no registry access?): load it on this machine "+
		"(docker load -i image.tar, or docker pull where a registry is reachable), or point -image "+
		"(or the Compose file) at an image the engine has", pe.Ref)
}
