package hostcfg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/convergekit/converge"
)

// watchDeadline is how long a test waits for something the watch must do
// before it fails: a deadline for a failure, never a wait a test relies on.
const watchDeadline = 10 * time.Second

// testSettle is the quiet period of the tests' watches: short, so tests
// are fast; the watch's correctness does not depend on it.
const testSettle = 50 * time.Millisecond

// watchProbe is a running watch seen from a test: its triggers and every
// event it handled.
type watchProbe struct {
	t        *testing.T
	triggers chan struct{}
	count    atomic.Int64
	events   chan probeEvent
	inject   chan func(*fileWatcher)
	stop     func()
	fences   int
}

type probeEvent struct {
	ev  fsnotify.Event
	due bool
}

// startWatch watches paths in root with the tests' quiet period (unless
// cfg says otherwise) and stops the watch when the test ends.
func startWatch(t *testing.T, root *Root, cfg WatchConfig, paths ...string) *watchProbe {
	t.Helper()
	if cfg.Settle == 0 {
		cfg.Settle = testSettle
	}
	p := &watchProbe{t: t, triggers: make(chan struct{}, 1000), events: make(chan probeEvent, 1<<16), inject: make(chan func(*fileWatcher))}
	stop, err := watch(t.Context(), root, paths, func() {
		p.count.Add(1)
		p.triggers <- struct{}{}
	}, cfg, watchHooks{
		event:  func(ev fsnotify.Event, due bool) { p.events <- probeEvent{ev, due} },
		inject: p.inject,
	})
	require.NoError(t, err)
	p.stop = stop
	t.Cleanup(stop)
	return p
}

// waitTrigger waits for the next trigger and returns how long it took.
func (p *watchProbe) waitTrigger(what string) time.Duration {
	p.t.Helper()
	start := time.Now()
	select {
	case <-p.triggers:
		return time.Since(start)
	case <-time.After(watchDeadline):
		p.t.Fatalf("%s: no trigger within %s", what, watchDeadline)
		return 0
	}
}

// fence writes a file nobody watches in dir (a watched directory) and
// waits until the watch has handled its event. The kernel reports the
// events of one watch in order, so every event of what the test did
// before has been handled by then. It returns whether a trigger is due
// then: false means no further trigger will come from what came before.
func (p *watchProbe) fence(dir string) bool {
	p.t.Helper()
	p.fences++
	name := filepath.Join(dir, "zz-fence-"+strconv.Itoa(p.fences))
	require.NoError(p.t, os.WriteFile(name, nil, 0o644))
	deadline := time.After(watchDeadline)
	for {
		select {
		case e := <-p.events:
			if filepath.Clean(e.ev.Name) == name {
				return e.due
			}
		case <-deadline:
			p.t.Fatalf("the fence %s was not seen within %s", name, watchDeadline)
		}
	}
}

// run runs f in the watch's goroutine and waits for it.
func (p *watchProbe) run(f func(w *fileWatcher)) {
	p.t.Helper()
	done := make(chan struct{})
	select {
	case p.inject <- func(w *fileWatcher) { f(w); close(done) }:
	case <-time.After(watchDeadline):
		p.t.Fatal("the watch does not run")
	}
	<-done
}

// applyFile converges a File with content through a walk, as a pass does.
func applyFile(t *testing.T, root *Root, path, content string) {
	t.Helper()
	mustApply(t, graph((&File{Root: root, Path: path, Content: []byte(content)}).Node()))
}

