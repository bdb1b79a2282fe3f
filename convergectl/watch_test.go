package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
)

// TestWatchLoop: a reading is printed at once and again only when it
// changed, every interval or when woken; a first reading that fails ends
// the watch, a later one is printed once; the end of ctx ends it without
// an error.
func TestWatchLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		readings := []rendering{
			{key: "a", out: "A\n"},
			{key: "a", out: "A again\n"}, // unchanged: not printed
			{key: "b", out: "B\n", errOut: "note\n"},
			{err: errors.New("locked")},
			{err: errors.New("locked")}, // the same error: printed once
			{key: "b", out: "B\n"},
		}
		var calls []time.Duration
		start := time.Now()
		wake := make(chan struct{}, 1)
		var out, errOut bytes.Buffer
		done := make(chan error, 1)
		go func() {
			done <- watchLoop(ctx, &out, &errOut, time.Minute, wake, "--\n", printErr, func() rendering {
				calls = append(calls, time.Since(start))
				r := readings[0]
				if len(readings) > 1 {
					readings = readings[1:]
				}
				return r
			})
		}()
		synctest.Wait()
		require.Equal(t, []time.Duration{0}, calls)
		wake <- struct{}{} // woken before the interval
		synctest.Wait()
		time.Sleep(5 * time.Minute) // four more ticks, in the bubble's time
		synctest.Wait()
		assert.Equal(t, []time.Duration{0, 0, time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute}, calls)
		cancel()
		require.NoError(t, <-done)
		assert.Equal(t, "A\n--\nB\n--\n--\nB\n", out.String())
		assert.Equal(t, "note\nlocked\n", errOut.String())
	})
	t.Run("first reading fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := watchLoop(t.Context(), &out, &errOut, time.Second, nil, "", printErr, func() rendering {
				return rendering{err: converge.ErrStoreNotFound}
			})
			assert.ErrorIs(t, err, converge.ErrStoreNotFound)
			assert.Empty(t, out.String())
		})
	})
}

func printErr(w io.Writer, err error) { fmt.Fprintln(w, err) }

// watcher is a running `convergectl ... --watch`, its output read line by
// line.
type watcher struct {
	cmd   *exec.Cmd
	lines chan string
	seen  []string
}

func startWatch(t *testing.T, args ...string) *watcher {
	t.Helper()
	cmd := exec.Command(binary, append(args, "--watch")...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	require.NoError(t, cmd.Start())
	w := &watcher{cmd: cmd, lines: make(chan string, 100)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("stderr of %v: %s", args, errOut.String())
		}
	})
	return w
}

// waitFor reads lines until one contains s.
func (w *watcher) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case l, ok := <-w.lines:
			require.True(t, ok, "the watch ended before printing %q; it printed %q", s, w.seen)
			w.seen = append(w.seen, l)
			if strings.Contains(l, s) {
				return
			}
		case <-deadline:
			t.Fatalf("the watch did not print %q; it printed %q", s, w.seen)
		}
	}
}

// interrupt sends SIGINT and requires the watch to end with status 0.
func (w *watcher) interrupt(t *testing.T) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, w.cmd.Wait(), "an interrupted watch exits 0")
}

// TestWatchBolt: objects --watch over a bolt file prints the list, prints
// it again when an object is added (the file is read again every
// interval, and left free in between for its program), and ends with
// status 0 on SIGINT.
func TestWatchBolt(t *testing.T) {
	path := boltFixture(t, nil)
	w := startWatch(t, "objects", "host", "--bolt", path, "--watch-interval", "20ms")
	w.waitFor(t, "term")

	st, err := boltstore.Open(path, boltstore.Options{LockTimeout: time.Minute})
	require.NoError(t, err)
	require.NoError(t, controller.AddObject(context.Background(), st, "host", "zz-new", "provisioning", json.RawMessage(`{}`)))
	require.NoError(t, st.Close())

	w.waitFor(t, "zz-new")
	w.interrupt(t)
	assert.Equal(t, 2, strings.Count(strings.Join(w.seen, "\n"), "KEY  "), "printed twice: at first and once changed: %q", w.seen)
}

// TestWatchUsage: --watch is for the commands that read, and takes an
// interval above zero.
func TestWatchUsage(t *testing.T) {
	path := boltFixture(t, nil)
	r := ctl(t, "release", "host", "bad", "--bolt", path, "--watch")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.err, "flag provided but not defined: -watch")
	r = ctl(t, "kinds", "--bolt", path, "--watch", "--watch-interval", "0s")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.err, "--watch-interval 0s: give a duration above zero")
}
