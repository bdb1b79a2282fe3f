package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/convergekit/converge"
)

// KeyPrefix prefixes the [converge.Store] key of every plan: "plan/<id>".
const KeyPrefix = "plan/"

// Defaults of the zero fields of RunnerConfig.
const (
	// DefaultPollInterval is how long a runner waits before looking at a
	// plan again when a step changed nothing (targets are still working).
	DefaultPollInterval = time.Second
	// DefaultLeaseTTL is how long a runner's claim on a plan lasts without
	// renewal; a crashed runner's plan is taken over after it.
	DefaultLeaseTTL = 30 * time.Second
)

// RunnerConfig tunes a Runner. The zero value has no handlers (every plan
// fails with ErrUnknownCommand), no timeouts, DefaultPollInterval,
// DefaultLeaseTTL, the owner name DefaultOwner returns, no metrics,
// no logs, time.Now and the monotonic clock.
type RunnerConfig struct {
	// Handlers maps a command kind to its handler.
	Handlers map[string]CommandHandler
	// CommandTimeout is the timeout of a command that sets none; 0: none.
	CommandTimeout time.Duration
	// TargetTimeout is the timeout of a target of a command that sets none;
	// 0: none.
	TargetTimeout time.Duration
	// PollInterval is the wait between steps that changed nothing, and
	// after a handler error; 0 means DefaultPollInterval.
	PollInterval time.Duration
	// Owner names this runner in the Store's claims; "" means
	// DefaultOwner(), which is the same each time the program starts
	// on the host, so a runner restarted after a crash takes its plans
	// back at once instead of waiting for its own claims to expire.
	// Runners that may work on the same plan at the same time (two in one
	// process, or two processes of one program on one host) must each set
	// their own Owner: runners with one owner do not exclude each other.
	Owner string
	// LeaseTTL is the duration of the runner's claim on a plan, renewed at
	// every step; 0 means DefaultLeaseTTL.
	LeaseTTL time.Duration
	// OnStep, when set, is called after every step that changed the status
	// (after it is stored), from the goroutine running the plan. The status
	// is the runner's own and valid during the call only: OnStep must not
	// modify it, nor use it after it returns (Clone it to keep it). A copy
	// per step would cost as much as the plan's size.
	OnStep func(id string, step Step, status *Status)
	// Tracer, when set, starts a span per handler call of a step
	// (SpanStep: plan, command, kind, state, and the state it led to),
	// whose context the handler gets: the signals it sends under it are
	// its children, and carry its trace context where they leave the
	// process (converge.TraceParent; the fleet module stores it with the
	// target a signal sets). A failed call has the status Error. nil
	// means none.
	Tracer converge.Tracer
	// OnError, when set, is called by Run with every error it retries (a
	// handler or store error) before it waits PollInterval.
	OnError func(id string, err error)
	// Metrics receives the runner's measurements ([converge.MetricPlanSteps] and its
	// siblings): steps of Step and Run, and the transitions of plans,
	// commands and targets that Run stored or Step returned. nil means
	// none ([converge.MetricsNop]).
	Metrics converge.Metrics
	// Logger receives a line per transition of a plan or a command (Info),
	// of a target (Debug; Warn when it failed), per created plan (Info)
	// and per error Run retries (Warn) or stops on (Error), with the
	// attributes "plan" (the ID), "command" (its index), "kind", "from"
	// and "to". Command specs never reach the log. nil means no logging.
	Logger *slog.Logger
	// Now returns the current time; nil means time.Now. It stamps the
	// status (Started, LastUpdatedTimestamp) and the history: those times
	// are for people. Timeouts are measured on Monotonic instead (see
	// CommandContext.Since), so a step of the wall clock never fires one
	// early.
	Now func() time.Time
	// Monotonic returns the time elapsed since an origin of its choosing
	// on a clock that never steps; the command and target timeouts are
	// measured on it. nil means the process's monotonic clock when Now is
	// nil or time.Now, and Now itself otherwise (a test's fake clock then
	// drives both, measured with time.Time.Sub). Set it with Now to test
	// a step of the wall clock.
	Monotonic func() time.Duration
}