func TestWatchTriggersOnHandEdits(t *testing.T) {
	tests := []struct {
		name string
		// path is watched; app.conf exists in /etc with "v1" before.
		path string
		act  func(t *testing.T, dir string)
		// fenceDir is where the fence goes (root-relative); "etc" unless set.
		fenceDir string
		// want is the exact number of triggers, or atMost their bound
		// when a burst may be cut in two by a slow machine.
		want, atMost int64
	}{
		{name: "hand edit", path: "/etc/app.conf", want: 1, act: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "etc/app.conf"), "edited\n")
		}},
		{name: "append", path: "/etc/app.conf", want: 1, act: func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, "etc/app.conf"), os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteString("more\n")
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
		{name: "burst of 50 writes", path: "/etc/app.conf", atMost: 3, act: func(t *testing.T, dir string) {
			for i := range 50 {
				writeFile(t, filepath.Join(dir, "etc/app.conf"), fmt.Sprintf("write %d\n", i))
			}
		}},
		{name: "editor replaces by rename", path: "/etc/app.conf", want: 1, act: func(t *testing.T, dir string) {
			tmp := filepath.Join(dir, "etc/.app.conf.swp")
			writeFile(t, tmp, "saved by an editor\n")
			require.NoError(t, os.Rename(tmp, filepath.Join(dir, "etc/app.conf")))
		}},
		{name: "editor keeps a backup", path: "/etc/app.conf", atMost: 2, act: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "etc/app.conf")
			require.NoError(t, os.Rename(p, p+"~"))
			writeFile(t, p, "saved by vi\n")
			require.NoError(t, os.Remove(p+"~"))
		}},
		{name: "delete", path: "/etc/app.conf", want: 1, act: func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "etc/app.conf")))
		}},
		{name: "delete and recreate", path: "/etc/app.conf", atMost: 2, act: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "etc/app.conf")
			require.NoError(t, os.Remove(p))
			writeFile(t, p, "recreated\n")
		}},
		{name: "mode change", path: "/etc/app.conf", want: 1, act: func(t *testing.T, dir string) {
			require.NoError(t, os.Chmod(filepath.Join(dir, "etc/app.conf"), 0o600))
		}},
		{name: "file that did not exist", path: "/etc/new.conf", want: 1, act: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "etc/new.conf"), "new\n")
		}},
		{name: "file in a directory that did not exist", path: "/etc/app.d/sub/x.conf", fenceDir: "etc/app.d/sub", atMost: 2, act: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "etc/app.d/sub/x.conf"), "x\n")
		}},
		{name: "the file a link leads to", path: "/etc/link.conf", want: 1, act: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "etc/app.conf"), "through the link\n")
		}},
		{name: "the link itself", path: "/etc/link.conf", atMost: 2, act: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "etc/other.conf"), "other\n")
			p := filepath.Join(dir, "etc/link.conf")
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Symlink("other.conf", p))
		}},
		{name: "new entry of a watched directory", path: "/etc/conf.d", fenceDir: "etc", want: 1, act: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "etc/conf.d/extra.conf"), "extra\n")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, dir, _ := newRoot(t)
			writeFile(t, filepath.Join(dir, "etc/app.conf"), "v1\n")
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/conf.d"), 0o755))
			require.NoError(t, os.Symlink("app.conf", filepath.Join(dir, "etc/link.conf")))
			p := startWatch(t, root, WatchConfig{}, tt.path)

			tt.act(t, dir)
			took := p.waitTrigger(tt.name)
			t.Logf("triggered %s after the change", took)
			fenceDir := tt.fenceDir
			if fenceDir == "" {
				fenceDir = "etc"
			}
			// Every event of the change is handled now; wait for the
			// trigger still due, if any, then check none is left.
			for p.fence(filepath.Join(dir, fenceDir)) {
				p.waitTrigger(tt.name + ", the rest of the burst")
			}
			if tt.want > 0 {
				assert.Equal(t, tt.want, p.count.Load(), "triggers")
			} else {
				assert.LessOrEqual(t, p.count.Load(), tt.atMost, "triggers")
			}
		})
	}
}

func TestWatchIgnoresConvergeWrites(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("converge's writes are told apart exactly with inotify only")
	}
	tests := []struct {
		name string
		path string // watched
		walk func(t *testing.T, root *Root)
	}{
		{name: "File created", path: "/etc/new.conf", walk: func(t *testing.T, root *Root) {
			applyFile(t, root, "/etc/new.conf", "created by converge\n")
		}},
		{name: "File changed", path: "/etc/app.conf", walk: func(t *testing.T, root *Root) {
			applyFile(t, root, "/etc/app.conf", "v2\n")
		}},
		{name: "File changed 20 times", path: "/etc/app.conf", walk: func(t *testing.T, root *Root) {
			for i := range 20 {
				applyFile(t, root, "/etc/app.conf", fmt.Sprintf("v%d\n", i+2))
			}
		}},
		{name: "File through a link", path: "/etc/link.conf", walk: func(t *testing.T, root *Root) {
			applyFile(t, root, "/etc/link.conf", "through the link\n")
		}},
		{name: "File in a watched directory", path: "/etc/conf.d", walk: func(t *testing.T, root *Root) {
			applyFile(t, root, "/etc/conf.d/a.conf", "a\n")
			applyFile(t, root, "/etc/conf.d/a.conf", "a2\n")
		}},
		{name: "Line", path: "/etc/app.conf", walk: func(t *testing.T, root *Root) {
			mustApply(t, graph((&Line{Root: root, Path: "/etc/app.conf", Line: "added=1"}).Node()))
		}},
		{name: "ConfigFile key", path: "/etc/app.conf", walk: func(t *testing.T, root *Root) {
			cf := NewConfigFile(root, "/etc/app.conf")
			cf.Reboot = false
			mustApply(t, graph(cf.Key("", "port", "8080").Node()))
		}},
		{name: "converged walk", path: "/etc/app.conf", walk: func(t *testing.T, root *Root) {
			applyFile(t, root, "/etc/app.conf", "v1\n") // already so: nothing written
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, dir, _ := newRoot(t)
			writeFile(t, filepath.Join(dir, "etc/app.conf"), "v1\n")
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/conf.d"), 0o755))
			require.NoError(t, os.Symlink("app.conf", filepath.Join(dir, "etc/link.conf")))
			p := startWatch(t, root, WatchConfig{}, tt.path)

			tt.walk(t, root)
			// The fence goes in /etc, watched in every case (for the
			// directory case, as the parent of /etc/conf.d).
			assert.False(t, p.fence(filepath.Join(dir, "etc")), "no trigger is due after converge's own writes")
			assert.Zero(t, p.count.Load(), "triggers")
		})
	}
}

