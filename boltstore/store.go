package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/convergekit/converge"
)

// DefaultLockTimeout is how long Open waits, when Options.LockTimeout is 0,
// for another process to let go of the file.
const DefaultLockTimeout = time.Second

// FormatVersion is the version of the file layout this package writes. A
// file written by a newer layout is refused with ErrNewerFormat.
const FormatVersion = 2

// The reasons of an *OpenError. They are always wrapped in an *OpenError
// that names the file.
var (
	// ErrNotStore means the file is not a store: it is a directory, holds
	// something else than a bbolt database (random bytes, text), or is a
	// bbolt database of another program.
	ErrNotStore = errors.New("not a converge store file")
	// ErrFileLocked means another process has the file open: a store file
	// belongs to one process at a time.
	ErrFileLocked = errors.New("store file is locked by another process")
	// ErrNewerFormat means the file was written by a newer version of this
	// package, with a layout this one cannot read.
	ErrNewerFormat = errors.New("store file written by a newer format version")
)

// ErrReadOnly means a store opened with Options.ReadOnly was asked to
// write: every write of such a Store fails with it, naming the call, and
// Open fails with it (in an *OpenError) when the file needs a write before
// it can be read (it holds no store yet, or is of an older format).
var ErrReadOnly = errors.New("boltstore: store is open read-only")

// Errors of a Store in use.
var (
	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("boltstore: store is closed")
	// ErrCorrupt means the file or an entry in it is damaged: Open finds
	// a truncated file, a damaged page or an entry whose checksum does not
	// match (in an *OpenError naming the file), or a call reads a record,
	// lease, history entry or target that fails its checksum (the error
	// names the key). Damaged data is never returned as good.
	ErrCorrupt = errors.New("boltstore: stored data is corrupt")
)

// OpenError is the error of Open. It names the file the caller gave and
// matches its reason (ErrNotStore, ErrCorrupt, ErrFileLocked, ErrReadOnly,
// ErrNewerFormat) and the underlying error, if any, with errors.Is and
// errors.As.
type OpenError struct {
	// Path is the file as given to Open.
	Path string
	// Reason is ErrNotStore, ErrCorrupt, ErrFileLocked, ErrNewerFormat,
	// ErrReadOnly, or
	// nil when the file could not be opened for another reason (see Err).
	Reason error
	// Err is the underlying error (from the operating system or bbolt), or
	// nil.
	Err error
}

