package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/convergekit/converge/hostcfg"
)

// TestMain is the service too: the agent starts the test binary as its
// greeter, as it starts itself outside tests.
func TestMain(m *testing.M) {
	if conf := os.Getenv(serviceEnv); conf != "" {
		if err := serve(conf, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "greeter:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// A service built with -race waits a second as it exits, unless told
	// not to; the services of this test stop often.
	_ = os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	goleak.VerifyTestMain(m)
}

// newAgent starts an agent over a fresh device root and state file (or
// the given ones) and closes it when the test ends.
func newAgent(t *testing.T, cfg agentConfig) (*agent, *passWatch) {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	if cfg.State == "" {
		cfg.State = filepath.Join(t.TempDir(), "state.db")
	}
	var out bytes.Buffer
	if cfg.Out == nil {
		cfg.Out = &out
	}
	a, err := startAgent(t.Context(), cfg)
	require.NoError(t, err)
	passes := a.passes()
	t.Cleanup(func() {
		passes.close()
		a.Close()
		if t.Failed() {
			t.Logf("agent output:\n%s", out.String())
		}
	})
	return a, passes
}

func TestConfigAgentDemo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, false, Spec{Port: -1}, t.TempDir(), filepath.Join(t.TempDir(), "state.db"), 30*time.Second))
	s := out.String()
	assert.Contains(t, s, "no target in")
	assert.Contains(t, s, `says "hello"`)
	assert.Contains(t, s, "managed files changed by hand: reconciling")
	assert.Contains(t, s, "(restored: true); the service kept running: restarts 0")
	assert.Contains(t, s, `restarts 1; the service at`)
	assert.Contains(t, s, `says "hello from revision 2"`)
	assert.True(t, strings.HasSuffix(s, "== a pass that changes nothing\n  restarts 1\n"), "a no-op pass restarts nothing:\n%s", s)
}

// TestConfigAgentRepairsAHandEditWithinASecond: the file watch triggers the
// pass that repairs a hand edit at once; without it, the repair waits for
// the periodic pass.
func TestConfigAgentRepairsAHandEditWithinASecond(t *testing.T) {
	const interval = 2 * time.Second
	a, passes := newAgent(t, agentConfig{Interval: interval})
	require.NoError(t, passes.next(t.Context()))
	conf, err := os.ReadFile(a.host(confPath))
	require.NoError(t, err)
	iface, err := os.ReadFile(a.host(ifacePath))
	require.NoError(t, err)

	edits := []struct {
		name string
		path string
		want []byte
		edit func(p string) error
	}{
		{"edit the service's configuration", confPath, conf, func(p string) error {
			return os.WriteFile(p, []byte("listen = 0.0.0.0:80\n"), 0o644)
		}},
		{"replace it as an editor does", confPath, conf, func(p string) error {
			if err := os.WriteFile(p+".swp", []byte("greeting = hacked\n"), 0o644); err != nil {
				return err
			}
			return os.Rename(p+".swp", p)
		}},
		{"delete it", confPath, conf, os.Remove},
		{"edit the interface", ifacePath, iface, func(p string) error {
			return os.WriteFile(p, []byte("auto mgmt0\niface mgmt0 inet dhcp\n"), 0o644)
		}},
	}
	for _, e := range edits {
		t.Run(e.name, func(t *testing.T) {
			start := time.Now()
			require.NoError(t, e.edit(a.host(e.path)))
			require.NoError(t, passes.changed(t.Context(), (&hostcfg.File{Path: e.path}).ID()))
			took := time.Since(start)
			got, err := os.ReadFile(a.host(e.path))
			require.NoError(t, err)
			assert.Equal(t, string(e.want), string(got), "repaired")
			t.Logf("repaired in %s with the watch (interval %s)", took, interval)
			assert.Less(t, took, time.Second, "a hand edit is repaired within a second")
			select {
			case <-a.triggers:
			default:
				t.Error("the repair did not come from the file watch")
			}
			require.NoError(t, passes.next(t.Context()))
		})
	}
	assert.Zero(t, a.sup.restarts(), "the service never ran an edited configuration: no restart")

	// Without the watch, the same edit waits for the periodic pass.
	a.StopWatch()
	start := time.Now()
	require.NoError(t, os.WriteFile(a.host(confPath), []byte("listen = 0.0.0.0:80\n"), 0o644))
	require.NoError(t, passes.changed(t.Context(), confID))
	took := time.Since(start)
	t.Logf("repaired in %s without the watch (interval %s)", took, interval)
	assert.Greater(t, took, time.Second, "without the watch the repair waits for the interval")
}