// TestWatchEditRightAfterConvergeWrite: a hand edit right after converge
// wrote the file is never taken for converge's write, however close.
func TestWatchEditRightAfterConvergeWrite(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, p string)
	}{
		{"write", func(t *testing.T, p string) { require.NoError(t, os.WriteFile(p, []byte("hand\n"), 0o644)) }},
		{"rename over", func(t *testing.T, p string) {
			writeFile(t, p+".new", "hand\n")
			require.NoError(t, os.Rename(p+".new", p))
		}},
		{"delete", func(t *testing.T, p string) { require.NoError(t, os.Remove(p)) }},
		{"chmod", func(t *testing.T, p string) { require.NoError(t, os.Chmod(p, 0o600)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, dir, _ := newRoot(t)
			writeFile(t, filepath.Join(dir, "etc/app.conf"), "v0\n")
			p := startWatch(t, root, WatchConfig{}, "/etc/app.conf")
			for i := range 10 {
				applyFile(t, root, "/etc/app.conf", fmt.Sprintf("v%d\n", i+1))
				tt.edit(t, filepath.Join(dir, "etc/app.conf"))
				p.waitTrigger(fmt.Sprintf("edit %d", i))
				for p.fence(filepath.Join(dir, "etc")) {
					p.waitTrigger("the rest")
				}
				require.EqualValues(t, i+1, p.count.Load(), "one trigger per edit")
			}
		})
	}
}

// TestWatchMaxDelay: a file that never stops changing still triggers,
// after MaxDelay rather than after a quiet period that never comes.
func TestWatchMaxDelay(t *testing.T) {
	root, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "etc/app.conf"), "v0\n")
	const settle = time.Minute
	p := startWatch(t, root, WatchConfig{Settle: settle, MaxDelay: 50 * time.Millisecond}, "/etc/app.conf")

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond) // the stream, not a synchronisation
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = os.WriteFile(filepath.Join(dir, "etc/app.conf"), []byte(strconv.Itoa(i)), 0o644)
			}
		}
	}()
	took := p.waitTrigger("a continuous stream")
	cancel()
	<-done
	assert.Less(t, took, settle, "the max delay fired, not the quiet period")
}

// TestWatchResyncs: when the watch fails, a pass is triggered and the
// watch goes on.
func TestWatchResyncs(t *testing.T) {
	tests := []struct {
		name string
		fail func(w *fileWatcher)
	}{
		{"overflow", func(w *fileWatcher) { w.failed(fsnotify.ErrEventOverflow) }},
		{"error", func(w *fileWatcher) {
			// Errors arrive as fsnotify sends them: handled by the loop.
			go func(errs chan error) { errs <- fmt.Errorf("read: %w", os.ErrInvalid) }(w.fw.Errors)
		}},
		{"watcher closed", func(w *fileWatcher) { w.fw.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, dir, _ := newRoot(t)
			writeFile(t, filepath.Join(dir, "etc/app.conf"), "v0\n")
			p := startWatch(t, root, WatchConfig{}, "/etc/app.conf")
			p.run(tt.fail)
			p.waitTrigger("resync")
			// Wait until the watch is set up again (at once, or after the
			// retry delay when fsnotify's watcher had to be replaced).
			deadline := time.Now().Add(watchDeadline)
			for rearmed := false; !rearmed; {
				require.True(t, time.Now().Before(deadline), "the watch is not set up again")
				p.run(func(w *fileWatcher) { rearmed = w.fw != nil && len(w.dirs) > 0 })
			}
			// Still watching, and still telling converge's writes apart.
			for p.fence(filepath.Join(dir, "etc")) {
				p.waitTrigger("the rest")
			}
			n := p.count.Load()
			applyFile(t, root, "/etc/app.conf", "by converge\n")
			writeFile(t, filepath.Join(dir, "etc/app.conf"), "by hand\n")
			p.waitTrigger("an edit after the resync")
			for p.fence(filepath.Join(dir, "etc")) {
				p.waitTrigger("the rest")
			}
			assert.Equal(t, n+1, p.count.Load())
		})
	}
}

