// Package pgtest gives tests a throw-away PostgreSQL database.
//
// Call DSN in a test to get the DSN of a fresh, empty database, dropped at
// the end of the test. When the environment variable CONVERGE_PG_DSN names
// a server, the databases are made there (its role must be allowed to
// create databases). Otherwise the first call starts one throw-away
// cluster for the whole test binary: initdb into a temporary directory,
// postgres on a free loopback port (with fsync on, so that crash tests
// mean something), its unix socket in that directory. The binaries are
// looked up on PATH, then under /usr/lib/postgresql/*/bin. initdb and
// postgres refuse to run as root: as root they run as the user postgres.
//
// Stop the cluster and remove its directory at the end of the test
// binary with Main, or with Wrap when TestMain already wraps m:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }
//
// Outside go test (an integration program of one's own, a demo), Start
// starts such a cluster under a context and Options and returns a Server
// to create databases on and Close:
//
//	srv, err := pgtest.Start(ctx, pgtest.Options{})
//	if err != nil { ... }
//	defer srv.Close()
//	dsn, err := srv.CreateDatabase(ctx)
//
// Without PostgreSQL binaries (and without CONVERGE_PG_DSN), DSN skips the
// test with a message saying so, unless CONVERGE_REQUIRE_PG=1, which makes
// it fail instead. The cluster is also killed if the test binary dies
// (on Linux), so a crashed run leaves no server behind.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The environment variables pgtest reads.
const (
	// EnvDSN names a PostgreSQL server to make the test databases on,
	// instead of a throw-away cluster.
	EnvDSN = "CONVERGE_PG_DSN"
	// EnvRequire, set to 1, makes a missing PostgreSQL fail the test
	// instead of skipping it.
	EnvRequire = "CONVERGE_REQUIRE_PG"
)

// ErrNoPostgres means no PostgreSQL is available: no CONVERGE_PG_DSN and
// no binaries (or no unprivileged user to run them as root).
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL available")

var (
	mu      sync.Mutex
	running *cluster
	failed  error // why the cluster could not start; sticks for the binary
)

// DSN returns the DSN (a postgres:// URL) of a fresh, empty database,
// dropped when the test ends. See the package documentation for where it
// lives.
func DSN(tb testing.TB) string {
	tb.Helper()
	server, err := serverDSN()
	if errors.Is(err, ErrNoPostgres) {
		if os.Getenv(EnvRequire) == "1" {
			tb.Fatalf("%v (%s=1 requires it)", err, EnvRequire)
		}
		tb.Skip(err.Error())
	}
	if err != nil {
		tb.Fatal(err)
	}
	name := "t_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin(ctx, server, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := admin(ctx, server, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	dsn, err := withDatabase(server, name)
	if err != nil {
		tb.Fatal(err)
	}
	return dsn
}

// ServerDSN returns the DSN of the server's maintenance database, for
// tests that need to create roles or databases themselves: the DSN of
// CONVERGE_PG_DSN, or of the throw-away cluster (started if needed, as
// the superuser postgres). It fails or skips like DSN.
func ServerDSN(tb testing.TB) string {
	tb.Helper()
	server, err := serverDSN()
	if errors.Is(err, ErrNoPostgres) {
		if os.Getenv(EnvRequire) == "1" {
			tb.Fatalf("%v (%s=1 requires it)", err, EnvRequire)
		}
		tb.Skip(err.Error())
	}
	if err != nil {
		tb.Fatal(err)
	}
	return server
}

// Main runs the tests of m, stops the throw-away cluster if one was
// started, and exits with the tests' code. Call it from TestMain.
func Main(m *testing.M) { os.Exit(Wrap(m).Run()) }

// TestingM is what Wrap wraps and returns: *testing.M, and what
// goleak.VerifyTestMain takes.
type TestingM interface{ Run() int }

// Wrap returns m whose Run also stops the throw-away cluster (if one was
// started) and removes its directory after the tests.
func Wrap(m TestingM) TestingM { return wrapped{m} }

type wrapped struct{ m TestingM }

