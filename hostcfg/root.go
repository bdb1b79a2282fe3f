package hostcfg

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
)

// Root is a directory through which every hostcfg item reaches the file
// system: "/" in production, a temporary directory in tests, or the mount
// point of a device image. Item paths are relative to it: "/etc/hostname"
// and "etc/hostname" both name <root>/etc/hostname.
//
// Symbolic links are followed the way the kernel would follow them, but a
// path that climbs above the root with "..", or meets a link whose target
// lies outside the root's directory (relative or absolute), is refused
// with an *EscapeError before anything is written. Every access then goes
// through an os.Root, so a link swapped in after the check cannot lead a
// write outside either.
//
// A Root is safe for concurrent use. Items that write one file take a lock
// per file, so items sharing a file never lose each other's changes. The
// zero value is not usable; call OpenRoot.
type Root struct {
	dir  string // absolute path with symlinks resolved
	r    *os.Root
	dirf *os.File // the root directory, for openBeneath

	mu       sync.Mutex
	locks    map[string]*sync.Mutex
	temps    map[string][]string // dir -> names of our temp files found there
	inflight map[string]bool     // temp files of writes in flight

	// reads counts the files read (for tests of the read cache).
	reads atomic.Int64

	// afterResolve, when set (tests only), runs after a path was resolved
	// and before it is written.
	afterResolve func(rel string)
}

// OpenRoot opens dir as a Root. dir must exist and be a directory.
func OpenRoot(dir string) (*Root, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, &PathError{Op: "open root", Path: dir, Err: err}
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, &PathError{Op: "open root", Path: dir, Err: err}
	}
	r, err := os.OpenRoot(real)
	if err != nil {
		return nil, &PathError{Op: "open root", Path: dir, Err: err}
	}
	// The directory handle serves the fast read path only; without it,
	// reads resolve step by step.
	dirf, _ := os.Open(real)
	return &Root{dir: real, r: r, dirf: dirf, locks: map[string]*sync.Mutex{}, temps: map[string][]string{}, inflight: map[string]bool{}}, nil
}

// Dir returns the absolute directory of the root, with symlinks resolved.
func (r *Root) Dir() string { return r.dir }

// Close releases the root's directory handles. Items using it fail after.
func (r *Root) Close() error {
	if r.dirf != nil {
		r.dirf.Close()
	}
	return r.r.Close()
}

// lock serialises the writers of one resolved path and returns the unlock.
func (r *Root) lock(rel string) func() {
	r.mu.Lock()
	m := r.locks[rel]
	if m == nil {
		m = &sync.Mutex{}
		r.locks[rel] = m
	}
	r.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// permBits are the mode bits hostcfg manages.
const permBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// owner returns the numeric owner of fi, or -1s when unknown.
func owner(fi fs.FileInfo) (int, int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}

// geteuid is os.Geteuid, replaceable in tests.
var geteuid = os.Geteuid

// editResult is the outcome of an edit of a file's content.
type editResult struct {
	// name is the canonical path of the file.
	name string
	// before and after are the content before and after the edit; exists
	// and existsAfter say whether the file exists.
	before, after       []byte
	exists, existsAfter bool
	// leftovers counts temporary files of ours next to the file (before).
	leftovers int
	// diff is the unified diff of the edit, "" when nothing changes; only
	// computed for a dry run.
	diff string
}

// changed reports whether the edit changes the content.
func (e editResult) changed() bool {
	return e.exists != e.existsAfter || !bytes.Equal(e.before, e.after)
}

// edit reads the file at p (following links inside the root), computes its
// new content with fn, and, when write is set, writes it atomically, keeping
// the file's mode and owner (a new file gets newMode). fn receives nil for a
// missing file and returns nil to leave it missing. The file is locked for
// the whole edit, so concurrent edits of one file never lose each other's
// changes.
func (r *Root) edit(ctx context.Context, p string, write bool, newMode fs.FileMode, fn func(cur []byte) ([]byte, error)) (editResult, error) {
	if err := ctx.Err(); err != nil {
		return editResult{}, err
	}
	name, rel, err := resolveItem(r, p, true)
	if err != nil {
		return editResult{}, err
	}
	unlock := r.lock(rel)
	defer unlock()
	// Read again under the lock: another edit may have just written.
	name, rel2, cur, err := r.readResolved(p)
	if err != nil {
		return editResult{}, err
	}
	if rel2 != rel {
		return editResult{}, &PathError{Op: "edit", Path: name, Err: errors.New("the path changed while it was edited")}
	}
	var in []byte
	if cur.exists {
		in = cur.content
		if in == nil {
			in = []byte{}
		}
	}
	next, err := fn(in)
	if err != nil {
		return editResult{}, err
	}
	res := editResult{name: name, before: cur.content, after: next, exists: cur.exists, existsAfter: next != nil || cur.exists}
	if res.existsAfter && next == nil {
		res.after = cur.content
	}
	res.leftovers = len(r.leftovers(rel))
	if !write {
		res.diff = unifiedDiff(name, res.before, res.after, res.exists, res.existsAfter)
		return res, nil
	}
	if err := r.sweep(name, rel); err != nil {
		return editResult{}, err
	}
	if !res.changed() {
		return res, nil
	}
	m, err := planMeta(name, cur.exists, cur.mode, cur.uid, cur.gid, 0, -1, -1, newMode)
	if err != nil {
		return editResult{}, err
	}
	if err := r.writeAtomic(ctx, name, rel, res.after, m.spec()); err != nil {
		return editResult{}, err
	}
	return res, nil
}