// TestWatchKernelQueueOverflow overflows the kernel's event queue for
// real: the watch stalls while more events happen than the queue holds.
func TestWatchKernelQueueOverflow(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skip("no inotify queue limit to overflow")
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || limit > 1<<16 {
		t.Skipf("the inotify queue holds %s events: too many to overflow quickly", strings.TrimSpace(string(b)))
	}
	root, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "etc/app.conf"), "v0\n")
	p := startWatch(t, root, WatchConfig{}, "/etc/app.conf")
	release := make(chan struct{})
	stalled := make(chan struct{})
	go p.run(func(*fileWatcher) { close(stalled); <-release }) // holds the watch's goroutine
	<-stalled
	// Files nobody watches: only the overflow can trigger.
	for i := range limit + 8000 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "etc", "junk-"+strconv.Itoa(i)), nil, 0o644))
	}
	close(release)
	p.waitTrigger("overflow")
	writeFile(t, filepath.Join(dir, "etc/app.conf"), "by hand\n")
	p.waitTrigger("an edit after the overflow")
}

func TestWatchStops(t *testing.T) {
	tests := []struct {
		name string
		stop func(stop func(), cancel context.CancelFunc)
	}{
		{"stop", func(stop func(), _ context.CancelFunc) { stop(); stop() }},
		{"context", func(stop func(), cancel context.CancelFunc) { cancel(); stop() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			root, dir, _ := newRoot(t)
			writeFile(t, filepath.Join(dir, "etc/app.conf"), "v0\n")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var n atomic.Int64
			stop, err := Watch(ctx, root, []string{"/etc/app.conf"}, func() { n.Add(1) }, WatchConfig{Settle: testSettle})
			require.NoError(t, err)
			writeFile(t, filepath.Join(dir, "etc/app.conf"), "edited\n")
			tt.stop(stop, cancel)
			// stop returned: trigger is never called again, and nothing
			// of the watch (fsnotify's reader included) is left running.
			after := n.Load()
			writeFile(t, filepath.Join(dir, "etc/app.conf"), "edited again\n")
			goleak.VerifyNone(t, before)
			assert.Equal(t, after, n.Load())
		})
	}
}

func TestWatchRefusesBadArguments(t *testing.T) {
	root, dir, _ := newRoot(t)
	require.NoError(t, os.Symlink("/../../outside", filepath.Join(dir, "out")))
	tests := []struct {
		name    string
		root    *Root
		paths   []string
		trigger func()
		cfg     WatchConfig
		is      error
	}{
		{"nil root", nil, []string{"/a"}, func() {}, WatchConfig{}, ErrInvalidItem},
		{"nil trigger", root, []string{"/a"}, nil, WatchConfig{}, converge.ErrInvalidConfig},
		{"no paths", root, nil, func() {}, WatchConfig{}, converge.ErrInvalidConfig},
		{"negative settle", root, []string{"/a"}, func() {}, WatchConfig{Settle: -1}, converge.ErrInvalidConfig},
		{"negative max delay", root, []string{"/a"}, func() {}, WatchConfig{MaxDelay: -time.Second}, converge.ErrInvalidConfig},
		{"escape", root, []string{"/../x"}, func() {}, WatchConfig{}, ErrEscape},
		{"escape through a link", root, []string{"/out/x"}, func() {}, WatchConfig{}, ErrEscape},
		{"empty path", root, []string{""}, func() {}, WatchConfig{}, ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stop, err := Watch(t.Context(), tt.root, tt.paths, tt.trigger, tt.cfg)
			require.ErrorIs(t, err, tt.is)
			assert.Nil(t, stop)
		})
	}
	assert.NoError(t, DefaultWatchConfig().Validate())
	assert.Equal(t, DefaultWatchConfig(), WatchConfig{}.withDefaults())
}
