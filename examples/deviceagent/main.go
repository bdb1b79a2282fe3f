// Command deviceagent keeps a small Compose project converged on the local
// Docker engine, as an edge device agent would: it applies the project,
// then watches engine events and re-applies whenever a container of the
// project dies, is stopped or removed.
//
// It REQUIRES a running Docker engine (DOCKER_HOST or the default socket)
// and exits with status 1 when there is none. The images of the project
// must be present locally or pullable. It runs without any registry: with
// -demo-image the agent builds a tiny FROM scratch test image itself
// (needs the Go toolchain), and the built-in project does so by itself
// when its default image (alpine:3.20) is not on the engine and -image is
// not given. An image that cannot be pulled stops the pass with the
// engine's error and a line saying what to do (load the image, point
// -image at one the engine has, or use -demo-image).
//
// Usage:
//
//	deviceagent [-f compose.yaml] [-demo-image] [-dry] [-once] [-down [-volumes]] [-state file] [-resume] [-log]
//
// A service that labels itself io.convergekit.update-lock=<path> is not
// recreated, stopped or removed while that file exists in it (a pass
// waits and retries); SIGUSR1 forces a pass past such locks.
//
// Without -f it uses a built-in project of two services (db and web, web
// waiting for db to be healthy). -dry prints the planned action per
// container and writes nothing; -once applies once and exits; -down removes
// the project's containers and networks, and with -volumes its volumes (and
// their data) too, as `docker compose down -v` does. Otherwise it runs until interrupted, keeping
// its target (the project) in the embedded store file -state, on disk
// before it is applied; -resume starts from that stored target instead of
// loading a project, as an agent restarted after a power cut does. With
// CONVERGE_SEAL_KEY set (a hex AES key) the stored target is sealed, so the
// environment secrets in it are not on disk in clear. -log logs every
// change the agent makes on the engine (create, start, stop, remove, pull,
// with service and container names) to stderr through docker.Project's
// Logger, never an environment value.
//
// A state file that is damaged (an SD card that lost power mid-write, a
// truncated copy) does not stop the agent: it is moved aside as -state plus
// ".corrupt-" and the UTC time, the agent says so on stderr and starts with
// an empty store; -resume then has nothing to resume and loads the project
// (-f or the built-in one) instead, as on a first start. Any other problem
// with the file (another program's, held by another agent) stops it.
//
// The spec hashes in the containers' labels are keyed (docker.Project's
// HashKey) with a random key the agent creates once and keeps next to the
// store, in -state plus ".label-key" (mode 0600): whoever can read the
// labels cannot test a guessed secret against them, and every mode of the
// agent (-dry, -once, a restart) computes the same hashes, so nothing is
// recreated for want of the key.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
	"github.com/convergekit/converge/examples/internal/cli"
	"github.com/convergekit/converge/examples/internal/stores"
)

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

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "deviceagent:", err)
		if hint := pullHint(err); hint != "" {
			fmt.Fprintln(os.Stderr, "deviceagent:", hint)
		}
		os.Exit(1)
	}
}

// defaultImage is the image of the built-in project unless -image says
// otherwise.
const defaultImage = "alpine:3.20"

// pullHint says what to do about err when an image could not be pulled,
// or "" when err is not about a pull.
func pullHint(err error) string {
	var pe *docker.PullError
	if !errors.As(err, &pe) {
		return ""
	}
	return fmt.Sprintf("the engine cannot pull %s (no registry access?): load it on this machine "+
		"(docker load -i image.tar, or docker pull where a registry is reachable), point -image at an image the "+
		"engine has, or run with -demo-image to build a tiny test image locally", pe.Ref)
}

// builtinImage returns the image the built-in project runs: img, unless
// it is the default one (explicit is false) and the engine does not have
// it, in which case it builds the demo image and says so on out, so that
// a machine without registry access runs the project as it is.
func builtinImage(ctx context.Context, eng *client.Client, img string, explicit bool, out io.Writer) (string, error) {
	if explicit {
		return img, nil
	}
	if _, err := eng.ImageInspect(ctx, img); err == nil || !errdefs.IsNotFound(err) {
		return img, nil // present, or the engine says something else: the walk reports it
	}
	demo, built, err := dockertest.BuildAppImage(ctx, eng)
	if err != nil {
		return "", fmt.Errorf("%s is not on this engine and the demo image could not be built: %w", img, err)
	}
	fmt.Fprintf(out, "%s is not on this engine: using the demo image %s built locally (new: %v); pass -image %s to pull it instead\n",
		img, demo, built, img)
	return demo, nil
}

