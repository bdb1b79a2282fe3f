package hostcfg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/convergekit/converge"
)

// WatchDefaultSettle is the quiet period Watch waits for by default: a
// burst of changes (an editor saving, a script writing line by line)
// becomes one trigger, WatchDefaultSettle after the last change of the
// burst.
const WatchDefaultSettle = 100 * time.Millisecond

// WatchDefaultMaxDelay bounds by default the wait from the first change of
// a burst to its trigger, so that a file that never stops changing still
// triggers a pass.
const WatchDefaultMaxDelay = time.Second

// watchRetry is the first delay before Watch sets its watches up again
// after the watch itself failed; it doubles up to watchRetryMax.
const (
	watchRetry    = 100 * time.Millisecond
	watchRetryMax = 10 * time.Second
)

// WatchConfig configures Watch. The zero value takes every default.
type WatchConfig struct {
	// Settle is the quiet period: trigger is called once no change has
	// been seen for Settle. 0 means WatchDefaultSettle.
	Settle time.Duration
	// MaxDelay bounds the wait from the first change of a burst to the
	// trigger, however long the burst goes on. 0 means
	// WatchDefaultMaxDelay. A MaxDelay below Settle makes every trigger
	// come MaxDelay after the first change of a burst.
	MaxDelay time.Duration
	// Logger, when set, gets a Debug line for every trigger, with the
	// paths that changed, and a Warn line when the watch fails and
	// resynchronises. Nil logs nothing.
	Logger *slog.Logger
}

// DefaultWatchConfig returns the configuration the zero WatchConfig
// stands for.
func DefaultWatchConfig() WatchConfig {
	return WatchConfig{Settle: WatchDefaultSettle, MaxDelay: WatchDefaultMaxDelay}
}

// Validate reports the first field out of range as a *converge.ConfigError.
func (c WatchConfig) Validate() error {
	switch {
	case c.Settle < 0:
		return &converge.ConfigError{Field: "Settle", Reason: fmt.Sprintf("must not be negative, got %s", c.Settle)}
	case c.MaxDelay < 0:
		return &converge.ConfigError{Field: "MaxDelay", Reason: fmt.Sprintf("must not be negative, got %s", c.MaxDelay)}
	}
	return nil
}

func (c WatchConfig) withDefaults() WatchConfig {
	if c.Settle == 0 {
		c.Settle = WatchDefaultSettle
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = WatchDefaultMaxDelay
	}
	return c
}

// Watch watches the files at paths inside root and calls trigger when one
// of them changes by another hand than converge's, so that drift is
// repaired as it happens: feed it a reconcile loop's Trigger
// (converge.TargetReconciler.Trigger), as docker.WatchEvents is fed for
// containers. It returns once the watches are in place: every change made
// after Watch returns reaches trigger.
//
// paths are item paths, as File.Path, Line.Path or a ConfigFile's path
// name them ("/etc/app/app.conf"), typically the paths of every hostcfg
// item of the target; they are resolved in root as the items resolve them
// (through symbolic links inside the root; a path that escapes fails Watch
// with an *EscapeError). A path may name a file that does not exist yet,
// in a directory that does not exist yet either: its creation triggers. A
// path that names a directory watches the directory and every entry in it
// (one level), which suits a target that adds and removes files there
// (interfaces.d, conf.d). The set of paths is fixed: to follow a target
// that manages other files, watch their directory, or stop and call Watch
// again.
//
// What triggers: writes, truncation, mode and owner changes, removal,
// creation, and the replacement by rename that editors and tools do (a
// replaced or deleted and recreated file goes on being watched). What does
// not: converge's own writes (and those of another program using hostcfg),
// recognised by their rename of a temporary file; a hand edit right after
// a pass still triggers. A removal or a mode or owner change alone made by
// converge costs one more pass, which finds nothing to do. The recognition
// is exact with inotify (Linux); docs/internals.md says how it works.
//
// Changes are debounced: trigger is called cfg.Settle (WatchDefaultSettle,
// 100ms) after the last change of a burst, and at most cfg.MaxDelay
// (WatchDefaultMaxDelay, 1s) after its first, one call at a time. When the
// watch fails (the kernel's event queue overflowed, or fsnotify reported
// an error), events may have been missed: Watch calls trigger after the
// quiet period as for a change (a resync), sets its watches up again and
// goes on; when they cannot be set up it retries after a backoff that
// doubles from 100ms up to 10s. A directory that appears on the way to a
// watched path is watched from then on; a watched path found existing in
// it triggers, for its changes before the watch was in place were missed.
//
// Limits: the watch follows only the last symbolic link of a path (such
// as /etc/resolv.conf pointing into /run): a change of a link further up
// is seen at the next resync. inotify sees no change under /proc or /sys
// (Sysctl's runtime values) nor on most network file systems; keep a
// reconcile Interval for those. Watching reads no file and writes
// nothing; a directory swapped for a link to outside the root is not
// watched.
//
// The watch ends when ctx is cancelled or stop is called; stop waits until
// trigger is no longer called and may be called more than once. trigger
// must not block for long.
func Watch(ctx context.Context, root *Root, paths []string, trigger func(), cfg WatchConfig) (stop func(), err error) {
	return watch(ctx, root, paths, trigger, cfg, watchHooks{})
}

