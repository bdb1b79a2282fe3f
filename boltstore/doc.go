// Package boltstore is the embedded durable converge.Store: one file, no
// server, pure Go (on go.etcd.io/bbolt), for one process such as a device
// agent or a small fleet controller. It also implements converge.Queue.
//
// # First steps
//
// Open a store by naming its file, and hand it to what needs to remember
// across restarts:
//
//	st, err := boltstore.Open("/var/lib/agent/state.db", boltstore.Options{})
//	if err != nil {
//		return err // an *OpenError naming the file
//	}
//	defer st.Close()
//
//	rec, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[Spec]{Store: st, ...})
//	ctl, err := controller.New(controller.Config{Store: st, ...})
//	runner, err := plan.NewRunner(st, plan.RunnerConfig{...})
//
// The file is created when it does not exist. Options bound the history
// kept per key (Retention), seal values at rest (Sealer, for example
// converge.NewAESGCMSealer with a key of your own), and set the clock.
//
// # Guarantees
//
// Every acknowledged write (Put, Delete, PutTarget, Claim, Release,
// Schedule, Finish, ClaimDue) is on disk, fsynced, before the call returns:
// a process killed at any moment, even a machine losing power, finds it
// there after Open. A write and its history entries are one atomic commit.
// Writes that arrive while a commit runs are grouped into the next one, so
// concurrent writers share the cost of the disk's flushes.
//
// A file belongs to one process at a time: Open locks it, and a second
// process fails with ErrFileLocked after Options.LockTimeout. A tool that
// only looks into a store (convergectl) opens it with Options.ReadOnly: a
// shared lock, which readers hold together but never beside a writer, and
// every write refused with ErrReadOnly. Several
// processes that must share work need a database server (the pgstore
// module). For the same reason Watch sees the changes made through this
// Store only, which are all the changes of the file.
//
// # Errors
//
// Open fails with an *OpenError that names the file and matches
// ErrNotStore (a directory, random bytes, a text file, another program's
// bbolt file), ErrCorrupt (a store file that is damaged: truncated, a page
// or an entry changed on the disk), ErrFileLocked or ErrNewerFormat;
// nothing is written to the file in these cases. The calls of a Store fail
// with the errors of the converge.Store contract (converge.ErrStoreStale,
// converge.ErrLeaseLost, converge.ErrStoreInvalid for a value that is not
// JSON, converge.ErrSealed for a sealed value without the right Sealer,
// converge.ErrNotSealed for a clear value in a sealed store, ...), with
// ErrClosed after Close, and with ErrCorrupt naming the key if
// stored data fails its checksum or cannot be decoded.
//
// # Damaged files
//
// A damaged file never crashes the process, and its damage is reported
// (ErrCorrupt) rather than read. Before bbolt maps the file, Open reads
// every page bbolt would trust (both meta pages, the size against the page
// count, each page's kind, range, single reference, the packing of its
// entries and their key order) and refuses a file bbolt could not read
// safely; it then checks the checksum (CRC-32C over the entry's kind, key
// and stored bytes, sealed or not) of every record, lease, due entry,
// history entry and target. Every read checks the checksum of what it
// reads again. Both checks at Open read the whole file once, so Open takes
// time in proportion to the file's size (BenchmarkOpen measures a store of
// 10,000 records).
//
// What no check can tell from a good file is damage that leaves a whole,
// older state in place. When the newer of the two meta pages is damaged,
// the store opens as of the commit before, as bbolt does on purpose: that
// is also what a write of it torn by a power cut leaves. A bucket's root
// page number changed to that of an intact older copy of the bucket, still
// in the free pages, would read that older copy.
//
// A file whose two meta pages are both destroyed (zeroed or overwritten,
// as a card that lost its first blocks leaves it) is still told from
// another program's file: it is a damaged store (ErrCorrupt) when, at a
// page size from 1 KiB to 64 KiB that divides the file's size, one of the
// first 64 pages after the meta pages carries a bbolt page header (its own
// page number, a branch, leaf or free list page). Any other file without a
// bbolt meta page is ErrNotStore and never moved aside.
//
// A device agent whose state can be rebuilt sets Options.OnCorrupt: a
// damaged file is then moved aside (renamed to the path plus ".corrupt-"
// and the UTC time, never deleted), a new empty store takes its place, and
// OnCorrupt gets a Recovery to log.
//
// Files of format version 1, written before entries had checksums, are
// checked as far as that format allows (tags, JSON) and upgraded in place
// at Open, in one transaction; a file that fails the check is refused with
// ErrCorrupt and left as it is.
//
// # What is sealed
//
// With Options.Sealer, record values and targets are sealed before they
// are written, and a clear value read back is refused with
// converge.ErrNotSealed (Options.AllowClear accepts it while sealing is
// turned on over an existing file). Keys, versions, history entries,
// leases (owners, expiry) and due times are stored in clear: never put a
// secret in them. Files sealed by earlier versions of converge (values
// without a key ID) open with a converge.NewAESGCMKeyring that holds their
// key, and converge.Reseal rewrites them under its newest key; records
// and targets are bound to associated data of their own ("record",
// "target" and the key), as before.
package boltstore