func run() error {
	file := flag.String("f", "", "Compose file (default: a built-in two-service project)")
	image := flag.String("image", defaultImage, "image of the built-in project (when the default is not on the engine, the demo image is used instead)")
	demo := flag.Bool("demo-image", false, "build a tiny FROM scratch test image and use it for the built-in project")
	dry := flag.Bool("dry", false, "print the planned action per container and write nothing")
	once := flag.Bool("once", false, "apply once and exit")
	down := flag.Bool("down", false, "remove the project's containers and networks")
	volumes := flag.Bool("volumes", false, "with -down, remove the project's volumes and their data too")
	state := flag.String("state", defaultState(), "file of the embedded store that keeps the target")
	resume := flag.Bool("resume", false, "run the target kept in -state instead of loading a project")
	logChanges := flag.Bool("log", false, "log every change made on the engine to stderr (never a secret value)")
	cli.Parse("deviceagent", "[-f compose.yaml] [-demo-image] [-dry] [-once] [-down [-volumes]] [-state file] [-resume] [-log]",
		"Keeps a Compose project converged on the local Docker engine, as an edge device agent\n"+
			"would; it needs a running Docker engine. Without a registry, -demo-image builds a tiny\n"+
			"image locally (the built-in project uses it by itself when its default image is absent).")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cli, err := dockertest.Connect(ctx)
	if err != nil {
		return fmt.Errorf("this example needs a running Docker engine: %w", err)
	}
	defer cli.Close()

	if *volumes && !*down {
		return errors.New("-volumes goes with -down")
	}
	key, err := labelKey(*state + ".label-key")
	if err != nil {
		return err
	}
	var st *stores.Store
	recovered := false
	if !*dry && !*once && !*down {
		var closeStore func() error
		st, closeStore, recovered, err = openState(ctx, *state, os.Stderr)
		if err != nil {
			return err
		}
		defer closeStore()
	}
	var p *docker.Project
	switch {
	case *resume && st == nil:
		return errors.New("-resume keeps a project converged: it cannot go with -dry, -once or -down")
	case *resume && !recovered:
		b, rev, err := st.Target(ctx, converge.TargetDefaultName)
		if err != nil {
			return fmt.Errorf("no target to resume in %s: %w", *state, err)
		}
		p = new(docker.Project)
		if err := json.Unmarshal(b, p); err != nil {
			return fmt.Errorf("the target kept in %s: %w", *state, err)
		}
		fmt.Printf("resuming project %s (target revision %d) from %s\n", p.Name, rev, *state)
	case *file != "":
		p, err = docker.LoadComposeFile(ctx, *file, docker.LoadOptions{HashKey: key})
	default:
		img := *image
		if *demo {
			var built bool
			img, built, err = dockertest.BuildAppImage(ctx, cli)
			if err != nil {
				return err
			}
			fmt.Printf("built demo image %s (new: %v)\n", img, built)
		} else {
			explicit := false
			flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "image" })
			if img, err = builtinImage(ctx, cli, img, explicit, os.Stdout); err != nil {
				return err
			}
		}
		p, err = docker.LoadCompose(ctx, []byte(strings.ReplaceAll(builtin, "IMAGE", img)), docker.LoadOptions{HashKey: key})
	}
	if err != nil {
		return err
	}
	p.HashKey = key // a resumed target keeps the key it was stored with; the file is the authority
	p.RemoveVolumes = *volumes
	var logger *slog.Logger
	if *logChanges {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		p.Logger = logger
	}
	g, err := p.Graph(cli)
	if err != nil {
		return err
	}
	w, err := converge.NewWalker(converge.WalkerConfig{Observer: converge.ObserverFunc(printEvent)})
	if err != nil {
		return err
	}

	switch {
	case *down:
		_, err := w.Clean(ctx, g)
		return err
	case *dry:
		rep, err := w.ApplyDry(ctx, g)
		for _, pl := range docker.Plans(rep) {
			fmt.Println("plan:", pl)
		}
		return err
	case *once:
		rep, err := w.Apply(ctx, g)
		if rep != nil {
			fmt.Println(rep.Summary())
		}
		return err
	}

	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[docker.Project]{
		Build: func(ctx context.Context, target docker.Project) ([]converge.TargetStage, error) {
			// The logger is not part of the stored target: a target
			// resumed from the store gets it here.
			target.Logger = logger
			return docker.TargetBuild(cli)(ctx, target)
		},
		Store: st.Store,
		Walk:  converge.WalkerConfig{Observer: converge.ObserverFunc(printEvent)},
	})
	if err != nil {
		return err
	}
	r.Subscribe(func(e converge.TargetEvent) {
		switch e.Kind {
		case converge.TargetPassFinished:
			fmt.Printf("pass %d: converged in %s\n", e.Pass, e.Duration.Round(1e6))
		case converge.TargetPassFailed:
			if e.Locked { // a container's update lock is held (docker.LockError)
				fmt.Printf("pass %d waits for an update lock (retry in %s; kill -USR1 %d to force): %v\n",
					e.Pass, e.Retry.Round(1e6), os.Getpid(), e.Err)
				return
			}
			fmt.Printf("pass %d failed (retry in %s): %v\n", e.Pass, e.Retry.Round(1e6), e.Err)
			if hint := pullHint(e.Err); hint != "" {
				fmt.Println(hint)
			}
		}
	})
	// SIGUSR1 forces a pass past the containers' update locks, as a
	// supervisor's "force update" does.
	force := make(chan os.Signal, 1)
	signal.Notify(force, syscall.SIGUSR1)
	defer signal.Stop(force)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-force:
				fmt.Println("SIGUSR1: forcing a pass past update locks")
				r.TriggerForced()
			}
		}
	}()
	if !*resume || recovered {
		// Stored (fsynced) before it is applied: a restart with -resume
		// finds it.
		if err := r.SetTarget(ctx, *p); err != nil {
			return err
		}
	}
	// WatchEvents returns once subscribed: a container killed from now on
	// triggers a pass.
	stopWatch, err := docker.WatchEvents(ctx, cli, p.Name, func(e docker.Event) {
		fmt.Printf("engine event %s on %s: reconciling\n", e.Action, e.Container)
		r.Trigger()
	})
	if err != nil {
		return err
	}
	defer stopWatch()
	fmt.Printf("keeping project %s converged; Ctrl-C to stop (containers keep running; use -down to remove them)\n", p.Name)
	return r.Run(ctx)
}