// watchHooks are the tests' view into a running watch; all nil in
// production.
type watchHooks struct {
	// event is called in the watch's goroutine after each event was
	// handled, with whether a trigger is due (a change seen and not yet
	// passed on).
	event func(ev fsnotify.Event, due bool)
	// inject runs functions in the watch's goroutine.
	inject chan func(*fileWatcher)
}

func watch(ctx context.Context, root *Root, paths []string, trigger func(), cfg WatchConfig, hooks watchHooks) (func(), error) {
	if root == nil || root.r == nil {
		return nil, &ItemError{Item: "watch", Reason: "Root is nil"}
	}
	if trigger == nil {
		return nil, &converge.ConfigError{Field: "trigger", Reason: "must not be nil"}
	}
	if len(paths) == 0 {
		return nil, &converge.ConfigError{Field: "paths", Reason: "must name at least one path"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w := &fileWatcher{root: root, cfg: cfg, trigger: trigger, hooks: hooks,
		log: cfg.Logger, pending: map[string]int{}, changed: map[string]bool{}}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	for _, p := range paths {
		name, err := cleanPath(p)
		if err != nil {
			return nil, err
		}
		// A path leading outside the root fails here, as its item would.
		if _, err := root.resolve(name, true); err != nil {
			return nil, err
		}
		if !slices.Contains(w.names, name) {
			w.names = append(w.names, name)
		}
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, &PathError{Op: "watch", Path: w.names[0], Err: err}
	}
	w.fw = fw
	if err := w.arm(true); err != nil {
		fw.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(wctx)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}, nil
}

// Kinds of names a watched directory holds, as bits.
const (
	// watchFile is a watched path: its changes trigger, and converge's
	// own replacements of it are recognised.
	watchFile uint8 = 1 << iota
	// watchDirPath is a watched path that is a directory (its entries are
	// watched too): a change of the name itself sets the watches up again.
	watchDirPath
	// watchLink is the symbolic link a watched path is reached through:
	// a change triggers and sets the watches up again.
	watchLink
	// watchNext is a missing directory on the way to a watched path: its
	// appearance sets the watches up again.
	watchNext
)

// watchedDir is what matters in one watched directory.
type watchedDir struct {
	rel   string           // root-relative directory, "." for the root
	names map[string]uint8 // entry name -> kinds
	all   bool             // a watched directory: every entry is a watchFile
	info  fs.FileInfo      // the directory watched, to notice a new one
}

func (d *watchedDir) kind(name string) uint8 {
	k := d.names[name]
	if d.all {
		k |= watchFile
	}
	return k
}

// fileWatcher is one Watch. Everything but its configuration belongs to
// the goroutine running run.
type fileWatcher struct {
	root    *Root
	names   []string // canonical paths watched
	cfg     WatchConfig
	trigger func()
	log     *slog.Logger
	hooks   watchHooks

	fw   *fsnotify.Watcher // nil while broken
	dirs map[string]*watchedDir
	// pending counts, per host path, converge's replacements whose rename
	// of the temporary file was seen and whose creation of the name is
	// still to come.
	pending map[string]int
	// changed holds the root-relative paths changed since the last
	// trigger (for the log); resync is set when events may have been lost.
	changed map[string]bool
	resync  bool
	due     bool // a trigger is due: a change was seen since the last one
	kick    bool // a change was seen in this round: restart the quiet period
	again   bool // the watches must be set up again (after a failure)
}

// host returns the host path of a root-relative path ("." is the root).
func (w *fileWatcher) host(rel string) string {
	if rel == "." {
		return filepath.Clean(w.root.dir)
	}
	return filepath.Clean(w.root.host(rel))
}

// display turns a host path into the root-relative path a user names.
func (w *fileWatcher) display(host string) string {
	if rel, ok := w.root.inside(filepath.ToSlash(host)); ok && rel != "." {
		return "/" + rel
	}
	return "/"
}

// plan computes the directories to watch and what matters in each.
func (w *fileWatcher) plan() map[string]*watchedDir {
	plan := map[string]*watchedDir{}
	for _, name := range w.names {
		rel, err := w.root.resolve(name, true)
		if err == nil {
			w.planPath(plan, rel, watchFile)
		} else {
			w.log.Warn("hostcfg: watch: path does not resolve; watching it again when it changes", "path", name, "err", err)
		}
		// The path itself, when it is a symbolic link, changes when the
		// link does.
		if lrel, lerr := w.root.resolve(name, false); lerr == nil && lrel != rel {
			w.planPath(plan, lrel, watchLink)
		}
	}
	return plan
}

// planPath adds rel of the given kind to plan: in its directory when that
// exists, else as the missing directory on the way to it in its deepest
// existing ancestor.
func (w *fileWatcher) planPath(plan map[string]*watchedDir, rel string, kind uint8) {
	get := func(dir string) *watchedDir {
		h := w.host(dir)
		d := plan[h]
		if d == nil {
			d = &watchedDir{rel: dir, names: map[string]uint8{}}
			plan[h] = d
		}
		return d
	}
	if kind == watchFile {
		if fi, err := w.root.r.Lstat(rel); err == nil && fi.IsDir() {
			get(rel).all = true
			kind |= watchDirPath
		}
	}
	cur := rel
	for {
		dir := path.Dir(cur)
		fi, err := w.root.r.Lstat(dir)
		if err == nil && fi.IsDir() {
			get(dir).names[path.Base(cur)] |= kind
			return
		}
		if dir == "." {
			return // the root itself is gone
		}
		cur, kind = dir, watchNext
	}
}

// arm sets the watches up for the current plan: it adds the directories
// planned (adding one already watched is harmless, and renews the watch of
// a directory that was replaced), and removes those no longer planned. A
// directory watched for the first time after the start may hold changes
// made before its watch was in place: any watched path found in it counts
// as changed. At the start (initial), errors are returned; later, they
// make the watch retry after a backoff.
func (w *fileWatcher) arm(initial bool) error {
	plan := w.plan()
	var errs []error
	w.again = false
	for h, d := range plan {
		if err := w.fw.Add(h); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				w.again = true // gone since planned: plan again soon
				delete(plan, h)
				continue
			}
			errs = append(errs, &PathError{Op: "watch", Path: displayPath(w.display(h)), Err: err})
			delete(plan, h)
			continue
		}
		// The host path must lead to the directory the root sees there;
		// one swapped for a link to outside the root is not watched.
		inRoot, err1 := w.root.r.Stat(d.rel)
		onHost, err2 := os.Stat(h)
		if err1 != nil || err2 != nil || !os.SameFile(inRoot, onHost) {
			_ = w.fw.Remove(h)
			delete(plan, h)
			w.again = true
			continue
		}
		d.info = inRoot
		if old := w.dirs[h]; !initial && (old == nil || old.info == nil || !os.SameFile(old.info, inRoot)) {
			w.missed(h, d)
		}
	}
	for h := range w.dirs {
		if plan[h] == nil {
			_ = w.fw.Remove(h)
		}
	}
	w.dirs = plan
	if len(errs) > 0 {
		w.again = true
		return errors.Join(errs...)
	}
	return nil
}