// Run runs the tests, then stops the throw-away cluster.
func (w wrapped) Run() int {
	code := w.m.Run()
	if err := Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Stop stops the throw-away cluster, if one runs, and removes its
// directory. Main and Wrap call it; a later DSN starts a new cluster.
func Stop() error {
	mu.Lock()
	c := running
	running, failed = nil, nil
	mu.Unlock()
	if c == nil {
		return nil
	}
	return c.stop()
}

func serverDSN() (string, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		return dsn, nil
	}
	mu.Lock()
	defer mu.Unlock()
	if running != nil {
		return running.dsn, nil
	}
	if failed != nil {
		return "", failed
	}
	c, err := start(context.Background(), Options{})
	if err != nil {
		failed = err
		return "", err
	}
	running = c
	return c.dsn, nil
}

func admin(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns dsn naming database name instead of its own.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("pgtest: %s does not parse as a URL", EnvDSN)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	// key=value pairs: the last dbname wins.
	return dsn + " dbname=" + name, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cluster is a throw-away PostgreSQL server.
type cluster struct {
	dir  string
	dsn  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the server exited
}

// libGlob is where distributions install PostgreSQL's programs, one
// directory per major version.
var libGlob = "/usr/lib/postgresql/*/bin"

// binary finds a PostgreSQL program in bin when it is set, else on PATH
// or under /usr/lib/postgresql/*/bin (the newest version first).
func binary(bin, name string) (string, error) {
	if bin != "" {
		p := filepath.Join(bin, name)
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%w: %s is not a program in %s (Options.Bin)", ErrNoPostgres, name, bin)
		}
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	found, _ := filepath.Glob(filepath.Join(libGlob, name))
	slices.SortFunc(found, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(a))))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b))))
		return vb - va
	})
	if len(found) > 0 {
		return found[0], nil
	}
	return "", fmt.Errorf("%w: %s not found on PATH or under /usr/lib/postgresql/*/bin (install PostgreSQL or set %s)", ErrNoPostgres, name, EnvDSN)
}

// runAs returns the credential to run the server with: none for a
// normal user, the user postgres for root (initdb and postgres refuse
// root).
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root, and there is no user postgres to run initdb and postgres as: %v", ErrNoPostgres, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgtest: user postgres has ids %q/%q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func start(ctx context.Context, opts Options) (*cluster, error) {
	initdb, err := binary(opts.Bin, "initdb")
	if err != nil {
		return nil, err
	}
	postgres, err := binary(opts.Bin, "postgres")
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.Dir, "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &cluster{dir: dir}
	fail := func(err error) (*cluster, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(fmt.Errorf("pgtest: hand %s to user postgres: %w", dir, err))
		}
	}
	data := filepath.Join(dir, "data")
	// --no-sync only skips initdb's own final flush; the server runs
	// with fsync on.
	cmd := exec.CommandContext(ctx, initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.SysProcAttr = sysProcAttr(cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return fail(fmt.Errorf("pgtest: initdb in %s: %w", data, ctx.Err()))
		}
		return fail(fmt.Errorf("pgtest: initdb in %s: %w\n%s", data, err, out))
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = DefaultStartTimeout
	}
	var lastErr error
	for range 5 { // a free port may be taken before postgres binds it
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		if lastErr = c.run(ctx, postgres, data, port, cred, opts.Settings, timeout); lastErr == nil || ctx.Err() != nil {
			break
		}
	}
	if lastErr != nil {
		return fail(lastErr)
	}
	return c, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// run starts postgres on port and waits until it accepts connections, for
// timeout at most, or until ctx ends (the server is then killed).
func (c *cluster) run(ctx context.Context, postgres, data string, port int, cred *syscall.Credential, settings map[string]string, timeout time.Duration) error {
	logPath := filepath.Join(c.dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer logFile.Close()
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", c.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=on", "-c", "max_connections=300",
		"-c", "shared_buffers=32MB", "-c", "log_min_messages=warning"}
	names := slices.Sorted(maps.Keys(settings))
	for _, k := range names {
		args = append(args, "-c", k+"="+settings[k])
	}
	cmd := exec.Command(postgres, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr(cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.cmd, c.done = cmd, done
	c.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(timeout)
	kill := func() {
		_ = cmd.Process.Kill()
		<-done
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := admin(pctx, c.dsn, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("pgtest: postgres exited at start: %s", out)
		case <-ctx.Done():
			kill()
			return fmt.Errorf("pgtest: start postgres: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			kill()
			return fmt.Errorf("pgtest: postgres did not accept connections within %s: %w", timeout, err)
		}
	}
}

// stop shuts the server down (fast shutdown, then a kill after 20s) and
// removes its directory.
func (c *cluster) stop() error {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("pgtest: remove %s: %w", c.dir, err)
	}
	return nil
}