func printEvent(e converge.Event) {
	switch e.Kind {
	case converge.EventDone:
		if e.Outcome != converge.OutcomeUnchanged {
			fmt.Printf("  %s: %s\n", e.ID, e.Outcome)
		}
	case converge.EventFailed:
		fmt.Printf("  %s: failed in %s: %v\n", e.ID, e.Phase, e.Err)
	}
}

// openState opens the store file at path. A damaged file is moved aside
// and an empty store started in its place, which it tells on w and
// reports as recovered.
func openState(ctx context.Context, path string, w io.Writer) (st *stores.Store, closeStore func() error, recovered bool, err error) {
	st, closeStore, err = stores.Open(ctx, stores.Options{Path: path, OnCorrupt: func(r boltstore.Recovery) {
		recovered = true
		fmt.Fprintf(w, "deviceagent: the state file was damaged and is kept as %s; starting with an empty store: %v\n", r.MovedTo, r.Err)
	}})
	return st, closeStore, recovered, err
}

// defaultState is the store file in the user's cache directory.
func defaultState() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "converge", "deviceagent.db")
}

// labelKey returns the key of the label hashes kept in path, creating a
// random one (mode 0600) the first time. Two agents starting at once agree:
// the key is written to a temporary file and linked into place, and the
// loser reads the winner's key.
func labelKey(path string) ([]byte, error) {
	if key, err := readKey(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".label-key-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(key) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("label key %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("label key %s: %w", path, err)
	}
	return readKey(path)
}

// readKey reads a hex key written by labelKey.
func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("label key %s: not a hex key of at least 16 bytes", path)
	}
	return key, nil
}