// Validate reports the first field out of range as a *[converge.ConfigError].
func (c RunnerConfig) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"CommandTimeout", c.CommandTimeout}, {"TargetTimeout", c.TargetTimeout}, {"PollInterval", c.PollInterval}, {"LeaseTTL", c.LeaseTTL}} {
		if f.d < 0 {
			return &converge.ConfigError{Field: "plan.RunnerConfig." + f.name, Reason: fmt.Sprintf("must not be negative, got %s", f.d)}
		}
	}
	for k, h := range c.Handlers {
		if k == "" || h == nil {
			return &converge.ConfigError{Field: "plan.RunnerConfig.Handlers", Reason: fmt.Sprintf("kind %q: needs a name and a handler", k)}
		}
	}
	return nil
}

// Runner runs plans kept in a [converge.Store]: it steps the plan machine, stores
// the status after every transition (with the version it read, so a stale
// write is detected and the step redone on the fresh status), and claims the
// plan so that one runner at a time works on it. A runner that dies mid-plan
// loses nothing: another runner (after the claim expires) resumes from the
// stored status, and signals are never sent twice to a target that answered.
// A stored step costs what it changed, not the size of the plan: while it
// holds the claim, the runner keeps the plan in memory, reads only the
// small head record under KeyPrefix + id to learn whether anyone else
// wrote, and stores each transition as a delta in that record; every few
// dozen steps the deltas are folded into a base record holding the whole
// document. Get reads the whole document back; read plans through the
// runner, not the Store. It is safe for concurrent use. The zero value is not usable: create one
// with NewRunner.
//
// A plan survives its process only in a durable store: boltstore (one
// file) when one process runs the plans, pgstore (PostgreSQL) when several
// runners share them; each runner then needs its own RunnerConfig.Owner.
// The default owner (DefaultOwner) is stable across restarts, so a
// runner that crashed resumes its plans at once when its program restarts.
// [converge.MemStore] keeps plans for the life of the process.
type Runner struct {
	cfg   RunnerConfig
	store converge.Store
	clock *planClock
}

// NewRunner validates cfg and returns a runner on store. A nil store is
// allowed for runners used only through Step.
func NewRunner(store converge.Store, cfg RunnerConfig) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Owner == "" {
		cfg.Owner = DefaultOwner()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if _, nop := cfg.Metrics.(converge.MetricsNop); nop {
		cfg.Metrics = nil
	}
	return &Runner{cfg: cfg, store: store, clock: newPlanClock(cfg.Now, cfg.Monotonic)}, nil
}

// DefaultOwner returns the owner name of a Runner whose
// RunnerConfig.Owner is empty: "plan-runner:" followed by the host name and
// the path of the program's executable, so it is the same every time the
// program starts on the host (and differs between hosts and programs).
func DefaultOwner() string { return planDefaultOwner() }

var planDefaultOwner = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	exe, err := os.Executable()
	if err != nil || exe == "" {
		exe = "unknown-program"
		if len(os.Args) > 0 && os.Args[0] != "" {
			exe = os.Args[0]
		}
	}
	return "plan-runner:" + host + ":" + exe
})

// planKey returns the Store key of the plan with id.
func planKey(id string) string { return KeyPrefix + id }

// History returns the stored transitions of the plan with id, oldest
// first, with the state names of converge v0.1.0 read as the states that
// replaced them (see State and TargetState). The runner records a plan's
// and a command's moves to another state, each with what happened ("started:
// 2 commands", "stopped: command 1 (k0supdate): <reason>", "all 2
// commands completed"), except the moves between SchedulableWait and
// Schedulable, which the k0s machine makes for every target it signals.
// Histories stored by earlier versions, with those moves and the reason
// "plan", read as they were stored.
func (r *Runner) History(ctx context.Context, id string) ([]converge.HistoryEntry, error) {
	stored, err := r.store.History(ctx, planKey(id))
	if err != nil {
		return nil, err
	}
	hist := make([]converge.HistoryEntry, len(stored))
	for i, h := range stored {
		h.From, h.To = planRenamed(h.From), planRenamed(h.To)
		hist[i] = h
	}
	return hist, nil
}