// Error describes the problem, naming the file.
func (e *OpenError) Error() string {
	msg := "boltstore: open " + strconv.Quote(e.Path)
	if e.Reason != nil {
		msg += ": " + strings.TrimPrefix(e.Reason.Error(), "boltstore: ")
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the reason and the underlying error.
func (e *OpenError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Reason, e.Err} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Options tunes a Store. The zero value keeps DefaultHistoryEntries per key,
// seals nothing, waits DefaultLockTimeout for the file, uses time.Now and
// fails Open on a damaged file.
type Options struct {
	// Retention bounds the history kept per key; it is applied when a
	// key's history is appended to.
	Retention converge.Retention
	// Sealer, when set, seals every record value and every target at rest
	// (see converge.Sealer for what is and is not covered), and a value
	// that is not sealed is refused with an error matching
	// converge.ErrNotSealed. Without it, a sealed value is refused with an
	// error matching converge.ErrSealed.
	Sealer converge.Sealer
	// AllowClear, with a Sealer, reads a value that is not sealed as the
	// clear JSON it is instead of refusing it: the migration path for a
	// file written before sealing was turned on. Open the file with
	// Sealer and AllowClear, run converge.Reseal (naming the targets),
	// then open it without AllowClear. Leave it off otherwise: anyone who
	// can write the file could then plant a clear value. Without a Sealer
	// it changes nothing.
	AllowClear bool
	// LockTimeout is how long Open waits for another process to let go of
	// the file before it fails with ErrFileLocked; 0 means
	// DefaultLockTimeout and a negative value fails at once.
	LockTimeout time.Duration
	// Now returns the current time, for leases, due times and history
	// retention; nil means time.Now.
	Now func() time.Time
	// OnCorrupt, when set, makes Open start over instead of failing when
	// the file is damaged (an error matching ErrCorrupt): the damaged
	// file is renamed aside (never deleted; see Recovery.MovedTo), a new
	// empty store is created at the path, and OnCorrupt is called with
	// what happened, for the program to log, before Open returns the new
	// store. It suits a device agent whose state can be rebuilt (a target
	// sent again, a walk that reads the real state), on a medium that
	// loses power mid-write. Nil: Open fails with ErrCorrupt and leaves
	// the file as it is. Other errors (ErrNotStore, ErrFileLocked,
	// ErrNewerFormat) never start over: that file may be someone else's.
	// It is not used with ReadOnly.
	OnCorrupt func(Recovery)
	// ReadOnly opens the file for reading only, as a tool that looks into
	// the store of a program does: it takes a shared lock, so several
	// readers may have the file open at once, but never while a process
	// has it open for writing (Open then fails with ErrFileLocked after
	// LockTimeout, and a writer fails so while a reader holds it). The
	// file must exist (a missing file fails, matching fs.ErrNotExist, and
	// is not created) and hold a store of the current format (a file that
	// would need a write first, one with no store yet or of an older
	// format, fails with ErrReadOnly). Nothing is written to the file:
	// every write of the Store fails with ErrReadOnly, and a damaged file
	// fails with ErrCorrupt whatever OnCorrupt says.
	ReadOnly bool
}

// Store is the durable converge.Store and converge.Queue kept in one bbolt
// file, for one process. Every write is on disk (fsync) before it returns;
// concurrent writes share one commit. It is safe for concurrent use. Create
// one with Open and Close it when done.
type Store struct {
	db     *bolt.DB
	path   string
	sealer converge.Sealer
	clear  bool // Options.AllowClear
	ro     bool // Options.ReadOnly
	now    func() time.Time
	keep   int           // history entries kept per key; < 0: all
	maxAge time.Duration // 0: any age

	// Group commit: the first writer leads, later ones queue and ride on
	// the next commit.
	wmu     sync.Mutex
	queue   []*op
	leading bool

	watchMu  sync.Mutex
	watchers map[*watcher]struct{}
	closed   bool
}

var (
	_ converge.Store = (*Store)(nil)
	_ converge.Queue = (*Store)(nil)

	_ converge.Prioritizer = (*Store)(nil)
)

// Bucket and key names of format version 1.
var (
	bucketMeta    = []byte("meta")
	bucketRecords = []byte("records")
	bucketHistory = []byte("history")
	bucketTargets = []byte("targets")
	bucketLeases  = []byte("leases")
	bucketDue     = []byte("due")
	keyFormat     = []byte("format")
	allBuckets    = [][]byte{bucketMeta, bucketRecords, bucketHistory, bucketTargets, bucketLeases, bucketDue}
)

// Open opens the store in the file at path, creating it when it does not
// exist (an existing empty file is taken as a new store too). The file is
// locked for this process until Close. Open fails with an *OpenError that
// names path: ErrNotStore for a directory or a file that holds anything
// else, ErrCorrupt for a store file that is damaged (truncated, a page or
// a value changed on the disk), ErrFileLocked when another process holds
// the file for longer than opts.LockTimeout, ErrNewerFormat for a file
// written by a newer version. In none of these cases is the file written
// to, unless opts.OnCorrupt asks to move a damaged file aside.
//
// Before bbolt maps the file, Open reads it and checks what bbolt would
// trust: both meta pages, the file's size against the page count they
// give, and every page reachable from the current one (in range, of the
// right kind, referenced once, its entries inside it, its keys in order).
// It then checks the checksum of every entry of the store. Both passes
// read the whole file, once, at open; a damaged file never crashes the
// process and never gets as far as a read. A file of format version 1
// (before checksums) is upgraded in place, in one transaction, after its
// entries are checked as far as that format allows.
func Open(path string, opts Options) (*Store, error) {
	st, err := open(path, opts)
	if err == nil || opts.OnCorrupt == nil || opts.ReadOnly || !errors.Is(err, ErrCorrupt) {
		return st, err
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	moved, merr := moveAside(path, now())
	if merr != nil {
		var oe *OpenError
		var le *os.LinkError
		if errors.As(err, &oe) && errors.As(merr, &le) {
			return nil, &OpenError{Path: path, Reason: ErrCorrupt, Err: fmt.Errorf("%w; moving it aside to %s failed: %w", oe.Err, le.New, le.Err)}
		}
		return nil, errors.Join(err, merr)
	}
	st, err2 := open(path, opts)
	if err2 != nil {
		return nil, err2
	}
	opts.OnCorrupt(Recovery{Path: path, MovedTo: moved, Err: err})
	return st, nil
}

// Recovery tells what Open did with a damaged store file when
// Options.OnCorrupt is set.
type Recovery struct {
	// Path is the store file as given to Open, now a new, empty store.
	Path string
	// MovedTo is where the damaged file is now: in the same directory,
	// Path + ".corrupt-" + the UTC time of the move (20060102T150405Z),
	// with "-2", "-3", ... added when that name is taken.
	MovedTo string
	// Err is the error Open would have returned without OnCorrupt: an
	// *OpenError matching ErrCorrupt that says what is damaged.
	Err error
}

// moveAside renames the file at path to a free name beside it, and syncs
// the directory so the rename survives a power cut.
func moveAside(path string, now time.Time) (string, error) {
	base := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	to := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(to); errors.Is(err, fs.ErrNotExist) {
			break
		} else if err != nil {
			return "", err
		}
		to = base + "-" + strconv.Itoa(i)
	}
	if err := os.Rename(path, to); err != nil {
		return "", err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return to, nil
}

// open is Open without the recovery.
func open(path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, &OpenError{Path: path, Err: &converge.StoreRequestError{Field: "path", Reason: "must not be empty"}}
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, &OpenError{Path: path, Reason: ErrNotStore, Err: errors.New("is a directory")}
	}
	timeout := opts.LockTimeout
	switch {
	case timeout == 0:
		timeout = DefaultLockTimeout
	case timeout < 0:
		timeout = time.Nanosecond // bbolt waits forever on 0
	}
	if err := precheck(path, timeout, opts.ReadOnly); err != nil {
		return nil, err
	}
	db, err := openBolt(path, timeout, opts.ReadOnly)
	if err != nil {
		return nil, openError(path, err)
	}
	if err := initialize(db, opts.ReadOnly); err != nil {
		_ = db.Close()
		var oe *OpenError
		if errors.As(err, &oe) {
			oe.Path = path
			return nil, oe
		}
		return nil, &OpenError{Path: path, Err: err}
	}
	s := &Store{db: db, path: path, sealer: opts.Sealer, clear: opts.AllowClear, ro: opts.ReadOnly, now: opts.Now, keep: opts.Retention.Entries, maxAge: opts.Retention.Age}
	if s.now == nil {
		s.now = time.Now
	}
	if s.keep == 0 {
		s.keep = converge.DefaultHistoryEntries
	}
	return s, nil
}

// precheck checks the pages of the file at path (see checkFile) under a
// shared lock, so that a process writing the file makes Open fail with
// ErrFileLocked, not with a damage it saw half-written.
func precheck(path string, timeout time.Duration, readOnly bool) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && !readOnly {
		return nil // bbolt creates it
	}
	if err != nil {
		return openError(path, err)
	}
	defer f.Close()
	if err := lockShared(f, timeout); err != nil {
		if errors.Is(err, errLocked) {
			return &OpenError{Path: path, Reason: ErrFileLocked}
		}
		return &OpenError{Path: path, Err: fmt.Errorf("lock: %w", err)}
	}
	fi, err := f.Stat()
	if err != nil {
		return &OpenError{Path: path, Err: err}
	}
	if fi.Size() == 0 {
		if readOnly {
			return &OpenError{Path: path, Reason: ErrReadOnly, Err: errors.New("the file is empty: it holds no store yet")}
		}
		return nil
	}
	err = checkFile(f, fi.Size())
	var d *errDamaged
	switch {
	case err == nil:
		return nil
	case errors.As(err, &d):
		return &OpenError{Path: path, Reason: ErrCorrupt, Err: err}
	case errors.Is(err, ErrNotStore):
		return &OpenError{Path: path, Reason: ErrNotStore, Err: errors.New("no bbolt meta page")}
	}
	return &OpenError{Path: path, Err: err}
}

// openBolt opens the bbolt file, turning a panic of bbolt in this
// goroutine (none is expected once precheck passed) into an error.
func openBolt(path string, timeout time.Duration, readOnly bool) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, &errDamaged{msg: fmt.Sprintf("bbolt: %v", r)}
		}
	}()
	return bolt.Open(path, 0o600, &bolt.Options{
		Timeout: timeout,
		// The freelist is rebuilt from the pages at open rather than
		// written at every commit: fewer pages per commit, same safety.
		// precheck has checked every page that rebuild reads.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		ReadOnly:       readOnly,
	})
}

