// Package plan runs ordered, multi-command rollouts over target hosts:
// the plan model, its state machine and a runner that keeps the status in
// a [converge.Store], so a plan survives the process that runs it. Start
// with NewRunner and the package Example; docs/rollouts.md is the guide.
//
// # Plans
//
// A Plan is an ordered list of Commands applied to target hosts, found by
// discovery (a static list, a selector or a function). Its Status has one
// entry per command and, per target, a state, a reason and the time it
// was last updated. A CommandHandler does the work of one command kind;
// the machine calls it for the command's state (StateNewPlan,
// StateSchedulableWait, StateSchedulable) and moves the command and the
// plan to the state it returns, on to StateCompleted. Any other state is
// an error state that stops the command and the plan. The plan moves to
// the next command only when the current one is Completed.
//
// # Runner
//
// Runner (or a controller.Controller with controller.Plans) moves a
// stored plan through its states, stores the status after every
// transition and resumes after a crash without signalling a completed host
// twice (at once when the same program restarts on the host: see
// DefaultOwner). Create refuses, with a *FieldError naming the document
// path, a plan that Plan.Validate refuses and whatever a handler's
// CommandValidator rejects (autopilot: a field k0s does not have); as in
// k0s, a plan with nothing to do (no commands, no targets) completes. A stored step costs what it
// changed, not the plan's size: the runner keeps the plan in memory while
// it holds the claim and stores each transition as a small delta on a
// base document, compacted now and then (Runner.Get reads the whole
// document back). Runner.Abort stops a running plan (signalled hosts
// finish, nothing new starts, the plan ends in StateAborted with the
// reason on every host that did not run), and Runner.Retry resumes a
// failed or aborted plan from the command that stopped, keeping the
// failure reasons in the history. Commands and targets may carry timeouts
// (measured on the monotonic clock) and limits on how many targets of a
// group run at once.
//
// RunnerConfig.Metrics receives the runner's measurements (the
// converge.MetricPlan* descriptors, listed by converge.AllMetrics) and
// RunnerConfig.Logger a line per transition, with the attributes "plan",
// "command", "kind", "from" and "to"; command specs, which may hold
// secrets, never reach the log.
//
// # Documents
//
// Document encodes to and decodes from JSON in the shape of k0s autopilot
// plans (spec.commands[i], status.commands[i].state, per-target state and
// lastUpdatedTimestamp). Decoding is strict: unknown fields, repeated keys,
// null values, invalid UTF-8 and data after the document are refused with
// a *DecodeError naming the culprit's path, and a document over the cap
// (converge.DefaultMaxDocumentBytes, or DecodeDocument's limits) before it
// is read. The state names are k0s's, and converge's own states
// (InconsistentTargets, TimedOut, Aborted) never stand where k0s sets one
// (see State); they are what documents and stores hold, and the names that
// converge v0.1.0 stored are read as the states that replaced them. The
// autopilot package adds YAML and the host-side signalling.
//
// # Errors
//
// Messages start with "plan: ". Branch on the sentinels (ErrFailed,
// ErrInvalid, ErrDecode, ...) with errors.Is; the typed errors (*Error,
// *FieldError, *DecodeError, *CommandError) carry the details. A Store's
// errors (converge.ErrStoreNotFound, converge.ErrStoreStale, ...) come
// through as the Store wrote them.
package plan
