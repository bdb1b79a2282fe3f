package hostcfg

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// Root is a directory through which every hostcfg item reaches the file
// system: "/" in production, a temporary directory in tests, or the mount
// point of a device image. Item paths are relative to it: "/etc/hostname"
// and "etc/hostname" both name <root>/etc/hostname.
//
// Symbolic links are followed the way the kernel would follow them, but a
// path that climbs above the root with "..", or meets a link whose target
// lies outside the root's directory (relative or absolute), is refused
// with an *EscapeError before anything is written. Every access, reads
// and stats included, then goes through an os.Root (or one openat2 call
// confined beneath the root), never through a host path, so a directory
// swapped for a link after the check cannot lead a read or a write
// outside: a read keeps only the very file resolution saw. A file with
// other hard links is never changed in place (see File and ErrHardLinked).
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
	// beforeOpen, when set (tests only), runs after a path was resolved
	// and before the file there is opened to be read.
	beforeOpen func(rel string)
	// beforeLook, when set (tests only), runs before resolution looks at
	// a component (the root-relative path up to it).
	beforeLook func(rel string)
	// syncHook, when set (tests only), runs for every directory synced.
	syncHook func(dir string)
	// stampHook, when set (tests only), changes every stamp the read cache
	// of ConfigFile takes, to play a file system with coarse timestamps.
	stampHook func(*fileStamp)
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