// openError classifies an error of bolt.Open.
func openError(path string, err error) error {
	var d *errDamaged
	switch {
	case errors.As(err, &d):
		return &OpenError{Path: path, Reason: ErrCorrupt, Err: err}
	case errors.Is(err, berrors.ErrTimeout):
		return &OpenError{Path: path, Reason: ErrFileLocked}
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch),
		errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrInvalidMapping):
		return &OpenError{Path: path, Reason: ErrNotStore, Err: err}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// The path is named by OpenError already.
		err = fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) {
		return &OpenError{Path: path, Err: err}
	}
	// bbolt reports a file too short to hold its pages with an untyped
	// error; anything else that is not the operating system's is also a
	// file bbolt cannot read.
	return &OpenError{Path: path, Reason: ErrNotStore, Err: err}
}

// initialize checks the file's format and every entry, creates the
// buckets of a new store and upgrades a file of format version 1. It
// writes only to a file with no bucket at all or of an older format, and
// fails with ErrReadOnly instead when readOnly.
func initialize(db *bolt.DB, readOnly bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &OpenError{Reason: ErrCorrupt, Err: fmt.Errorf("bbolt: %v", r)}
		}
	}()
	fresh, format := false, 0
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty, ours := true, false
			_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
				empty = false
				ours = ours || slices.ContainsFunc(allBuckets, func(b []byte) bool { return bytes.Equal(b, name) })
				return nil
			})
			switch {
			case ours:
				return &OpenError{Reason: ErrCorrupt, Err: fmt.Errorf("bucket %q is missing", bucketMeta)}
			case !empty:
				return &OpenError{Reason: ErrNotStore, Err: errors.New("a bbolt database of another program")}
			}
			fresh = true
			return nil
		}
		raw := meta.Get(keyFormat)
		v, err := strconv.Atoi(string(raw))
		if err != nil || v < 1 {
			return &OpenError{Reason: ErrCorrupt, Err: fmt.Errorf("format version %q", raw)}
		}
		if v > FormatVersion {
			return &OpenError{Reason: ErrNewerFormat, Err: fmt.Errorf("version %d, this package reads up to %d", v, FormatVersion)}
		}
		format = v
		if err := verify(tx, v); err != nil {
			var ce *corruptEntry
			if errors.As(err, &ce) {
				err = errors.New(ce.what)
			}
			return &OpenError{Reason: ErrCorrupt, Err: err}
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case fresh && readOnly:
		return &OpenError{Reason: ErrReadOnly, Err: errors.New("the file holds no store yet")}
	case format < FormatVersion && readOnly:
		return &OpenError{Reason: ErrReadOnly, Err: fmt.Errorf("format version %d is upgraded by the first Open for writing", format)}
	case fresh:
		return db.Update(func(tx *bolt.Tx) error {
			for _, b := range allBuckets {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return tx.Bucket(bucketMeta).Put(keyFormat, []byte(strconv.Itoa(FormatVersion)))
		})
	case format < FormatVersion:
		return db.Update(migrate)
	}
	return nil
}