// missed marks as changed the watched paths that exist in a directory
// watched only now.
func (w *fileWatcher) missed(h string, d *watchedDir) {
	if d.all {
		f, err := w.root.r.Open(d.rel)
		if err == nil {
			names, _ := f.Readdirnames(-1)
			f.Close()
			for _, n := range names {
				if _, temp := tempBase(n); !temp {
					w.mark(filepath.Join(h, n))
				}
			}
		}
	}
	for n, k := range d.names {
		if k&(watchFile|watchLink) == 0 {
			continue
		}
		if _, err := w.root.r.Lstat(path.Join(d.rel, n)); err == nil {
			w.mark(filepath.Join(h, n))
		}
	}
}

// tempBase returns the name of the file a temporary file of hostcfg's
// stands for (".<base>" + tempMarker + random hex), and whether name is
// one.
func tempBase(name string) (string, bool) {
	i := strings.LastIndex(name, tempMarker)
	if i < 2 || name[0] != '.' {
		return "", false
	}
	return name[1:i], true
}

// mark notes a change of the host path h: a trigger is due.
func (w *fileWatcher) mark(h string) {
	w.changed[w.display(h)] = true
	w.due, w.kick = true, true
}

// handle handles one event and reports whether the watches must be set up
// again.
func (w *fileWatcher) handle(ev fsnotify.Event) bool {
	h := filepath.Clean(ev.Name)
	if _, ok := w.dirs[h]; ok {
		// An event of a watched directory itself: it was removed or moved.
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			w.mark(h)
			return true
		}
	}
	d := w.dirs[filepath.Dir(h)]
	if d == nil {
		return false // a directory no longer watched
	}
	base := filepath.Base(h)
	if b, ok := tempBase(base); ok {
		// A temporary file of hostcfg's: its rename is the first half of
		// a replacement; everything else about it is of no interest.
		if d.kind(b)&watchFile != 0 && ev.Has(fsnotify.Rename) {
			w.pending[filepath.Join(filepath.Dir(h), b)]++
		}
		return false
	}
	k := d.kind(base)
	if k == 0 {
		return false
	}
	if k&watchFile != 0 && ev.Op == fsnotify.Create && w.pending[h] > 0 {
		// The second half: converge's own write.
		if w.pending[h]--; w.pending[h] == 0 {
			delete(w.pending, h)
		}
		return false
	}
	if k&(watchFile|watchLink|watchDirPath) != 0 {
		w.mark(h)
	}
	return k&(watchDirPath|watchLink|watchNext) != 0 || ev.Has(fsnotify.Create) || ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
}

