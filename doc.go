// Package converge is an embeddable library for declarative state
// convergence: a program says what a device, a host or a fleet should look
// like; converge changes what differs in dependency order and verifies it.
// Start with Example (FirstProgram) and Walker; the guides are in the
// repository's docs/ directory.
//
// # Items and graphs
//
// An Item is one piece of managed state with a stable ID: a file, a config
// key, a container. It reads the real system (StateCurrent), computes what
// it should be (StateGoal, or StateClean for removal), decides whether work
// is needed (Check) and does it (Apply), or simulates it (ApplyDry). Items
// are typed by their state; Wrap adapts them to the untyped Node a Graph
// holds:
//
//	g := converge.NewGraph()
//	g.Add(converge.Wrap[string](dir), converge.Present)
//	g.Add(converge.Wrap[string](file), converge.Present, dir.ID())
//	g.Add(converge.Wrap[string](old), converge.Absent)
//
// A dependency says an item needs another; an ordering edge
// (Graph.After) only says it starts after another reached its presence,
// between any presences, so that a replacement can remove the old item
// before it creates the new one:
//
//	g.After("bridge:br-new", "bridge:br-old") // br-old Absent, br-new Present
//
// An item that implements Refresher (a service) is refreshed once after
// its own convergence when any of its dependencies (its configuration
// files) changed in the walk, and never after a walk that changed nothing;
// an ordering edge never refreshes. A refresh that was due and did not
// happen stays pending in the Walker's RefreshLog (NewStoreRefreshLog keeps
// it across a SIGKILL), and DepChanged tells an item which dependency
// changed.
//
// The graph rejects duplicate IDs, unknown dependencies, cycles (with the
// cycle's path, through ordering edges too) and a Present item that
// depends on an Absent one, with *GraphError values that name the
// culprits.
//
// # Walks
//
// Apply walks the graph: Present items start when their dependencies have
// finished, Absent items when their dependents are gone, independent
// branches run in parallel up to WalkerConfig.Parallelism (after a walk of
// quick items, on one worker until an item is slow or changes: see
// WalkerConfig.Parallelism). Every changed item is
// verified by reading it again. ApplyDry does the same with no writes, and
// Clean removes everything in reverse order. The Report says, per item,
// what was decided and what happened; its Err aggregates the failures as
// *ItemError values that carry the item ID, the phase and the walk's ID
// (every walk has a WalkID, in its Report and its events, and items read
// it from their context with CurrentWalk). ResultStates
// reads an item's states back with the item's own state type. An Observer
// receives progress events without ever slowing the walk: one that falls
// behind loses the oldest events and is told how many (Event.Dropped), and
// a walk waits at most WalkerConfig.EventDrain for it. The enums of reports,
// results and events (Presence, Change, Phase, Outcome, Mode, Action,
// Interrupt, EventKind, TargetEventKind) encode to text and JSON by name
// and decode only from a name (an unknown one is a *NameError).
//
//	rep, err := converge.Apply(ctx, g)
//	fmt.Print(rep.Summary())
//
// Cancelling a walk's context interrupts it: nothing new starts and the
// rest is reported as not run. With a WalkerConfig.Grace the items already
// applying may finish first; a second interrupt (WithInterrupt, as for a
// second Ctrl-C) or the end of the grace period cancels them at once, and
// Report.Interrupted says which happened. WithForce forces a walk past
// update locks (items check Forced).
//
// # Status
//
// An agent turns a walk's Report into an EdgeReport (EdgeReportFrom): per
// item, what it detected and which error kind it hit, for the revision of
// the configuration it answers. The central side derives the status of
// every item from the Desired and that report (DeriveStatus), says
// whether the configuration is ready and which items need a person.
//
// # Keeping it so
//
// TargetReconciler keeps one device at its target: it walks the target's
// stages until a pass changes nothing, coalesces triggers, backs off after
// failures, honours update locks (ErrLocked) unless forced, and persists
// the last target in a Store so a restart resumes it (Load, or LoadOrSet
// with a default for the first start). Every target has a revision, which
// the Store assigns and keeps with it, so it only grows across restarts,
// and which its events and reports carry; a new target preempts the
// running pass at the next item boundary. Subscribers each get their own
// goroutine, so a slow one only loses events (TargetEvent.Dropped), and
// Run stops as a walk is interrupted, gracefully within Walk.Grace. A
// reboot or shutdown an item asked for (RequireAction) stays in
// PendingActions, kept in the Store, until the host booted again, so an
// agent restarted before the reboot still knows it is due. JoinBuilds and
// BuildPart make one target of the builds of several adapters (host
// configuration, then containers). The controller
// package moves many objects through lifecycle states on the same Store
// contract.
//
// # Metrics and logs
//
// Walks, target reconcilers and plan runners report through one small
// interface, Metrics (nil means MetricsNop; the prometheus module adapts it
// to client_golang), and log through an optional *slog.Logger (nil means no
// logging): WalkerConfig.Metrics and WalkerConfig.Logger for walks (a TargetReconciler
// uses those of TargetReconcilerConfig.Walk), plan.RunnerConfig.Metrics and
// plan.RunnerConfig.Logger for plans. AllMetrics lists the metrics: counters end
// in "_total", durations are "_seconds" histograms, and labels take values
// from small sets only: an item's kind (ID.Kind, "file" for
// "file:/etc/hostname"), an outcome, a phase, a mode, a reconciler's name,
// a command kind, a state; never an item ID, an object key or a plan ID.
// Every walk and pass series carries the label "target", the walker's
// WalkerConfig.Name (a TargetReconciler's Name), so two loops in one program are
// told apart; results read "success" and "error" as in controller-runtime,
// and MetricTargetLastSuccess says when a reconciler last converged. A walk
// counts its items once it ends.
// Log lines carry those as attributes ("walk", "item", "phase", "outcome",
// "target", "revision", "plan", "command", "kind"), and never states,
// targets or command specs, which may hold secrets. A walk reports an item
// without allocating or calling Metrics (only an item that applied is
// observed at once), and costs nothing more when neither is set.
// convergetest.Metrics records the measurements for tests.
//
// # Stores
//
// A Store keeps what the system cannot tell: targets, lifecycle states
// with their history (bounded by a Retention), plan status, and leases
// with fencing tokens. MemStore keeps it in memory; the boltstore package
// keeps it in one file for one process, and the pgstore module in
// PostgreSQL for replicas. A Store that is also a Queue (all three are)
// hands due records to one of several processes at a time, which is how
// controller replicas share objects. Any store seals values and targets
// at rest with a Sealer (NewAESGCMSealer, or NewAESGCMKeyring to rotate
// keys, with Reseal), and then fails closed on a clear value
// (ErrNotSealed). convergetest.ConformStore
// checks a Store of your own against the contract.
//
// # Rollouts
//
// The plan package runs ordered, multi-command rollouts over hosts
// (plan.Plan, plan.Runner), on the same Store contract; the autopilot
// package reads k0s autopilot plans and signals the hosts.
//
// # Dependencies
//
// Besides the standard library, this package imports golang.org/x/sync,
// github.com/hashicorp/go-multierror and github.com/go-json-experiment/json
// (the reference implementation of encoding/json/v2), which reads every
// JSON document of this package and of the plan package (plans, desired
// configurations, edge and status reports) strictly: unknown fields, repeated keys, invalid
// UTF-8 and data after the document are refused, and the error names the
// culprit's path; a document over its cap (DecodeLimits) is refused before
// it is read.
//
// Other packages: controller (the fleet object controller), plan
// (rollouts: plans, their state machine and runner), autopilot (k0s
// autopilot plan documents and signalling), hostcfg (host
// configuration), convergetest (fakes and a conformance check for users'
// own items), and docker, a module of its own (containers and Compose
// projects).
package converge
