// Command deviceagent keeps an edge device converged, as balena's
// supervisor does: a host stage and then a Compose project on the local
// Docker engine. docs/device-agent.md is its guide.
//
// The host stage is a configuration directory and file, and keys of the
// boot configuration /boot/config.txt. It repairs drift at once (a
// container stopped, killed or removed triggers a pass through the
// engine's events), checks everything again every -interval, and serves
// its status page, /metrics, /healthz and /readyz with -http.
//
// It REQUIRES a running Docker engine (DOCKER_HOST or the default socket).
// No registry is needed when the images are on the engine: -image names
// the image of the built-in project (a database and a web service), -f a
// Compose file to run instead.
//
// Usage:
//
//	deviceagent [-f compose.yaml] [-image ref] [-state file] [-key file] [-root dir] [-http addr] [-interval d]
//
// The target is kept in the embedded store -state, sealed with the keys of
// -key, a file kept apart from the store (created with a random key the
// first time; convergectl --key-file reads it): a restarted agent resumes
// its last target, and -f sets a new one. Sealing protects the target at
// rest (a copied store file, a backup) and never what the agent reads
// while it runs: whoever can read both files, or the engine's containers,
// reads the secrets. A damaged store (an SD card that lost power
// mid-write) is moved aside and the agent starts over from its default
// target.
//
// A boot key that changed asks for a reboot: the agent says so, and keeps
// the reboot pending (on its page, in converge_target_pending_actions)
// until the device has booted again, across restarts of the agent.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/docker/docker/client"
	"golang.org/x/sync/errgroup"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/examples/internal/cli"
	"github.com/convergekit/converge/hostcfg"
	"github.com/convergekit/converge/prometheus"
	"github.com/convergekit/converge/statuspage"
)

// options are the command line's.
type options struct {
	file, image, state, keyFile, root, addr string
	interval                                time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.file, "f", "", "Compose file to set as the new target (default: resume the stored target, or the built-in project)")
	flag.StringVar(&o.image, "image", "alpine:3.20", "image of the built-in project; it must be on the engine or pullable")
	flag.StringVar(&o.state, "state", defaultPath(os.UserCacheDir, "deviceagent.db"), "store file that keeps the target")
	flag.StringVar(&o.keyFile, "key", defaultPath(os.UserConfigDir, "deviceagent.key"), "file of the keys that seal the stored target, apart from the store")
	flag.StringVar(&o.root, "root", defaultPath(os.UserCacheDir, "deviceagent-root"), `root directory of the host stage ("/" on a device)`)
	flag.StringVar(&o.addr, "http", "", "serve the status page, /metrics, /healthz and /readyz on this address (host:port)")
	flag.DurationVar(&o.interval, "interval", 5*time.Minute, "check everything again this long after the last pass")
	cli.Parse("deviceagent", "[-f compose.yaml] [-image ref] [-state file] [-key file] [-root dir] [-http addr] [-interval d]",
		"Keeps a host stage and a Compose project converged on the local Docker engine, as an\nedge device agent would; it needs a running Docker engine.")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "deviceagent:", err)
		os.Exit(1)
	}
}

// run is the agent's wiring: the engine, the sealed store, the host's
// root, the builds of the two stages, the reconciler and its target, the
// engine's events, and the HTTP surface.
func run(ctx context.Context, o options) error {
	if err := makeDirs(o); err != nil {
		return err
	}
	eng, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer eng.Close()
	sealer, err := converge.OpenKeyFile(o.keyFile)
	if err != nil {
		return err
	}
	st, err := boltstore.Open(o.state, boltstore.Options{Sealer: sealer, OnCorrupt: startOver})
	if err != nil {
		return err
	}
	defer st.Close()
	root, err := hostcfg.OpenRoot(o.root)
	if err != nil {
		return err
	}
	defer root.Close()
	hashKey, err := docker.LoadHashKey(ctx, st, "deviceagent") // one key for every project of this agent
	if err != nil {
		return err
	}
	metrics, logger := &prometheus.Metrics{}, slog.New(slog.NewTextHandler(os.Stderr, nil))
	build := converge.JoinBuilds(converge.BuildPart(func(d Device) Host { return d.Host }, hostBuild(root)),
		converge.BuildPart(func(d Device) docker.Project { return d.Apps },
			docker.TargetBuild(eng, docker.Runtime{Metrics: metrics, Logger: logger, HashKey: hashKey})))
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[Device]{Build: build, Store: st,
		Interval: o.interval, Walk: converge.WalkerConfig{Metrics: metrics, Logger: logger}})
	if err != nil {
		return err
	}
	r.Subscribe((&printer{}).event)
	project, err := setTarget(ctx, r, o.file, o.image)
	if err != nil {
		return err
	}
	var loop statuspage.Loop
	g, ctx := errgroup.WithContext(ctx)
	if o.addr != "" {
		page := statuspage.WatchTarget(r, statuspage.TargetOptions[Device]{Build: build})
		defer page.Close()
		h, err := statuspage.Mux(statuspage.SurfaceOptions{Metrics: metrics.Handler(),
			Page:   statuspage.Options{Title: "deviceagent", Targets: []*statuspage.Target{page}},
			Health: statuspage.HealthOptions{Ready: map[string]statuspage.Checker{"agent": loop.Check, "store": statuspage.StoreCheck(st)}}})
		if err != nil {
			return err
		}
		g.Go(func() error { return statuspage.ListenAndServe(ctx, o.addr, h) })
	}
	printStart(project, r.Revision(), r.PendingActions())
	g.Go(func() error { return loop.Run(ctx, r.Run) }) // the first pass starts at once
	g.Go(func() error { return watch(ctx, eng, project, r) })
	return g.Wait()
}

// defaultPath is name in the directory "converge" under the one dir
// returns (the user's cache or configuration directory).
func defaultPath(dir func() (string, error), name string) string {
	d, err := dir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "converge", name)
}