// Path returns the file of the store, as given to Open.
func (s *Store) Path() string { return s.path }

// Close ends every Watch, waits for the writes in progress and closes the
// file, letting another process open it.
func (s *Store) Close() error {
	s.watchMu.Lock()
	s.closed = true
	ws := make([]*watcher, 0, len(s.watchers))
	for w := range s.watchers {
		ws = append(ws, w)
	}
	s.watchMu.Unlock()
	for _, w := range ws {
		w.stop()
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("boltstore: close %q: %w", s.path, err)
	}
	return nil
}

// dbError wraps an error of bbolt for the call named by what.
func (s *Store) dbError(what string, err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w (%s)", ErrClosed, what)
	}
	if errors.Is(err, ErrReadOnly) {
		return fmt.Errorf("%w (%s)", ErrReadOnly, what)
	}
	if errors.Is(err, ErrCorrupt) || errors.Is(err, converge.ErrSealed) || errors.Is(err, converge.ErrNotSealed) {
		return err
	}
	return fmt.Errorf("boltstore: %s: %w", what, err)
}

// op is one write waiting for a commit.
type op struct {
	// fn does the write in tx. It returns only errors that must roll the
	// transaction back; refusals (stale version, lost lease) are results
	// it keeps in its own variables, after writing nothing. It may be
	// called more than once and must set its results afresh every time.
	fn   func(tx *bolt.Tx) error
	err  error
	lead bool // woken to lead the next commit
	done chan struct{}
}

