package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
)

// TestLabel marks images and objects created by tests against a real
// engine, so leftovers can be found and removed.
const TestLabel = "io.convergekit.test"

// AppSource is a tiny Go program for test images. Its first argument picks
// a mode: "sleep" (the default) waits for SIGTERM; "serve" also serves
// HTTP on :8080 with a /health endpoint; "health" exits 0 when that
// endpoint answers 200; "ok" exits 0; "exit N" exits with code N; "say
// LINE..." prints each LINE (environment variables expanded) on stdout and
// then sleeps like "sleep"; "fail LINE..." prints them on stderr and exits
// with code 3.
const AppSource = `package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	mode := "sleep"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "sleep":
		wait()
	case "serve":
		http.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		go func() { _ = http.ListenAndServe(":8080", nil) }()
		wait()
	case "health":
		c := http.Client{Timeout: 2 * time.Second}
		r, err := c.Get("http://127.0.0.1:8080/health")
		if err != nil || r.StatusCode != http.StatusOK {
			os.Exit(1)
		}
	case "ok":
	case "say":
		for _, l := range os.Args[2:] {
			fmt.Println(os.ExpandEnv(l))
		}
		wait()
	case "fail":
		for _, l := range os.Args[2:] {
			fmt.Fprintln(os.Stderr, os.ExpandEnv(l))
		}
		os.Exit(3)
	case "exit":
		code := 1
		if len(os.Args) > 2 {
			code, _ = strconv.Atoi(os.Args[2])
		}
		os.Exit(code)
	default:
		os.Exit(2)
	}
}

func wait() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
	<-ch
}
`

// Connect returns a client configured from the environment after checking
// within a few seconds that the engine answers.
func Connect(ctx context.Context) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("docker engine not reachable: %w", err)
	}
	return cli, nil
}

// BuildAppImage compiles AppSource as a static Linux binary with the local
// Go toolchain and builds a FROM scratch image of it through the engine's
// build API, tagged "converge-test/app:<hash of the binary>" and labelled
// TestLabel. An image with that tag already present is reused. It returns
// the tag and whether it built the image.
//
// The image is a shared fixture, like a build cache: test binaries that
// run at the same time (go test runs packages in parallel) all use it, so
// none can know it is the last, and none should remove it. Processes on
// one machine build it one at a time, under a lock file in the temporary
// directory: two builds racing for the tag would leave the loser's image
// on the engine, untagged and carrying TestLabel.
func BuildAppImage(ctx context.Context, cli *client.Client) (tag string, built bool, err error) {
	return buildApp(ctx, cli, "converge-test/app", nil)
}

// buildApp is BuildAppImage with the repository of the tag and extra
// labels given, so that a test can build its own copy.
func buildApp(ctx context.Context, cli *client.Client, repo string, labels map[string]string) (tag string, built bool, err error) {
	dir, err := os.MkdirTemp("", "converge-app-")
	if err != nil {
		return "", false, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(AppSource), 0o644); err != nil {
		return "", false, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module app\n\ngo 1.25\n"), 0o644); err != nil {
		return "", false, err
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", "app", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", false, fmt.Errorf("build test app: %w\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "app"))
	if err != nil {
		return "", false, err
	}
	sum := sha256.Sum256(bin)
	tag = repo + ":" + hex.EncodeToString(sum[:6])
	unlock, err := lockBuild(ctx, tag)
	if err != nil {
		return "", false, err
	}
	defer unlock()
	have, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", tag))})
	if err != nil {
		return "", false, err
	}
	if len(have) > 0 {
		return tag, false, nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dockerfile := []byte("FROM scratch\nCOPY app /app\nCMD [\"/app\", \"sleep\"]\n")
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"Dockerfile", 0o644, dockerfile}, {"app", 0o755, bin}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return "", false, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", false, err
		}
	}
	if err := tw.Close(); err != nil {
		return "", false, err
	}
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Labels: buildLabels(labels),
		Remove: true, ForceRemove: true, Dockerfile: "Dockerfile"})
	if err != nil {
		return "", false, fmt.Errorf("image build: %w", err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return "", false, fmt.Errorf("image build: %w", err)
		}
		if m.Error != nil {
			return "", false, fmt.Errorf("image build: %w", m.Error)
		}
	}
	return tag, true, nil
}

// buildLabels is TestLabel plus extra.
func buildLabels(extra map[string]string) map[string]string {
	l := map[string]string{TestLabel: "1"}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

// lockBuild takes the machine-wide lock of the build of tag: a lock file
// in the temporary directory, named after the tag, held until unlock.
// It waits for another process's build, stopping when ctx is done.
func lockBuild(ctx context.Context, tag string) (unlock func(), err error) {
	name := filepath.Join(os.TempDir(), "converge-test-build-"+strings.NewReplacer("/", "_", ":", "_").Replace(tag)+".lock")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the build of %s: %w", tag, err)
	}
	for {
		ok, err := tryLock(f)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("lock the build of %s: %w", tag, err)
		}
		if ok {
			return func() { _ = f.Close() }, nil // closing releases the lock
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("lock the build of %s: %w", tag, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