func TestConfigAgentRestartsTheServiceOnce(t *testing.T) {
	a, passes := newAgent(t, agentConfig{})
	ctx := t.Context()
	require.NoError(t, passes.next(ctx))
	first := a.sup.state()
	require.True(t, first.Running)
	got, err := a.ask(ctx)
	require.NoError(t, err)
	assert.Equal(t, "hello", got)
	assert.Zero(t, a.sup.restarts(), "started, not restarted, by the first pass")

	spec, _ := a.rec.Target()
	spec.Greeting = "bonjour"
	require.NoError(t, a.rec.SetTarget(ctx, spec))
	require.NoError(t, passes.next(ctx))
	second := a.sup.state()
	assert.Equal(t, 1, a.sup.restarts(), "one restart after a change of the configuration")
	assert.NotEqual(t, first.PID, second.PID, "a new process")
	got, err = a.ask(ctx)
	require.NoError(t, err)
	assert.Equal(t, "bonjour", got, "the restarted service runs the new configuration")

	a.rec.Trigger()
	require.NoError(t, passes.next(ctx))
	assert.Equal(t, 1, a.sup.restarts(), "no restart after a pass that changed nothing")
	assert.Equal(t, second.PID, a.sup.state().PID)

	if runtime.GOOS != "linux" {
		return // elsewhere only 127.0.0.1 is a loopback address
	}
	// The dependent parameter: moving the management address moves the
	// service (its configuration takes the interface's address).
	spec.Address = "127.0.0.2/8"
	require.NoError(t, a.rec.SetTarget(ctx, spec))
	require.NoError(t, passes.next(ctx))
	conf, err := os.ReadFile(a.host(confPath))
	require.NoError(t, err)
	assert.Contains(t, string(conf), "listen = 127.0.0.2:0\n")
	assert.Equal(t, 2, a.sup.restarts())
	assert.True(t, strings.HasPrefix(a.sup.state().Addr, "127.0.0.2:"), a.sup.state().Addr)
	got, err = a.ask(ctx)
	require.NoError(t, err)
	assert.Equal(t, "bonjour", got)
}

func TestConfigAgentResumesItsTarget(t *testing.T) {
	root, state := t.TempDir(), filepath.Join(t.TempDir(), "state.db")
	a, passes := newAgent(t, agentConfig{Root: root, State: state})
	require.False(t, a.found, "first start: the default target")
	require.NoError(t, passes.next(t.Context()))
	spec, _ := a.rec.Target()
	spec.Greeting = "kept across restarts"
	require.NoError(t, a.rec.SetTarget(t.Context(), spec))
	require.NoError(t, passes.next(t.Context()))
	rev := a.rec.Revision()
	passes.close()
	a.Close()
	assert.False(t, a.sup.state().Running, "the agent stops its service")

	b, passes := newAgent(t, agentConfig{Root: root, State: state})
	require.True(t, b.found, "the stored target is resumed, the default not used")
	got, _ := b.rec.Target()
	assert.Equal(t, spec, got)
	assert.Equal(t, rev, b.rec.Revision())
	require.NoError(t, passes.next(t.Context()))
	greeting, err := b.ask(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "kept across restarts", greeting)
}

func TestConfigAgentRejectsBadTargets(t *testing.T) {
	a := &agent{}
	for _, s := range []Spec{
		{Address: "127.0.0.1", Greeting: "no prefix length"},
		{Address: "127.0.0.1/8", Port: 70000},
		{Address: "127.0.0.1/8", Greeting: "two\nlines"},
	} {
		_, err := a.build(s)
		assert.Error(t, err, "%+v", s)
	}
}

// signalWriter closes seen when a line containing want was written.
type signalWriter struct {
	want string
	seen chan struct{}
	buf  bytes.Buffer
}

func (w *signalWriter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	if w.seen != nil && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return len(b), nil
}

// TestConfigAgentServeSetsAndKeepsItsTarget runs the agent as -serve does,
// with -greeting: the target it stores is the one the next start resumes.
func TestConfigAgentServeSetsAndKeepsItsTarget(t *testing.T) {
	root, state := t.TempDir(), filepath.Join(t.TempDir(), "state.db")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &signalWriter{want: "Ctrl-C to stop", seen: make(chan struct{})}
	seen := w.seen
	done := make(chan error, 1)
	go func() { done <- run(ctx, w, true, Spec{Port: -1, Greeting: "served"}, root, state, time.Minute) }()
	select {
	case <-seen:
	case err := <-done:
		t.Fatalf("run ended early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not start")
	}
	cancel()
	require.NoError(t, <-done)

	a, passes := newAgent(t, agentConfig{Root: root, State: state})
	require.True(t, a.found)
	spec, _ := a.rec.Target()
	assert.Equal(t, Spec{Address: "127.0.0.1/8", Port: 0, Greeting: "served"}, spec)
	require.NoError(t, passes.next(t.Context()))
	got, err := a.ask(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "served", got)
}