// maxBatch is the most writes one commit takes.
const maxBatch = 512

// update runs fn in a write transaction and returns once it is committed
// (fsynced) or failed. Writes that arrive while a commit is running share
// the next one: a single writer never waits for company, and N writers need
// far fewer than N commits.
func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	if s.ro {
		return ErrReadOnly
	}
	o := &op{fn: fn, done: make(chan struct{})}
	s.wmu.Lock()
	s.queue = append(s.queue, o)
	if s.leading {
		s.wmu.Unlock()
		<-o.done
		if !o.lead {
			return o.err
		}
		s.wmu.Lock() // lead the next commit
	} else {
		s.leading = true
	}
	n := min(len(s.queue), maxBatch)
	batch := s.queue[:n:n]
	s.queue = s.queue[n:]
	s.wmu.Unlock()

	s.commit(batch)

	s.wmu.Lock()
	if len(s.queue) > 0 {
		next := s.queue[0]
		next.lead = true
		close(next.done)
	} else {
		s.leading = false
		s.queue = nil
	}
	s.wmu.Unlock()
	for _, b := range batch {
		if b != o {
			close(b.done)
		}
	}
	return o.err
}

// commit runs the writes of batch in one transaction. A write that fails
// rolls the transaction back: it gets its error and the others run again
// without it.
func (s *Store) commit(batch []*op) {
	run := batch
	for len(run) > 0 {
		failed := -1
		err := s.db.Update(func(tx *bolt.Tx) error {
			for i, o := range run {
				if err := callOp(o, tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 {
			run[failed].err = err
			run = append(run[:failed:failed], run[failed+1:]...)
			continue
		}
		for _, o := range run {
			o.err = err
		}
		return
	}
}

func callOp(o *op, tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("boltstore: write panicked: %v", r)
		}
	}()
	return o.fn(tx)
}

// view runs fn in a read transaction.
func (s *Store) view(ctx context.Context, fn func(tx *bolt.Tx) error) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Open checked every page; a page that changes on the disk while the
	// store is open fails the read instead of the process.
	defer func() {
		if r := recover(); r != nil {
			err = corrupt("reading the file: %v", r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return s.db.View(fn)
}
