// Command convergectl looks into a converge store, a boltstore file or a
// pgstore database, and does what an operator does without writing Go.
// Start with `convergectl -h`; docs/operating.md is its guide.
//
// It lists the objects of a controller kind by state, shows one with its
// history, releases a halted one, shows what the kind's limits hold now,
// lists and shows plans with their progress per command and host, aborts
// or retries a plan, and shows a target reconciler's last target and
// revision.
//
// Install it at the version of the modules the program uses:
//
//	go install github.com/convergekit/converge/convergectl@v0.1.0
//
// # Usage
//
//	convergectl COMMAND (--bolt FILE | --pg DSN) [flags] [ARGS]
//
//	kinds                   the kinds of controller objects, with their counts
//	                        (not the records the library keeps for itself:
//	                        converge.IsInternalKind)
//	objects KIND            the objects of KIND; --state S, --quarantined,
//	                        --terminal, --halted, --above-sla filter them
//	object  KIND KEY        one object: state, failures, data, history
//	plans                   the plans with their progress; --state S
//	plan    ID              one plan: every command and host, history
//	limits  KIND            what the limits of KIND hold now, per state: the
//	                        slots in use and who holds them, the objects
//	                        waiting to enter (the limits themselves are the
//	                        controllers' configuration, not in the store)
//	rollouts                the fleet's rollouts (fleet.ReadRollouts): state,
//	                        reason, and per wave its devices and thresholds
//	targets                 the names of the stored targets, with their revisions
//	target  NAME            the last target of NAME and its revision
//	release KIND KEY        clear the halt of a quarantined, terminal or cancelled object
//	cancel KIND KEY         cancel an object: stop its running handler, halt it
//	abort   ID              ask a plan to stop (--reason)
//	retry   ID              run a failed plan again from the failed command
//
// Flags may come before or after the arguments. Every command answers -h
// with its flags, once, on standard output. -o json prints JSON and -o yaml
// YAML (the JSON shapes below, written as YAML) instead of a table. A list
// with nothing in it prints no table: it says so on standard error, and
// exits 0 (JSON and YAML print the empty list).
//
// # Watching
//
// --watch (or -w) makes a read command print its output, then print it
// again every time it changes, until it is interrupted (SIGINT, exit 0):
// a table after an empty line, YAML after "---", JSON as a stream of
// documents. It reads the store every --watch-interval (2s by default). A
// bolt file is opened for each reading and closed at once, so that the
// program that owns it can open it in between (a reading that finds it
// held prints the error once and the watch goes on); a database is kept
// open, and its notifications (pgstore's LISTEN/NOTIFY: an object added,
// made due or deleted) wake the watch before the interval ends. A first
// reading that fails ends the watch with its error.
//
// In a table, a history's transitions that came again and again in a row
// (a plan flapping between SchedulableWait and Schedulable) are written
// once, with how many times they came and when last (column REPEATED);
// JSON and YAML hold every stored entry.
//
// # Reading and writing
//
// The read commands open the store read-only: a bolt file with
// boltstore.Options.ReadOnly (a shared lock, nothing written), a database
// in sessions whose transactions are read-only (default_transaction_read_only),
// so a read creates and migrates nothing: a database whose store schema is
// missing or older than this convergectl is refused (the program's
// pgstore.Open creates and migrates it). release, abort and retry open it
// for writing; their history entries name who did it: --as, or the user
// running the command.
//
// A bolt file belongs to one process: while a program (an agent) has it
// open, bbolt lets nobody else open it, not even to read. convergectl then
// fails after --lock-timeout (200ms by default) with an error saying that
// another process holds the file, instead of waiting; look through the
// program itself then (its status page), or stop it. A database is
// shared: the commands work beside running replicas, and a released
// object is made due at once, so a replica runs it.
//
// # Secrets
//
// convergectl prints no secret unless asked with --show-secrets. Every
// value it prints (a target, an object's data, reasons, errors, history)
// has the values of secret names replaced by "[redacted]"
// (converge.Redacted): a name is secret when converge.IsSecretEnv says so
// (DB_PASSWORD, GITHUB_TOKEN, STRIPE_KEY, ...), as a JSON member
// ("DB_PASSWORD": "..."; under a secret name every value is replaced), as
// an environment entry {"name": "DB_PASSWORD", "value": "..."}, or as
// NAME=VALUE in a string; the passwords of URLs are replaced too
// (converge.RedactURLs). In a sealed store, --show-secrets also needs the
// key (below), and fails with an error of kind sealed without it; a store
// that is not sealed has no key, and --show-secrets alone shows its values
// as they are.
//
// # Sealed values
//
// In a store whose values are sealed (boltstore.Options.Sealer,
// pgstore.Options.Sealer), convergectl prints no sealed value unless it is
// given the key: --key-file names a file of AES keys in hex, one per line,
// oldest first (blank lines and lines starting with # are skipped), read
// by converge.ReadKeyFile (the format converge.OpenKeyFile writes; a file
// that others may read is refused). The environment
// variable CONVERGECTL_KEY_FILE names the file when --key-file is not
// given; a key is never given on the command line itself. With the key and
// without --show-secrets, the values are shown with their secrets
// replaced. Without it a sealed
// object, plan or target is listed and shown as sealed, with the ID of the
// key that sealed it (converge.SealKeyID); its history, which stores keep
// in clear, is shown. A filter that needs a sealed object's state leaves it
// out and says how many it left out. A write needs the key of a sealed
// store, and refuses to seal values into a clear one.
//
// # Exit codes
//
//	0  the command did what it was asked (also: release of an object that
//	   is not halted, which changes nothing)
//	1  it failed: the store could not be opened (missing, locked, damaged,
//	   unreachable), the object, plan or target is not in the store, a
//	   value is sealed, or the change is refused (a plan that is not
//	   failed cannot be retried, a finished plan cannot be aborted)
//	2  the command line is wrong: an unknown command or flag, a missing or
//	   extra argument, no store or two, an unknown -o format
//
// Errors go to standard error as one line; with -o json as
//
//	{"error": {"kind": KIND, "message": "..."}}
//
// where KIND is one of usage, locked, key-file, sealed, not-sealed,
// not-found, conflict, store, error.
//
// # JSON output
//
// The shapes below are stable: fields may be added, none is removed or
// renamed. Times are RFC 3339. A history entry is converge.HistoryEntry as
// stores keep it: {"at", "from", "to", "reason", "by", "subject"}, the
// empty ones left out.
//
// kinds:
//
//	{"kinds": [{"kind": "host", "objects": 4}]}
//
// objects (data and history are left out of lists; sealedHidden counts
// the sealed objects a filter left out):
//
//	{"kind": "host", "sealedHidden": 0, "objects": [OBJECT, ...]}
//
// object, and the object of a release:
//
//	OBJECT = {"kind", "key", "version", "sealed", "keyID", "state",
//	  "since", "reason", "halted", "failures", "retries",
//	  "lastError": {"at", "state", "error"}, "failingSince",
//	  "slaBreached", "intents", "priority", "data",
//	  "recentFailures": [{"at", "state", "error"}, ...],
//	  "history": [ENTRY, ...]}
//
// A sealed object has only kind, key, version, sealed (true), keyID and
// history. halted is "quarantined", "terminal", "cancelled" or absent. failingSince
// is when the current run of failures began (absent once a handler run
// succeeded); recentFailures are the newest failed handler runs, oldest
// first, shown by the object command only. priority is the object's
// priority, absent for the default, 0.
//
// cancel:
//
//	{"cancelled": true, "object": OBJECT}
//
// release:
//
//	{"released": true, "was": "quarantined", "object": OBJECT}
//
// plans (commands and history left out):
//
//	{"plans": [PLAN, ...], "sealedHidden": 0}
//
// limits (the states whose limits hold anything now, sorted):
//
//	{"kind": "host", "limits": [{"state", "objects", "slotsInUse",
//	  "slotHolders": [OWNER, ...], "waitingToEnter"}]}
//
// rollouts (fleet.RolloutStatus, as the fleet server's API answers it):
//
//	{"rollouts": [{"id", "selector", "state", "reason", "created",
//	  "devices", "restored", "finished", "waves": [{"name", "state",
//	  "success_threshold", "error_threshold", "devices", "pending",
//	  "moving", "ready", "failed", "aborted"}]}]}
//
// plan, and the plan after abort and retry (without history):
//
//	PLAN = {"id", "version", "sealed", "keyID", "state", "reason", "abort",
//	  "commandsTotal", "commandsCompleted", "hosts": COUNTS,
//	  "commands": [{"index", "kind", "state", "reason", "started",
//	    "hosts": COUNTS, "targets": [{"group", "name", "state", "reason",
//	    "attempt", "updated"}]}],
//	  "history": [ENTRY, ...]}
//	COUNTS = {"total", "pending", "sent", "completed", "failed"}
//
// target:
//
//	{"name", "revision", "sealed", "keyID", "target"}
//
// targets (a target without its value):
//
//	{"targets": [{"name", "revision", "sealed", "keyID"}, ...]}
package main