// historyQuiet reports whether a move of a plan or a command from one
// state to another is left out of its history: the moves between
// SchedulableWait and Schedulable, which the k0s machine makes for every
// target a command signals, would otherwise fill the history with the
// same two states. Entering SchedulableWait from NewPlan, and every other
// move, is recorded.
func historyQuiet(from, to State) bool {
	return (from == StateSchedulableWait && to == StateSchedulable) || (from == StateSchedulable && to == StateSchedulableWait)
}

// planStepReason says what a step that moved the plan to another state
// did, for its history entry: "started: 3 commands", "stopped: command 1
// (k0supdate): <reason>", "all 3 commands completed".
func planStepReason(step Step, st *Status) string {
	switch {
	case step.From == StateNewPlan && !step.To.IsError() && step.To != StateCompleted:
		return fmt.Sprintf("started: %s", countCommands(len(st.Commands)))
	case step.To == StateCompleted && len(st.Commands) == 0:
		return "completed: no commands"
	case step.To == StateCompleted && len(st.Commands) == 1:
		return "the command completed"
	case step.To == StateCompleted:
		return fmt.Sprintf("all %d commands completed", len(st.Commands))
	case step.To.IsError() && st.Reason != "":
		return "stopped: " + st.Reason // names the command
	case step.To.IsError() && step.Command >= 0 && step.Command < len(st.Commands):
		return fmt.Sprintf("stopped at command %d (%s)", step.Command, st.Commands[step.Command].Kind)
	case step.To.IsError():
		return "stopped"
	}
	if step.Command >= 0 && step.Command < len(st.Commands) {
		return fmt.Sprintf("at command %d (%s)", step.Command, st.Commands[step.Command].Kind)
	}
	return "moved on"
}

// commandStepReason says what a step that moved a command to another
// state did: "command 1 (k0supdate)", with the command's reason when it
// has one (an error state).
func commandStepReason(step Step, st *Status) string {
	cs := &st.Commands[step.Command]
	if cs.Reason != "" && step.CommandTo.IsError() {
		return fmt.Sprintf("command %d (%s): %s", step.Command, cs.Kind, cs.Reason)
	}
	return fmt.Sprintf("command %d (%s)", step.Command, cs.Kind)
}

// countCommands reads "1 command" or "n commands".
func countCommands(n int) string {
	if n == 1 {
		return "1 command"
	}
	return fmt.Sprintf("%d commands", n)
}

// planRenamed returns the name that replaced the plan or target state name
// s, or s.
func planRenamed(s string) string {
	if r, ok := stateRenamed[State(s)]; ok {
		return string(r)
	}
	if r, ok := targetRenamed[TargetState(s)]; ok {
		return string(r)
	}
	return s
}

// Validate reports whether doc can be stored and run: its spec is valid
// (ErrInvalid), every target group is discovered by something that can
// be stored (a Go discovery function, CommandDiscovery.Func, cannot; it
// fails with ErrInvalid), and its status, if any, answers the spec
// (ErrStatusMismatch).
func (d *Document) Validate() error {
	if err := d.Spec.Validate(); err != nil {
		return err
	}
	if err := planStorable(d.Spec); err != nil {
		return err
	}
	if d.Status != nil {
		st := d.Status.Clone()
		if _, err := planReconcileStatus(d.Spec, st); err != nil {
			return err
		}
	}
	return nil
}

// State returns the plan's state: its status's, or StateNewPlan when it has
// no status yet.
func (d *Document) State() State {
	if d.Status == nil {
		return StateNewPlan
	}
	return d.Status.State.normal()
}

// Config returns the runner's configuration with its defaults filled in.
func (r *Runner) Config() RunnerConfig { return r.cfg }

