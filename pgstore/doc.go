// Package pgstore is a converge.Store and converge.Queue on PostgreSQL,
// for many controller replicas sharing one database. Start with Open;
// docs/fleet-controller.md is the guide, docs/internals.md says how it
// batches writes.
//
// # First steps
//
// Open the store with a DSN and hand it to whatever takes a
// converge.Store or converge.Queue (a Controller with an Owner, a
// TargetReconciler, a plan.Runner):
//
//	st, err := pgstore.Open(ctx, "postgres://app@db:5432/app", pgstore.Options{})
//	if err != nil { ... }
//	defer st.Close()
//
// Open creates the schema on first use and migrates it when a newer
// pgstore opens it; nothing else needs to be set up but a database and a
// role that may create a schema in it (after that, the role only needs
// USAGE on the schema and SELECT, INSERT, UPDATE, DELETE on its tables).
// Use New instead of Open to share a *pgxpool.Pool of your own.
//
// # The schema
//
// Everything lives in one schema (Options.Schema, "converge" by default):
//
//	records    key (primary key, bytewise order), version, value (bytea:
//	           the JSON document, or its sealed form), due_at and
//	           claimed_due (the queue's due times)
//	history    id (identity: the order of appends), key, at, from_state,
//	           to_state, reason, subject (jsonb: the entry's
//	           converge.HistorySubject, NULL for the record itself)
//	targets    name (primary key), value (bytea), updated_at
//	leases     key (primary key), owner ('' once released), expires,
//	           token (grows by one each time the key changes owner); a
//	           new record gets a row with no owner and token 1, so that
//	           the table's statistics (and the plans of the statements
//	           that read a lease by its key) follow the records' from
//	           the start, a bulk load included
//	migrations version, applied_at: the migrations applied
//
// Migrations run in one transaction under an advisory lock, so replicas
// opening at once apply each step once, and a failed migration leaves
// nothing behind. A schema migrated by a newer pgstore is refused with a
// *SchemaVersionError. Keys and history are stored in clear; with
// Options.Sealer, record values and targets are sealed (see
// converge.Sealer), bound to "record" or "target", a NUL and the key, and
// a clear value read back is refused with converge.ErrNotSealed
// (Options.AllowClear accepts it while sealing is turned on over an
// existing database).
//
// Values sealed by earlier versions (format 1 of converge's AES-GCM
// Sealer, without a key ID) were bound to the record's key alone and to
// "target:" and the target's name, so record "target:x" and target "x"
// shared their binding. They still open (with a converge.NewAESGCMKeyring
// holding their key), under that old binding; run converge.Reseal once to
// rewrite them in the current format, bound apart, and then rotate the
// key (a new key in the keyring, Reseal again, the old key dropped), so
// that no copy of an old value opens any more.
//
// # Sharing one database
//
// Every write is one SQL statement, so it is atomic and costs one round
// trip: Put checks the version it read (UPDATE ... WHERE version = $2),
// and with StoreRecord.Token also that the lease with that token is the
// current, unexpired one, appends its history entries and trims the
// key's history to Options.Retention in the same statement. Lease expiry
// and due times are compared with the database's clock, so the replicas'
// clocks do not matter for leases; a fenced write compares the lease's
// expiry with the time it runs (clock_timestamp()), not with the start of
// its transaction. ClaimDue takes a batch of due records with FOR UPDATE
// SKIP LOCKED: replicas claiming at once get disjoint batches and never
// wait for each other; a record whose owner died is due again once its
// lease ran out, before the records due by their due time (Release makes
// it so at once). A claim reads as many records as it takes, however
// many other claims hold: a record in flight is kept out of the indexes
// that ClaimDue walks (records_due, on the due time, and
// records_claimed, on the expiry of the claim, which Claim moves when it
// renews the lease) until its claim runs out.
// It returns each record with its newest history entries
// (converge.ClaimHistoryEntries), so a controller needs no other call to
// show them to its handler. Finish releases the lease and sets the next
// due time in one statement. The retention bounds are built into the SQL
// as constants, so PostgreSQL plans the statements once, generically,
// whatever the tables' statistics.
//
// Puts and Finish calls are committed in groups: while one write is on
// its way to the database, those that the store's other callers (the
// workers of a controller) make meanwhile wait, and are then sent
// together, one round trip and one commit for the group. Nothing waits
// for a timer, and each call returns once its group has committed. A
// group that holds a Put is one transaction, committed synchronously, in
// which each write is checked and applied as if alone (its version
// check, fence, history and retention unchanged; each call gets its own
// outcome), and the records are locked in the order of their keys. When
// its Puts all update records and all its writes are of distinct keys
// (a controller's: each worker writes the object it holds, then
// finishes it), the group is one statement over arrays; otherwise one
// batch of the single statements. When the database refuses the group's
// statement, or one statement of its batch (and so rolls the group
// back), each write is run again alone, for its own outcome. A group of
// Finish calls only is one statement over arrays, which commits without
// waiting for its WAL to be flushed (synchronous_commit off, for that
// transaction only): a crash of the server can lose such a Finish, which
// leaves the record claimed until its lease expires, when it is due at
// once and claimed again with a greater token (its handler runs again:
// at least once). Anything that depends on a Finish (a claim of the
// released record) commits synchronously and so flushes the Finish
// first. Claims and Puts always wait for the flush. A controller's
// claimed object thus costs, besides its share of a ClaimDue, its share
// of one group's statement: its fenced Put rides with the Puts of the
// other workers and the Finish calls of the objects handled before it.
//
// The writes that may make a record due (a Put that creates it, Schedule,
// a Finish due at once) and Delete announce their key with pg_notify on
// Options.Channel in the same transaction; Watch listens on a connection
// of its own, so such a write on one replica wakes the watchers of every
// replica once it commits. Other writes are not announced: PostgreSQL
// serialises the commits of notifying transactions, fsync included, so a
// notice on every write would cap the store at one commit per flush.
//
// Every wait on the database is bounded, whatever the caller's context:
// making a connection by Options.ConnectTimeout (DefaultConnectTimeout,
// 10 s, unless the DSN sets connect_timeout), so Open against a server
// that accepts and never answers fails with a *ConnectError; each call of
// the Store by Options.StatementTimeout (DefaultStatementTimeout, 30 s),
// after which it fails with an error matching context.DeadlineExceeded.
//
// Errors: a DSN that does not parse is a *DSNError, a database that
// cannot be reached a *ConnectError (both name the host, port and
// database, never the password), a missing privilege a *PermissionError;
// record errors are the converge package's (converge.ErrStoreStale,
// converge.ErrLeaseLost, converge.ErrStoreInvalid, converge.ErrSealed,
// converge.ErrNotSealed).
//
// Tests get a throw-away database from package pgtest.
package pgstore
