package boltstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
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
const FormatVersion = 1

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

// Errors of a Store in use.
var (
	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("boltstore: store is closed")
	// ErrCorrupt means a stored record, lease or history entry cannot be
	// decoded. The error names the key.
	ErrCorrupt = errors.New("boltstore: stored data is corrupt")
)

// OpenError is the error of Open. It names the file the caller gave and
// matches its reason (ErrNotStore, ErrFileLocked, ErrNewerFormat) and the
// underlying error, if any, with errors.Is and errors.As.
type OpenError struct {
	// Path is the file as given to Open.
	Path string
	// Reason is ErrNotStore, ErrFileLocked, ErrNewerFormat, or nil when the
	// file could not be opened for another reason (see Err).
	Reason error
	// Err is the underlying error (from the operating system or bbolt), or
	// nil.
	Err error
}

// Error describes the problem, naming the file.
func (e *OpenError) Error() string {
	msg := "boltstore: open " + strconv.Quote(e.Path)
	if e.Reason != nil {
		msg += ": " + e.Reason.Error()
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
// seals nothing, waits DefaultLockTimeout for the file and uses time.Now.
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
// else, ErrFileLocked when another process holds the file for longer than
// opts.LockTimeout, ErrNewerFormat for a file written by a newer version.
// In none of these cases is the file written to.
func Open(path string, opts Options) (*Store, error) {
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
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: timeout,
		// The freelist is rebuilt from the pages at open rather than
		// written at every commit: fewer pages per commit, same safety.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, openError(path, err)
	}
	if err := initialize(db); err != nil {
		_ = db.Close()
		var oe *OpenError
		if errors.As(err, &oe) {
			oe.Path = path
			return nil, oe
		}
		return nil, &OpenError{Path: path, Err: err}
	}
	s := &Store{db: db, path: path, sealer: opts.Sealer, clear: opts.AllowClear, now: opts.Now, keep: opts.Retention.Entries, maxAge: opts.Retention.Age}
	if s.now == nil {
		s.now = time.Now
	}
	if s.keep == 0 {
		s.keep = converge.DefaultHistoryEntries
	}
	return s, nil
}

// openError classifies an error of bolt.Open.
func openError(path string, err error) error {
	switch {
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

// initialize checks the file's format and creates the buckets of a new
// store. It writes only to a file with no bucket at all.
func initialize(db *bolt.DB) error {
	fresh := false
	err := db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return &OpenError{Reason: ErrNotStore, Err: errors.New("a bbolt database of another program")}
			}
			fresh = true
			return nil
		}
		raw := meta.Get(keyFormat)
		v, err := strconv.Atoi(string(raw))
		if err != nil || v < 1 {
			return &OpenError{Reason: ErrNotStore, Err: fmt.Errorf("format version %q", raw)}
		}
		if v > FormatVersion {
			return &OpenError{Reason: ErrNewerFormat, Err: fmt.Errorf("version %d, this package reads up to %d", v, FormatVersion)}
		}
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				return &OpenError{Reason: ErrNotStore, Err: fmt.Errorf("bucket %q is missing", b)}
			}
		}
		return nil
	})
	if err != nil || !fresh {
		return err
	}
	return db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyFormat, []byte(strconv.Itoa(FormatVersion)))
	})
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
func (s *Store) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(fn)
}
