package plan

import (
	"context"
	"fmt"
	"time"

	"github.com/convergekit/converge"
)

// CommandHandler does the work of one command kind. The plan machine calls
// it for the command's current state and applies the state it returns:
//
//   - NewPlan fills c.Status.Targets (discovering and checking every target)
//     and returns SchedulableWait, Completed (nothing to do) or an error state.
//   - SchedulableWait reads back what the targets reported and returns
//     Schedulable (there is work to do now), SchedulableWait (wait for the
//     targets), Completed, or an error state.
//   - Schedulable does the work (signals the next targets) and returns
//     SchedulableWait, Schedulable, Completed (nothing is left to do: k0s's
//     Schedulable completes a command with no target left to signal) or an
//     error state.
//
// Any state other than the four core ones is an error state; it stops the
// command and the plan, and c.Status.Reason (and the failed targets' reasons)
// should say why. A returned error means "could not decide now, try again":
// the plan's status is left as it was, including any change the handler made
// to c.Status.
//
// A step's changes are stored after the handler returns, so a handler whose
// work has an effect outside the status (a signal to a host) should record
// its intent in one step and act in a later one, once the intent is stored,
// with an effect that is harmless to repeat (an ID the host recognises): a
// runner that dies between acting and storing then never acts twice.
// autopilot.CommandHandler does so.
type CommandHandler interface {
	NewPlan(ctx context.Context, c *CommandContext) (State, error)
	SchedulableWait(ctx context.Context, c *CommandContext) (State, error)
	Schedulable(ctx context.Context, c *CommandContext) (State, error)
}

// CommandValidator is the optional ability of a CommandHandler to check a
// command of its kind before the plan is stored: Runner.Create (and
// Runner.Validate) call ValidateCommand for every command whose handler
// has it, with the command's index in the plan. It returns nil, or a
// *FieldError (matching ErrInvalid) naming the culprit field with
// its document path (see Command.Path).
type CommandValidator interface {
	ValidateCommand(index int, cmd Command) error
}

// CommandContext is what a CommandHandler gets: the command, its status to
// update, and the clock. The handler owns Status for the duration of the call.
// The machine builds it; the zero value has no Status and SetTarget panics
// on it.
type CommandContext struct {
	PlanID string
	// Index is the command's index in the plan.
	Index   int
	Command Command
	// Status is a copy of the command's status; the machine keeps the
	// handler's changes when it returns without an error.
	Status *CommandStatus
	// Now is the time of this step, in UTC, to the nanosecond, on the wall
	// clock: the time to stamp the status with (SetTarget does). Measure
	// how long ago a timestamp was set with Since, not by subtracting it
	// from Now: the wall clock can step.
	Now time.Time
	// TargetTimeout is the effective timeout of each target once signalled
	// (the command's, else the runner's default); 0 means none. Compare
	// it with Since(target.LastUpdatedTimestamp).
	TargetTimeout time.Duration

	// since measures elapsed time on the runner's clock; nil: Now.Sub.
	since func(time.Time) time.Duration
}

// Since returns how long ago t, a timestamp of the plan's status (a
// target's LastUpdatedTimestamp, a command's Started), was set, measured
// on the runner's monotonic clock: a step of the wall clock (NTP setting
// the time of a device without a real-time clock) or the skew between
// replicas never makes it longer than the time that really passed. A
// timestamp this runner did not set (a plan resumed after a restart or
// taken over from another replica) counts from the step at which the
// runner first asked about it, so a timeout measured with Since can fire
// late by the time the plan had no runner, never early. With a
// RunnerConfig.Now of its own (a test's fake clock), that clock is trusted.
// On a CommandContext the machine did not build, it is Now.Sub(t).
func (c *CommandContext) Since(t time.Time) time.Duration {
	if c.since == nil {
		return c.Now.Sub(t)
	}
	return c.since(t)
}

// SetTarget sets the state and reason of a target, creating its entry in
// group if needed; LastUpdatedTimestamp becomes Now when the state changes.
func (c *CommandContext) SetTarget(group, name string, state TargetState, reason string) *TargetStatus {
	if c.Status.Targets == nil {
		c.Status.Targets = map[string][]TargetStatus{}
	}
	t := c.Status.Target(group, name)
	if t == nil {
		c.Status.Targets[group] = append(c.Status.Targets[group], TargetStatus{Name: name})
		ts := c.Status.Targets[group]
		t = &ts[len(ts)-1]
	}
	if t.State != state || t.LastUpdatedTimestamp.IsZero() {
		t.LastUpdatedTimestamp = c.Now
	}
	t.State = state
	t.Reason = reason
	return t
}

