// Package controller moves many objects of one kind through lifecycle
// states: the fleet controller of converge. Start with New and a Handler
// (the Controller example); docs/fleet-controller.md is the guide.
//
// A Handler looks at one Object (its key, State, data and the intents
// others queued for it) and returns a Result: Transition to a next state
// (the handler runs again at once), Wait with a reason, NoChange, or
// Deleted; an error means "retry with backoff". Only the handler changes an
// object's state; everyone else queues intents with Controller.Request or
// asks for a run with Controller.Enqueue. One handler runs per object at a
// time and Config.Workers objects in parallel; a periodic pass (with
// jitter) looks at every object again. Every transition is stored with its
// time in the converge.Store's history, states may carry an SLA (see
// Controller.AboveSLA, and Config.OnSLA for an event when an object goes
// above it and when it leaves the state).
//
// Giving up is part of the lifecycle. A handler that knows retrying will
// not help returns Terminal(err): the object is halted (Object.Halted),
// the error and its time are stored with it (Object.LastError), and it
// waits for Controller.Enqueue, Controller.Request or Controller.Release.
// An object whose handler fails Config.QuarantineAfter times in a row in
// one state (Config.QuarantineAfterIn per state) is quarantined until
// Controller.Release; Controller.Quarantined lists such objects. Both
// are stored, so they survive a restart and every replica sees them, and
// MetricHalted counts them. A halt, a release and an object going above
// its SLA are entries in the object's history beside its transitions
// (their Reason starts with ReasonTerminal, ReasonQuarantined,
// ReasonReleased or ReasonAboveSLA, and From and To are both its state);
// converge.HistoryEntry.By names who released it. The package's Release
// does what Controller.ReleaseBy does without a Controller, for an
// operator's tool that opens the store (a running controller picks the
// object up: a replica at once, one on its own at its next pass). The handler sees how
// often the object failed in its state (Object.Failures, and
// Object.Retries in a row, both stored) and its newest transitions
// (Object.History), so it can take another path after repeated failures.
// Cancel (Controller.Cancel, or the package's Cancel for an operator's
// tool) stops an object: its running handler's context is cancelled with
// cause ErrCancelled on whichever replica runs it, told by the store's
// watch, and the object is halted (HaltCancelled) with a history entry
// naming who asked, until Enqueue, Request or Release wakes it.
// An operator reads the newest failed runs, each with its time, state and
// error (Object.RecentFailures, kept across transitions), and when the
// current run of failures began (Object.FailingSince).
//
// Several controllers (replicas, in one process or many) may share one
// store that implements converge.Queue, such as pgstore: with Config.Owner
// set, the store is the queue. Each replica claims due objects in batches,
// handles each under a lease that it renews while the handler runs and
// that fences its writes, and hands the object back with the time it is
// due next; an Enqueue on one replica wakes the one that will run the
// object, and the objects of a replica that died are taken over when their
// leases expire. A replica that cannot renew a lease (cut off from the
// store, or the store too slow) cancels the handler's context at its
// renew deadline (Config.RenewDeadline, below the lease's TTL, on the
// monotonic clock) and writes nothing more for the object, so it has
// stopped before another replica can take the object over: one handler
// per object at a time holds as long as handlers return when their
// context is cancelled (one that does not is reported with
// MetricHandlerOverruns). A replica that stops lets its running handlers finish
// (within Config.ShutdownTimeout) and gives their leases back, so the
// others take its objects over at once. A replica starts claiming at
// once and loads the view that Get, Objects and AboveSLA return
// meanwhile, then refreshes it from the store every Resync. A claim
// brings the object's newest history with it (converge.Claimed.History).
// At most Workers handlers run at once, but an object holds its worker
// only while its handler runs: while the write of what the handler
// returned commits, another object's handler runs, so that the writes of
// the objects a replica holds reach the store together. Nor does an
// object wait for the Finish that hands it back: the lease stays held
// until it commits. A replica that is stopping starts no handler, and
// hands back, due at once, the objects whose handler does not run.
//
// # Seeing it work
//
// Config.Metrics (a converge.Metrics, such as the prometheus module's)
// receives the metrics declared here, named after controller-runtime's and
// client-go's workqueue habits, every one with the controller's Kind as
// its "controller" label, and never an object key, so the number of series
// stays bounded however many objects there are:
//
//	converge_controller_objects{controller,state}                    gauge
//	converge_controller_objects_above_sla{controller,state}          gauge
//	converge_controller_halted_objects{controller,state,cause}       gauge
//	converge_controller_errors_total{controller,state}               counter
//	converge_controller_terminal_errors_total{controller,state}      counter
//	converge_controller_state_entered_total{controller,state}        counter
//	converge_controller_state_exited_total{controller,state}         counter
//	converge_controller_time_in_state_seconds{controller,state}      histogram
//	converge_controller_handler_duration_seconds{controller,state}   histogram
//	converge_controller_queue_depth{controller}                      gauge
//	converge_controller_queue_adds_total{controller}                 counter
//	converge_controller_retries_total{controller}                    counter
//	converge_controller_reconciles_total{controller,result}          counter
//	converge_controller_last_success_timestamp_seconds{controller}   gauge
//	converge_controller_limited_total{controller,state,limit}        counter
//	converge_controller_limited_objects{controller,state,limit}      gauge
//
// result is "success" or "error", as controller-runtime's
// controller_runtime_reconcile_total has it. The queue figures, the
// reconcile counts and the last success are gathered on the hot path and
// handed to Metrics in batches (every 64 successes or failures, and whenever the queue runs
// empty); in a controller on its own, each worker hands its runs' handler
// and queue durations over with its counts (every 64 of its runs, before
// it waits for the queue, and once it has held them a millisecond), each
// value as measured. AllMetrics lists them for an adapter to register. Config.Logger (a
// *slog.Logger) receives a record of every handler run with the
// attributes controller, key, state, outcome and error.
//
// # Limits per state
//
// Config.Limits bounds the objects of a state across every replica: at
// most Limit.Concurrent handlers at once for objects in it (the firmware
// updates of a fleet, say), and at most Limit.Burst entries into it in
// any span of Burst×Limit.Every. The store enforces both through its
// leases: a handler holds one of the state's slots (a lease renewed, and
// lost, as the object's own) while it runs, and an entry takes a token
// (a lease that runs out by the store's clock). An object that finds no
// slot is put off, and a transition that finds no token is deferred,
// neither counting as a failure (MetricLimited counts them, and
// MetricLimitedObjects says how many objects wait on each limit now).
//
// Plans of the root package run as objects too: Plans returns the Handler
// and PlanObject the state and data to Add.
package controller