// Validate reports whether doc can be created on this runner: it is valid
// (see Document.Validate) and every command passes the checks of its
// handler, when the handler is a CommandValidator (autopilot's checks the
// fields of k0s commands, for example). A kind with no handler is not an
// error here: Run reports it.
func (r *Runner) Validate(doc *Document) error {
	if err := doc.Validate(); err != nil {
		return err
	}
	for i, c := range doc.Spec.Commands {
		if v, ok := r.cfg.Handlers[c.Kind].(CommandValidator); ok {
			if err := v.ValidateCommand(i, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// Create validates doc (see Validate) and stores it as a new plan (with its
// status, if any). It fails with an *ExistsError (ErrExists) naming the
// plan when a plan with that ID exists, and stores nothing.
func (r *Runner) Create(ctx context.Context, doc *Document) error {
	if err := r.Validate(doc); err != nil {
		return err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	_, err = r.store.Put(ctx, converge.StoreRecord{Key: planKey(doc.Spec.ID), Value: b},
		converge.HistoryEntry{At: r.cfg.Now(), To: string(doc.State()), Reason: "plan created"})
	if errors.Is(err, converge.ErrStoreStale) {
		return &ExistsError{PlanID: doc.Spec.ID}
	}
	if err == nil {
		r.observeChanges(ctx, doc.Spec.ID, []planChange{{command: -1, to: string(doc.State())}})
		r.logAttrs(ctx, slog.LevelInfo, "plan created", slog.String("plan", doc.Spec.ID), slog.Int("commands", len(doc.Spec.Commands)))
	}
	return err
}

// Get returns the stored plan with id and its store version (the version of
// the record under KeyPrefix + id).
func (r *Runner) Get(ctx context.Context, id string) (*Document, uint64, error) {
	ps, err := r.load(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	return ps.doc, ps.version, nil
}

// Retry makes the stored plan id, stopped in an error state, runnable again
// from the command that failed (see Status.Retry) and stores it; Run
// then signals again only the targets that did not complete. The history
// keeps why: an entry for the plan ("retry") and one per target that goes
// back to pending, with the state and reason it failed with. It fails with
// ErrNotFailed when the plan is not in an error state. It is RetryBy
// with no one named: the program itself retried the plan.
func (r *Runner) Retry(ctx context.Context, id string) error {
	return r.RetryBy(ctx, id, "")
}

// RetryBy is Retry on behalf of by, the identity of who asked (an
// operator's name from a status page's authorizer or a command line):
// every history entry the retry stores has By set to it.
func (r *Runner) RetryBy(ctx context.Context, id, by string) error {
	ps, err := r.load(ctx, id)
	if err != nil {
		return err
	}
	if ps.doc.Status == nil {
		return fmt.Errorf("%w (not started)", ErrNotFailed)
	}
	st := ps.doc.Status.Clone()
	from := st.State
	now := r.cfg.Now()
	hist := []converge.HistoryEntry{{At: now, From: string(from), Reason: "retry"}}
	for i := range st.Commands {
		cs := &st.Commands[i]
		if !cs.State.IsError() {
			continue
		}
		for _, g := range planSortedKeys(cs.Targets) {
			for _, t := range cs.Targets[g] {
				if t.State.IsFailure() {
					hist = append(hist, converge.HistoryEntry{At: now, From: string(t.State), To: string(TargetPending),
						Reason:  fmt.Sprintf("retry command %d (%s) target %s/%s attempt %d: %s", i, cs.Kind, g, t.Name, t.Attempt, t.Reason),
						Subject: &converge.HistorySubject{Command: i, Group: g, Host: t.Name}})
				}
			}
		}
	}
	before := make([]State, len(st.Commands))
	for i, cs := range st.Commands {
		before[i] = cs.State.normal()
	}
	// The targets' fresh timestamps count from this reading.
	stamp, mono := r.clock.read()
	if err := st.Retry(stamp); err != nil {
		return err
	}
	hist[0].To = string(st.State)
	for i, cs := range st.Commands {
		if to := cs.State.normal(); to != before[i] {
			hist = append(hist, converge.HistoryEntry{At: now, From: string(before[i]), To: string(to), Reason: "retry", Subject: &converge.HistorySubject{Command: i}})
		}
	}
	d, _ := planDiff(ps.doc.Status, st)
	var changes []planChange
	if r.observed() {
		changes = planChanges(ps.doc.Status, st, &d) // commit reuses ps.doc.Status
	}
	for i := range hist {
		hist[i].By = by
	}
	if err := r.commit(ctx, ps, st, d, hist...); err != nil {
		return err
	}
	r.clock.set(id, stamp, mono)
	r.observeChanges(ctx, id, changes)
	return nil
}

// Abort asks the stored plan id to stop, for reason: from the next step of
// whoever runs it, no target is signalled any more and no command starts;
// the targets already signalled finish (or fail, or time out) as usual, and
// then the active command and the plan end in StateAborted with the reason,
// which every target that was still pending gets too (in TargetAborted). A
// plan that is not running yet ends at once. A signalled target that fails
// or times out meanwhile ends the plan in that error state instead, as
// without the abort. Abort returns once the request
// is stored (see Status.Abort); Run returns a *Error for the
// aborted plan. It fails with ErrFinished when the plan is already
// Completed or in an error state, and with ErrAborted, keeping the
// first reason, when the plan is already being aborted or ended in
// StateAborted (that error matches ErrFinished too). An empty reason is
// stored as "aborted". It is AbortBy with no one named: the program
// itself aborted the plan.
func (r *Runner) Abort(ctx context.Context, id, reason string) error {
	return r.AbortBy(ctx, id, reason, "")
}

// AbortBy is Abort on behalf of by, the identity of who asked (an
// operator's name from a status page's authorizer or a command line): the
// history entry of the request ("abort requested: " and the reason) has
// By set to it. The entries of the plan ending in StateAborted, stored
// later by whoever runs it, name nobody.
func (r *Runner) AbortBy(ctx context.Context, id, reason, by string) error {
	if reason == "" {
		reason = "aborted"
	}
	for {
		ps, err := r.load(ctx, id)
		if err != nil {
			return err
		}
		st := ps.doc.Status.Clone()
		if st == nil {
			st = &Status{State: StateNewPlan}
		}
		if st.State == StateAborted {
			return fmt.Errorf("plan: abort %q: %w, %w (reason %q)", id, bare(ErrAborted), bare(ErrFinished), st.Reason)
		}
		if st.State.IsFinal() {
			return fmt.Errorf("plan: abort %q: %w (state %s)", id, bare(ErrFinished), st.State)
		}
		if st.Abort != "" {
			return fmt.Errorf("plan: abort %q: %w (reason %q)", id, bare(ErrAborted), st.Abort)
		}
		if _, err := planReconcileStatus(ps.doc.Spec, st); err != nil {
			return err
		}
		st.Abort = reason
		state := string(st.State.normal())
		d, _ := planDiff(ps.doc.Status, st)
		err = r.commit(ctx, ps, st, d, converge.HistoryEntry{At: r.cfg.Now(), From: state, To: state, Reason: "abort requested: " + reason, By: by})
		if !errors.Is(err, converge.ErrStoreStale) {
			return err
		}
		// A runner stored a step meanwhile: ask again on its status.
	}
}

// planFatal reports errors that trying again cannot cure.
func planFatal(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, ErrStatusMismatch) ||
		errors.Is(err, ErrUnknownCommand) || errors.Is(err, ErrTransition) ||
		errors.Is(err, ErrDecode) || errors.Is(err, converge.ErrStoreNotFound)
}

// Run works on the stored plan id until it is Completed or stops in an error
// state, storing the status after every transition. It returns the final
// status, and a *Error (ErrFailed) when the plan stopped in an error
// state. Handler and store errors are retried after PollInterval; errors that
// a retry cannot cure (an unknown kind, a status that does not answer the
// spec, an invalid transition, a missing plan) end the run. While another
// runner holds the plan's claim, Run waits. It returns ctx's error when ctx
// is cancelled, leaving the stored status as it was after the last stored
// step.
func (r *Runner) Run(ctx context.Context, id string) (*Status, error) {
	key := planKey(id)
	var lease *converge.Lease
	defer func() {
		if lease != nil {
			// Best effort: an expired or lost lease is let go anyway.
			_ = r.store.Release(context.WithoutCancel(ctx), *lease)
		}
	}()
	var ps *planStored
	cleaned := false
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l, err := r.store.Claim(ctx, key, r.cfg.Owner, r.cfg.LeaseTTL)
		if err != nil {
			if errors.Is(err, converge.ErrClaimHeld) || !planFatal(err) {
				if !errors.Is(err, converge.ErrClaimHeld) {
					r.logAttrs(ctx, slog.LevelWarn, "plan claim failed, retrying", slog.String("plan", id), slog.String("error", err.Error()),
						slog.Duration("retry", r.cfg.PollInterval))
				}
				if !errors.Is(err, converge.ErrClaimHeld) && r.cfg.OnError != nil {
					r.cfg.OnError(id, err)
				}
				if werr := r.wait(ctx); werr != nil {
					return nil, werr
				}
				continue
			}
			return nil, err
		}
		lease = &l
		var st *Status
		var done bool
		ps, st, done, err = r.runStep(ctx, id, ps)
		if err == nil && !cleaned && ps != nil {
			cleaned = true
			r.dropBases(ctx, ps)
		}
		if err != nil {
			if planFatal(err) || ctx.Err() != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				r.logAttrs(ctx, slog.LevelError, "plan stopped", slog.String("plan", id), slog.String("error", err.Error()))
				return st, err
			}
			r.logAttrs(ctx, slog.LevelWarn, "plan step failed, retrying", slog.String("plan", id), slog.String("error", err.Error()),
				slog.Duration("retry", r.cfg.PollInterval))
			if r.cfg.OnError != nil {
				r.cfg.OnError(id, err)
			}
			if werr := r.wait(ctx); werr != nil {
				return nil, werr
			}
			continue
		}
		if done {
			if st.State.IsError() {
				pe := &Error{PlanID: id, Command: -1, State: st.State, Reason: st.Reason}
				for i := range st.Commands {
					if cs := &st.Commands[i]; cs.State.IsError() {
						pe.Command, pe.Kind, pe.Reason = i, cs.Kind, cs.Reason
						break
					}
				}
				return st, pe
			}
			return st, nil
		}
	}
}

// runStep brings ps up to date with the store (loading the plan when ps is
// nil; reading only the small head record when nobody else wrote), steps
// it once and stores what changed. It returns the plan as stored (nil when
// it could not be read), the last status and whether the plan is done;
// when nothing changed and it is not done, it waits first.
func (r *Runner) runStep(ctx context.Context, id string, ps *planStored) (*planStored, *Status, bool, error) {
	var err error
	if ps == nil {
		ps, err = r.load(ctx, id)
	} else {
		ps, err = r.refresh(ctx, ps)
	}
	if err != nil {
		return nil, nil, false, err
	}
	work := *ps.doc
	spare := ps.spare
	if spare == nil {
		spare = ps.doc.Status.Clone()
	}
	ps.spare = nil // the step changes it; commit makes the next one
	step, delta, err := r.step(ctx, &work, spare)
	if err != nil {
		return ps, ps.doc.Status, false, err
	}
	if !step.Changed {
		ps.spare = work.Status // the same as the stored status
	}
	if step.Changed {
		hist := []converge.HistoryEntry{}
		if step.From != step.To && !historyQuiet(step.From, step.To) {
			hist = append(hist, converge.HistoryEntry{At: r.cfg.Now(), From: string(step.From), To: string(step.To), Reason: planStepReason(step, work.Status)})
		}
		if step.Command >= 0 && step.CommandFrom != step.CommandTo && !historyQuiet(step.CommandFrom, step.CommandTo) {
			hist = append(hist, converge.HistoryEntry{At: r.cfg.Now(), From: string(step.CommandFrom), To: string(step.CommandTo),
				Reason:  commandStepReason(step, work.Status),
				Subject: &converge.HistorySubject{Command: step.Command}})
		}
		var changes []planChange
		if r.observed() {
			changes = planChanges(ps.doc.Status, work.Status, &delta) // commit reuses ps.doc.Status
		}
		if err := r.commit(ctx, ps, work.Status, delta, hist...); err != nil {
			// A stale version means someone else wrote: step again on
			// the fresh status. Anything else is retried after a wait.
			if errors.Is(err, converge.ErrStoreStale) {
				return ps, ps.doc.Status, false, nil
			}
			return ps, ps.doc.Status, false, err
		}
		r.observeChanges(ctx, id, changes)
		if r.cfg.OnStep != nil {
			r.cfg.OnStep(id, step, work.Status)
		}
		return ps, work.Status, step.Done, nil
	}
	if step.Done {
		return ps, work.Status, true, nil
	}
	return ps, work.Status, false, r.wait(ctx)
}

func (r *Runner) wait(ctx context.Context) error {
	t := time.NewTimer(r.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