// failed handles a failure of the watch: events may have been lost.
func (w *fileWatcher) failed(err error) {
	w.log.Warn("hostcfg: watch failed; resynchronising", "err", err)
	clear(w.pending)
	w.resync, w.due, w.kick = true, true, true
	w.again = true
}

// run handles events until ctx ends.
func (w *fileWatcher) run(ctx context.Context) {
	var (
		settle, max, retry    *time.Timer
		settleC, maxC, retryC <-chan time.Time
		backoff               = watchRetry
	)
	defer func() {
		for _, t := range []*time.Timer{settle, max, retry} {
			if t != nil {
				t.Stop()
			}
		}
		if w.fw != nil {
			w.fw.Close()
		}
	}()
	for {
		var events <-chan fsnotify.Event
		var errs <-chan error
		if w.fw != nil {
			events, errs = w.fw.Events, w.fw.Errors
		}
		fire := false
		select {
		case <-ctx.Done():
			return
		case ev, open := <-events:
			if !open {
				w.fw.Close()
				w.fw = nil
				w.failed(errors.New("fsnotify: the watcher stopped"))
				break
			}
			if w.handle(ev) {
				if err := w.arm(false); err != nil {
					w.failed(err)
				}
			}
			if w.hooks.event != nil {
				w.hooks.event(ev, w.due)
			}
		case err, open := <-errs:
			if !open {
				w.fw.Close()
				w.fw = nil
				w.failed(errors.New("fsnotify: the watcher stopped"))
				break
			}
			w.failed(err)
			// Set up again at once: a directory may have been replaced
			// while events were lost.
			if w.arm(false) == nil {
				backoff = watchRetry
			}
		case f := <-w.hooks.inject:
			f(w)
		case <-retryC:
			retryC = nil
			if w.fw == nil {
				fw, err := fsnotify.NewWatcher()
				if err != nil {
					w.log.Warn("hostcfg: watch failed; retrying", "err", err, "retry", backoff)
					w.again = true
					break
				}
				w.fw, w.dirs = fw, nil
			}
			if err := w.arm(false); err != nil {
				w.log.Warn("hostcfg: watch failed; retrying", "err", err, "retry", backoff)
				break
			}
			// Changes made while the watch was down were missed.
			w.resync, w.due, w.kick = true, true, true
		case <-settleC:
			fire = true
		case <-maxC:
			fire = true
		}
		if w.again && retryC == nil {
			if retry == nil {
				retry = time.NewTimer(backoff)
			} else {
				retry.Reset(backoff)
			}
			retryC = retry.C
			backoff = min(backoff*2, watchRetryMax)
			w.again = false
		} else if !w.again && retryC == nil && w.fw != nil {
			backoff = watchRetry
		}
		if w.kick && !fire {
			w.kick = false
			if settle == nil {
				settle = time.NewTimer(w.cfg.Settle)
			} else {
				settle.Reset(w.cfg.Settle)
			}
			settleC = settle.C
			if maxC == nil {
				if max == nil {
					max = time.NewTimer(w.cfg.MaxDelay)
				} else {
					max.Reset(w.cfg.MaxDelay)
				}
				maxC = max.C
			}
		}
		if !fire {
			continue
		}
		settle.Stop()
		max.Stop()
		settleC, maxC = nil, nil
		w.kick = false
		if !w.due || ctx.Err() != nil {
			continue
		}
		paths := make([]string, 0, len(w.changed))
		for p := range w.changed {
			paths = append(paths, p)
		}
		slices.Sort(paths)
		w.log.Debug("hostcfg: watched files changed; triggering a pass", "paths", paths, "resync", w.resync)
		clear(w.changed)
		w.due, w.resync = false, false
		w.trigger()
	}
}