// CommandHandlerFuncs adapts three functions to a CommandHandler; a nil
// function returns the state that keeps the command moving (NewPlan:
// SchedulableWait, SchedulableWait: Completed, Schedulable: SchedulableWait).
type CommandHandlerFuncs struct {
	NewPlanFunc         func(ctx context.Context, c *CommandContext) (State, error)
	SchedulableWaitFunc func(ctx context.Context, c *CommandContext) (State, error)
	SchedulableFunc     func(ctx context.Context, c *CommandContext) (State, error)
}

// NewPlan implements CommandHandler.
func (f CommandHandlerFuncs) NewPlan(ctx context.Context, c *CommandContext) (State, error) {
	if f.NewPlanFunc == nil {
		return StateSchedulableWait, nil
	}
	return f.NewPlanFunc(ctx, c)
}

// SchedulableWait implements CommandHandler.
func (f CommandHandlerFuncs) SchedulableWait(ctx context.Context, c *CommandContext) (State, error) {
	if f.SchedulableWaitFunc == nil {
		return StateCompleted, nil
	}
	return f.SchedulableWaitFunc(ctx, c)
}

// Schedulable implements CommandHandler.
func (f CommandHandlerFuncs) Schedulable(ctx context.Context, c *CommandContext) (State, error) {
	if f.SchedulableFunc == nil {
		return StateSchedulableWait, nil
	}
	return f.SchedulableFunc(ctx, c)
}

// Step says what one step of the plan machine did. The zero value is a
// step that changed nothing.
type Step struct {
	// Changed reports that the status changed and must be stored.
	Changed bool
	// Command is the index of the command the step handled, or -1 when the
	// step was about the plan only (NewPlan handles every command).
	Command int
	// From and To are the plan's state before and after the step.
	From, To State
	// CommandFrom and CommandTo are the handled command's states before and
	// after the step.
	CommandFrom, CommandTo State
	// Done reports that the plan is Completed or in an error state.
	Done bool
}

// planTransitions lists, per state a handler is called in, the core states it
// may return (any error state is allowed from each).
var planTransitions = map[State][]State{
	StateNewPlan:         {StateSchedulableWait, StateCompleted},
	StateSchedulableWait: {StateSchedulableWait, StateSchedulable, StateCompleted},
	StateSchedulable:     {StateSchedulableWait, StateSchedulable, StateCompleted},
}

