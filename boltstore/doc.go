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
//	rec, err := converge.NewTargetReconciler(converge.TargetConfig[Spec]{Store: st, ...})
//	ctl, err := controller.New(controller.Config{Store: st, ...})
//	runner, err := converge.NewPlanRunner(st, converge.PlanConfig{...})
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
// process fails with ErrFileLocked after Options.LockTimeout. Several
// processes that must share work need a database server (the pgstore
// module). For the same reason Watch sees the changes made through this
// Store only, which are all the changes of the file.
//
// # Errors
//
// Open fails with an *OpenError that names the file and matches
// ErrNotStore (a directory, random bytes, a text file, another program's
// bbolt file), ErrFileLocked or ErrNewerFormat; nothing is written to the
// file in these cases. The calls of a Store fail with the errors of the
// converge.Store contract (converge.ErrStoreStale, converge.ErrLeaseLost,
// converge.ErrStoreInvalid for a value that is not JSON, converge.ErrSealed
// for a sealed value without the right Sealer, converge.ErrNotSealed for a
// clear value in a sealed store, ...), with ErrClosed after
// Close, and with ErrCorrupt naming the key if stored data cannot be
// decoded.
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