func planAllowed(from, to State) bool {
	if to.IsError() {
		return true
	}
	for _, s := range planTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Step runs one transition of the plan in doc and updates doc.Status in
// place (creating it in NewPlan when nil). In NewPlan every command's handler
// fills its status; afterwards only the active command (the first one not
// Completed) is handled, in its own state. The plan's state follows the
// active command; it is Completed when every command is, and takes the error
// state of a command that fails.
//
// While the status asks for an abort (Status.Abort), no handler is
// called in NewPlan or Schedulable: the active command's handler is called
// in SchedulableWait while some of its targets are TargetSent, and once none
// is, the command and the plan end in StateAborted and its pending targets in
// TargetAborted, all with the abort's reason.
//
// Step returns an error, and leaves doc unchanged, when the spec is invalid
// (ErrInvalid), the status cannot answer the spec (ErrStatusMismatch),
// a kind has no handler (ErrUnknownCommand), a handler returns a state
// that cannot follow (ErrTransition), or a handler fails (a
// *CommandError wrapping its error; worth trying again).
func (r *Runner) Step(ctx context.Context, doc *Document) (Step, error) {
	old := doc.Status
	step, d, err := r.step(ctx, doc, nil)
	if err == nil && step.Changed && r.observed() {
		r.observeChanges(ctx, doc.Spec.ID, planChanges(old, doc.Status, &d))
	}
	return step, err
}

// step is Step, returning also what changed in the status. It works on
// work, a copy of doc.Status that it may change even when it fails, or on
// a fresh copy when work is nil. It reports the step's metrics.
func (r *Runner) step(ctx context.Context, doc *Document, work *Status) (Step, planDelta, error) {
	if r.cfg.Metrics == nil {
		return r.stepMachine(ctx, doc, work)
	}
	start := r.cfg.Now()
	step, d, err := r.stepMachine(ctx, doc, work)
	r.cfg.Metrics.Observe(converge.MetricPlanStepDuration, r.cfg.Now().Sub(start).Seconds())
	result := planStepLabels[0]
	switch {
	case err != nil:
		result = planStepLabels[2]
	case !step.Changed:
		result = planStepLabels[1]
	}
	r.cfg.Metrics.Add(converge.MetricPlanSteps, 1, result...)
	return step, d, err
}

// planStepLabels are the values of MetricPlanSteps' label.
var planStepLabels = [...][]string{{"changed"}, {"unchanged"}, {"error"}}

// stepMachine is step without the metrics.
func (r *Runner) stepMachine(ctx context.Context, doc *Document, work *Status) (Step, planDelta, error) {
	if err := doc.Spec.Validate(); err != nil {
		return Step{Command: -1}, planDelta{}, err
	}
	st := work
	if st == nil {
		st = doc.Status.Clone()
	}
	if st == nil {
		st = &Status{State: StateNewPlan}
	}
	if _, err := planReconcileStatus(doc.Spec, st); err != nil {
		return Step{Command: -1}, planDelta{}, err
	}
	from := st.State.normal()
	st.State = from
	step := Step{Command: -1, From: from}
	now, mono := r.clock.read()
	var err error
	switch {
	case from.IsFinal():
	case from == StateNewPlan && st.Abort == "":
		err = r.stepNewPlan(ctx, doc.Spec, st, now, mono)
	default:
		step, err = r.stepActive(ctx, doc.Spec, st, now, mono, step)
	}
	if err != nil {
		return Step{Command: step.Command, From: from, To: from}, planDelta{}, err
	}
	step.To = st.State
	step.Done = st.State.IsFinal()
	d, changed := planDiff(doc.Status, st)
	step.Changed = changed
	doc.Status = st
	switch {
	case step.Done:
		r.clock.drop(doc.Spec.ID)
	case changed:
		// The timestamps this step set (all equal to now) count from it.
		r.clock.set(doc.Spec.ID, now, mono)
	}
	return step, d, nil
}

func (r *Runner) handler(i int, kind string) (CommandHandler, error) {
	h, ok := r.cfg.Handlers[kind]
	if !ok || h == nil {
		return nil, &CommandError{Command: i, Kind: kind, State: StateNewPlan, Err: ErrUnknownCommand}
	}
	return h, nil
}

func (r *Runner) context(spec Plan, i int, cs *CommandStatus, now time.Time, mono time.Duration) *CommandContext {
	cmd := spec.Commands[i]
	tt := cmd.TargetTimeout
	if tt == 0 {
		tt = r.cfg.TargetTimeout
	}
	since := func(t time.Time) time.Duration { return r.clock.since(spec.ID, t, mono) }
	return &CommandContext{PlanID: spec.ID, Index: i, Command: cmd, Status: cs, Now: now, TargetTimeout: tt, since: since}
}

// call runs the handler for cs in its state and applies the result.
// The span of a step's handler call and its attributes
// (RunnerConfig.Tracer).
const (
	SpanStep    = "plan.step"
	AttrPlan    = "plan.id"      // the plan's ID
	AttrCommand = "plan.command" // the command's index
	AttrKind    = "plan.kind"    // the command's kind
	AttrState   = "plan.state"   // the command's state the handler was called in
	AttrNext    = "plan.next"    // the command's state after the call
)

func (r *Runner) call(ctx context.Context, spec Plan, i int, cs *CommandStatus, now time.Time, mono time.Duration) (err error) {
	h, err := r.handler(i, spec.Commands[i].Kind)
	if err != nil {
		return err
	}
	state := cs.State.normal()
	// cs belongs to Step's copy of the status, which Step drops on error:
	// the handler can work on it in place.
	work := cs
	cc := r.context(spec, i, work, now, mono)
	if t := r.cfg.Tracer; t != nil {
		var sp converge.Span
		ctx, sp = t.Start(ctx, SpanStep, converge.StringAttr(AttrPlan, spec.ID), converge.IntAttr(AttrCommand, int64(i)),
			converge.StringAttr(AttrKind, spec.Commands[i].Kind), converge.StringAttr(AttrState, string(state)))
		defer func() {
			sp.SetAttrs(converge.StringAttr(AttrNext, string(work.State)))
			sp.End(err)
		}()
	}
	var next State
	switch state {
	case StateNewPlan:
		next, err = h.NewPlan(ctx, cc)
	case StateSchedulableWait:
		next, err = h.SchedulableWait(ctx, cc)
	case StateSchedulable:
		next, err = h.Schedulable(ctx, cc)
	default:
		return nil
	}
	if err != nil {
		return &CommandError{Command: i, Kind: cs.Kind, State: state, Err: err}
	}
	next = next.normal()
	if !planAllowed(state, next) {
		return &CommandError{Command: i, Kind: cs.Kind, State: state, Err: fmt.Errorf("%w: %s -> %s", ErrTransition, state, next)}
	}
	work.ID, work.Kind, work.State = i, spec.Commands[i].Kind, next
	if next.IsError() && work.Reason == "" {
		work.Reason = fmt.Sprintf("command entered error state %s", next)
	}
	if !next.IsError() {
		work.Reason = ""
	}
	return nil
}

func (r *Runner) stepNewPlan(ctx context.Context, spec Plan, st *Status, now time.Time, mono time.Duration) error {
	for i := range spec.Commands {
		cs := &st.Commands[i]
		if cs.State.normal() != StateNewPlan {
			continue
		}
		if err := r.call(ctx, spec, i, cs, now, mono); err != nil {
			return err
		}
		if cs.State.IsError() {
			st.State = cs.State
			st.Reason = fmt.Sprintf("command %d (%s): %s", i, cs.Kind, cs.Reason)
			return nil
		}
	}
	st.State = planAggregate(st)
	return nil
}

// planAggregate is the plan's state when no command failed: Completed when
// every command is, else the state of the active command.
func planAggregate(st *Status) State {
	for i := range st.Commands {
		if s := st.Commands[i].State.normal(); s != StateCompleted {
			return s
		}
	}
	return StateCompleted
}

func (r *Runner) stepActive(ctx context.Context, spec Plan, st *Status, now time.Time, mono time.Duration, step Step) (Step, error) {
	active := -1
	for i := range st.Commands {
		if st.Commands[i].State.normal() != StateCompleted {
			active = i
			break
		}
	}
	if active < 0 {
		st.State = StateCompleted
		return step, nil
	}
	cs := &st.Commands[active]
	step.Command = active
	step.CommandFrom = cs.State.normal()
	if st.Abort != "" && (cs.State.normal() == StateNewPlan || !planInFlight(cs)) {
		planAbortCommand(st, active, now)
		step.CommandTo = cs.State
		return step, nil
	}
	if cs.State.normal() == StateNewPlan {
		// A repaired status: NewPlan fills the missing entries first.
		st.State = StateNewPlan
		step.CommandTo = StateNewPlan
		return step, nil
	}
	if cs.Started.IsZero() {
		cs.Started = now
	}
	timeout := spec.Commands[active].Timeout
	if timeout == 0 {
		timeout = r.cfg.CommandTimeout
	}
	if timeout > 0 && r.clock.since(spec.ID, cs.Started, mono) >= timeout {
		reason := fmt.Sprintf("command did not complete within %s", timeout)
		for g := range cs.Targets {
			for j := range cs.Targets[g] {
				t := &cs.Targets[g][j]
				if t.State == TargetSent {
					t.State, t.Reason, t.LastUpdatedTimestamp = TargetTimedOut, reason, now
				}
			}
		}
		cs.State, cs.Reason = StateTimedOut, reason
	} else {
		if st.Abort != "" && cs.State == StateSchedulable {
			cs.State = StateSchedulableWait // read back, signal nothing
		}
		if err := r.call(ctx, spec, active, cs, now, mono); err != nil {
			return step, err
		}
		if st.Abort != "" && !cs.State.IsFinal() {
			cs.State = StateSchedulableWait
			if !planInFlight(cs) {
				planAbortCommand(st, active, now)
			}
		}
	}
	step.CommandTo = cs.State
	if cs.State.IsError() {
		st.State = cs.State
		st.Reason = fmt.Sprintf("command %d (%s): %s", active, cs.Kind, cs.Reason)
		return step, nil
	}
	st.State = planAggregate(st)
	return step, nil
}

// planInFlight reports whether a target of cs is signalled and unfinished.
func planInFlight(cs *CommandStatus) bool {
	for _, ts := range cs.Targets {
		for i := range ts {
			if ts[i].State == TargetSent {
				return true
			}
		}
	}
	return false
}

// planAbortCommand ends command i, which has no target in flight, and the
// plan in StateAborted with the abort's reason, which its pending targets get
// too.
func planAbortCommand(st *Status, i int, now time.Time) {
	cs := &st.Commands[i]
	for _, ts := range cs.Targets {
		for j := range ts {
			if t := &ts[j]; t.State.normal() == TargetPending {
				t.State, t.Reason, t.LastUpdatedTimestamp = TargetAborted, st.Abort, now
			}
		}
	}
	cs.State, cs.Reason = StateAborted, st.Abort
	st.State = StateAborted
	st.Reason = fmt.Sprintf("command %d (%s): %s", i, cs.Kind, st.Abort)
}
