package autopilot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/plan"
)

// Signal is what a target node receives for one command of a plan. The
// zero value carries nothing; CommandHandler fills every field.
type Signal struct {
	// ID identifies the signal: the plan, the command index and the
	// attempt. A node answers with the ID it answers, so a report about an
	// older signal does not count.
	ID      string `json:"id"`
	PlanID  string `json:"planID"`
	Command int    `json:"command"`
	Kind    string `json:"kind"`
	Group   string `json:"group"`
	Attempt int    `json:"attempt,omitempty"`
	// Spec is the command's own spec (version, platforms, ...).
	Spec map[string]json.RawMessage `json:"spec,omitempty"`
	// TraceParent is the W3C traceparent of the plan step that sent the
	// signal, when the runner traces (plan.RunnerConfig.Tracer, with a
	// converge.TracePropagator such as the otel module's): the node makes
	// its work a child of it with converge.WithTraceParent, so one trace
	// runs from the plan to the node's update. "" otherwise. A signal sent
	// again with the same ID may carry another one (the step that resent
	// it).
	TraceParent string `json:"traceparent,omitempty"`
}

// SignalID returns the ID of the signal for command cmd of plan, attempt.
func SignalID(plan string, cmd, attempt int) string {
	return plan + "/" + strconv.Itoa(cmd) + "/" + strconv.Itoa(attempt)
}

// Host describes a target node as its probe sees it. The zero value
// is a node with no name, kind or platform.
type Host struct {
	Name string `json:"name"`
	// Kind is the node's kind, for example "controller" or "worker"; it is
	// matched against restrictions and group kinds.
	Kind string `json:"kind,omitempty"`
	// Platform is the node's platform, for example "linux-amd64"; "" skips
	// the platform check.
	Platform string `json:"platform,omitempty"`
}

// Report is what a node last reported about the last signal it got.
// The zero value means the node never got a signal.
type Report struct {
	// SignalID is the signal the report answers ("" when the node never got
	// one).
	SignalID string `json:"signalID,omitempty"`
	// State is plan.TargetSent while the node works on the signal, then
	// plan.TargetCompleted or plan.TargetApplyFailed.
	State  plan.TargetState `json:"state,omitempty"`
	Reason string           `json:"reason,omitempty"`
}

// Sender reaches target nodes: it probes them, delivers signals and
// reads back what they reported. Implementations must be safe for concurrent
// use. Bus is the in-process implementation. A Sender that can also tell
// whether a node is ready implements ReadyProber.
type Sender interface {
	// Probe describes the node, or fails with an error matching
	// ErrHostNotFound when it does not exist.
	Probe(ctx context.Context, node string) (Host, error)
	// Send delivers s to the node. The node must recognise a signal whose
	// ID is the one it last got and not act on it again: CommandHandler
	// sends a signal again (with the same ID) when a runner resumes a plan
	// and the node's report does not show the signal, because the runner
	// that sent it may have died before learning whether it arrived.
	Send(ctx context.Context, node string, s Signal) error
	// Read returns the node's report about the last signal it got (the
	// zero report when none), or an error matching ErrHostNotFound.
	Read(ctx context.Context, node string) (Report, error)
}

// ReadyProber is the optional ability of a Sender to tell whether a node
// is ready to serve, as k0s autopilot asks every controller's API server
// for /ready before it signals the next controller (its "controller
// quorum safety"). CommandHandler uses it when the Sender has it; see
// CommandHandler.
type ReadyProber interface {
	// Ready reports whether the node is ready, or fails with an error
	// matching ErrHostNotFound when it does not exist. Any other error
	// is taken as "not known now": the handler tries again later.
	Ready(ctx context.Context, node string) (bool, error)
}

// Delivery records one signal delivered by a Bus.
type Delivery struct {
	Node   string
	Signal Signal
	// Repeat reports that the node had already got this signal (the same
	// ID) and did not act on it again.
	Repeat bool
}

// Bus is an in-process Sender for tests, examples and programs
// whose targets live in the same process. Nodes are added with AddNode; the
// node side answers with Respond (or automatically through OnSignal). It
// records every delivery. The zero value is an empty bus, safe for
// concurrent use.
type Bus struct {
	// OnSignal, when set, is called after every delivery, outside the
	// bus's lock, from the goroutine that sent it: it may call Respond.
	OnSignal func(node string, s Signal)

	mu    sync.Mutex
	nodes map[string]*busHost
	sent  []Delivery
}

type busHost struct {
	info     Host
	last     *Signal
	report   Report
	notReady bool
}

var (
	_ Sender      = (*Bus)(nil)
	_ ReadyProber = (*Bus)(nil)
)

// NewBus returns a bus with the given nodes.
func NewBus(nodes ...Host) *Bus {
	b := &Bus{}
	for _, n := range nodes {
		b.AddNode(n)
	}
	return b
}

// AddNode adds the node, or replaces its description (keeping its signals).
func (b *Bus) AddNode(n Host) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nodes == nil {
		b.nodes = map[string]*busHost{}
	}
	if cur, ok := b.nodes[n.Name]; ok {
		cur.info = n
		return
	}
	b.nodes[n.Name] = &busHost{info: n}
}

// RemoveNode removes the node: probes and reads then fail with
// ErrHostNotFound.
func (b *Bus) RemoveNode(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.nodes, name)
}

func (b *Bus) node(name string) (*busHost, error) {
	n, ok := b.nodes[name]
	if !ok {
		return nil, fmt.Errorf("autopilot: signal node %q: %w", name, ErrHostNotFound)
	}
	return n, nil
}

// Probe implements Sender.
func (b *Bus) Probe(ctx context.Context, name string) (Host, error) {
	if err := ctx.Err(); err != nil {
		return Host{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(name)
	if err != nil {
		return Host{}, err
	}
	return n.info, nil
}

// Send implements Sender: the node's last signal becomes s and its
// report becomes "working on s" (plan.TargetSent). A repeated signal, with
// the ID of the node's last one, is recorded (Delivery.Repeat) and changes
// nothing else: the report stays, and OnSignal is not called.
func (b *Bus) Send(ctx context.Context, name string, s Signal) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	n, err := b.node(name)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	if n.last != nil && n.last.ID == s.ID {
		b.sent = append(b.sent, Delivery{Node: name, Signal: s, Repeat: true})
		b.mu.Unlock()
		return nil
	}
	sig := s
	n.last = &sig
	n.report = Report{SignalID: s.ID, State: plan.TargetSent}
	b.sent = append(b.sent, Delivery{Node: name, Signal: s})
	on := b.OnSignal
	b.mu.Unlock()
	if on != nil {
		on(name, s)
	}
	return nil
}

// Read implements Sender.
func (b *Bus) Read(ctx context.Context, name string) (Report, error) {
	if err := ctx.Err(); err != nil {
		return Report{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(name)
	if err != nil {
		return Report{}, err
	}
	return n.report, nil
}

// ErrNoSignal means a node was asked to answer a signal it never got.
var ErrNoSignal = errors.New("autopilot: node has no signal to answer")

// Respond makes the node report state (plan.TargetCompleted,
// plan.TargetApplyFailed, or plan.TargetSent for "still working") with
// reason about its last signal.
func (b *Bus) Respond(name string, state plan.TargetState, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(name)
	if err != nil {
		return err
	}
	if n.last == nil {
		return fmt.Errorf("autopilot: signal node %q: %w", name, ErrNoSignal)
	}
	n.report = Report{SignalID: n.last.ID, State: state, Reason: reason}
	return nil
}

// SetReady sets whether the node reports itself ready (Ready); a node is
// ready until told otherwise.
func (b *Bus) SetReady(name string, ready bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(name)
	if err != nil {
		return err
	}
	n.notReady = !ready
	return nil
}

// Ready implements ReadyProber: whether the node is ready (see SetReady),
// or an error matching ErrHostNotFound.
func (b *Bus) Ready(ctx context.Context, name string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(name)
	if err != nil {
		return false, err
	}
	return !n.notReady, nil
}

// Last returns the last signal the node got.
func (b *Bus) Last(name string) (Signal, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.nodes[name]
	if !ok || n.last == nil {
		return Signal{}, false
	}
	return *n.last, true
}

// Sent returns a copy of every delivery so far, in order.
func (b *Bus) Sent() []Delivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sent)
}

// CommandHandler is a plan.CommandHandler that runs a command by signalling
// its targets through a Sender, for any kind (k0s airgapupdate and
// k0supdate are two of them), in the states and with the state names of
// k0s autopilot's plan controllers. Groups run in order; in a group, at
// most the group's concurrency limit of targets are signalled and
// unfinished at once, except in a group of controllers (the group whose
// kind, see GroupKinds, is "controller"), whose targets are signalled one
// at a time whatever the limit, as k0s updates controllers.
//
// NewPlan discovers every group and probes every target, and then sets,
// as k0s does:
//   - IncompleteTargets when a target does not exist or is not of its
//     group's kind (the target becomes plan.TargetMissing), or the
//     command's platforms have no payload for its platform
//     (plan.TargetMissingPlatform; a Host without a Platform is not
//     checked);
//   - else Restricted when a target's kind is in Restrict (the targets
//     stay plan.TargetPending);
//   - else InconsistentTargets, converge's own, when a node is listed twice
//     (plan.TargetInconsistent), which k0s does not check;
//   - else SchedulableWait. A command whose discovery finds no target
//     completes, as in k0s.
//
// SchedulableWait reads back the signalled targets: ApplyFailed when one
// reported a failure (the target becomes plan.TargetApplyFailed),
// IncompleteTargets when one vanished, TimedOut (converge's own) past the
// target timeout. It then looks at the next pending targets it would
// signal: one whose report already shows that it completed this command of
// this plan (a plan taken over from another runner, or a node updated by
// hand) is adopted as completed and never signalled, as k0s adopts a node
// whose signal data carries the plan's ID. It returns Schedulable when a
// target can be signalled now, Completed when every target completed.
//
// Schedulable signals the next pending targets (after probing them again:
// IncompleteTargets when one is gone, of another kind or on a platform
// without a payload) and returns SchedulableWait, or Completed when nothing
// is left to signal. Before it signals a controller, it checks that every
// controller of the group is ready, when the Sender is a ReadyProber (k0s's
// controller quorum safety): a controller that is not ready makes it wait
// and try again; one that no longer exists is IncompleteTargets. A Sender
// that cannot tell readiness leaves the check to the nodes: a controller
// should report plan.TargetCompleted only once it serves again, since the
// next controller is signalled as soon as it does.
//
// A target is signalled in two steps, so that a signal is never acted on
// twice: Schedulable records the intent (the target becomes
// plan.TargetSent, which the runner stores), and SchedulableWait then
// sends the signal to every plan.TargetSent target whose report does not
// show it yet. A runner that dies after sending and before storing anything
// leaves the intent stored: the runner that resumes waits for the node's
// report, sending the signal again (same ID, which the node ignores if it
// got it) only when the report does not show it. Within one process, a
// signal is sent once per node.
//
// The zero value has no Sender and must not be used; set at least Sender.
// A CommandHandler must not be copied after first use.
type CommandHandler struct {
	// Sender reaches the nodes; it is required.
	Sender Sender
	// Restrict lists node kinds excluded from plans (k0s's
	// --exclude-from-plans).
	Restrict []string
	// GroupKinds maps a group name to the node kind its targets must have;
	// nil means {"controllers": "controller", "workers": "worker"}. Groups
	// not listed accept any kind.
	GroupKinds map[string]string
	// Select resolves selector discovery; nil makes a command with a
	// selector fail to start (a handler error).
	Select func(ctx context.Context, sel plan.CommandSelector) ([]string, error)
	// Discover maps a name to the discovery function that
	// plan.CommandDiscovery.Function names; a name not in it makes the command
	// fail to start (a handler error).
	Discover map[string]plan.CommandDiscoverFunc

	mu sync.Mutex
	// sent maps a node to the ID of the last signal this handler sent it.
	sent map[string]string
}

var _ plan.CommandHandler = (*CommandHandler)(nil)

// sentBefore reports whether this handler already sent signal id to node.
func (h *CommandHandler) sentBefore(node, id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent[node] == id
}

func (h *CommandHandler) markSent(node, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sent == nil {
		h.sent = map[string]string{}
	}
	h.sent[node] = id
}

// Discovery errors of CommandHandler.
var (
	// ErrHostNotFound is returned (wrapped) by Sender.Probe and Sender.Read
	// when the host does not exist.
	ErrHostNotFound = errors.New("autopilot: host not found")
	// ErrNoSelector means a command uses selector discovery and the
	// handler has no Select function.
	ErrNoSelector = errors.New("autopilot: no selector resolver")
	// ErrNoDiscover means a command names a discovery function the
	// handler does not know.
	ErrNoDiscover = errors.New("autopilot: unknown discovery function")
)

// kindController is the node kind whose groups are signalled one at a
// time, after a readiness check.
const kindController = "controller"

func (h *CommandHandler) groupKind(group string) string {
	if h.GroupKinds == nil {
		switch group {
		case "controllers":
			return kindController
		case "workers":
			return "worker"
		}
		return ""
	}
	return h.GroupKinds[group]
}

// limit is how many targets of grp may be signalled and unfinished at
// once: one for controllers, else the group's limit.
func (h *CommandHandler) limit(grp plan.CommandTargets) int {
	if h.groupKind(grp.Group) == kindController {
		return 1
	}
	return grp.Limit()
}

// discover finds the nodes of a group: static first, then selector, then
// a named function, as k0s reads static before selector; none finds no
// node.
func (h *CommandHandler) discover(ctx context.Context, t plan.CommandTargets) ([]string, error) {
	switch {
	case t.Discovery.Func != nil:
		return t.Discovery.Func(ctx)
	case t.Discovery.Static != nil:
		return t.Discovery.Static, nil
	case t.Discovery.Selector != nil:
		if h.Select == nil {
			return nil, fmt.Errorf("group %q: %w", t.Group, ErrNoSelector)
		}
		return h.Select(ctx, *t.Discovery.Selector)
	case t.Discovery.Function != "":
		f := h.Discover[t.Discovery.Function]
		if f == nil {
			return nil, fmt.Errorf("group %q: %q: %w", t.Group, t.Discovery.Function, ErrNoDiscover)
		}
		return f(ctx)
	}
	return nil, nil
}

// planFail keeps, of the error states a step meets, the one k0s would
// set, with the reason of the first target that caused it.
type planFail struct {
	state  plan.State
	reason string
}

// planFailRank orders the error states: k0s sets IncompleteTargets before
// it looks at restrictions.
var planFailRank = map[plan.State]int{
	plan.StateIncompleteTargets:   4,
	plan.StateApplyFailed:         3,
	plan.StateRestricted:          2,
	plan.StateInconsistentTargets: 1,
	plan.StateTimedOut:            0,
}

func (f *planFail) set(state plan.State, reason string) {
	if f.state == "" || planFailRank[state] > planFailRank[f.state] {
		f.state, f.reason = state, reason
	}
}

func (f *planFail) result(c *plan.CommandContext, ok plan.State) (plan.State, error) {
	if f.state != "" {
		c.Status.Reason = f.reason
		return f.state, nil
	}
	return ok, nil
}

// NewPlan implements CommandHandler: it discovers and checks every target.
// Targets already completed (a retried plan) stay completed.
func (h *CommandHandler) NewPlan(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
	var fail planFail
	platforms, err := platformURLs(c.Command.Spec)
	if err != nil {
		fail.set(plan.StateIncompleteTargets, fmt.Sprintf("platforms is not an object: %v", err))
	}
	old := c.Status.Targets
	c.Status.Targets = map[string][]plan.TargetStatus{}
	seen := map[string]string{}
	for _, grp := range c.Command.Targets {
		nodes, err := h.discover(ctx, grp)
		if err != nil {
			return "", err
		}
		c.Status.Targets[grp.Group] = []plan.TargetStatus{}
		for _, name := range nodes {
			prev := planFindTarget(old[grp.Group], name)
			if g, dup := seen[name]; dup {
				reason := fmt.Sprintf("node %q is listed in groups %q and %q", name, g, grp.Group)
				if g == grp.Group {
					reason = fmt.Sprintf("node %q is listed twice in group %q", name, g)
				}
				c.SetTarget(grp.Group, name, plan.TargetInconsistent, reason)
				fail.set(plan.StateInconsistentTargets, reason)
				continue
			}
			seen[name] = grp.Group
			if prev != nil && prev.State == plan.TargetCompleted {
				c.Status.Targets[grp.Group] = append(c.Status.Targets[grp.Group], *prev)
				continue
			}
			t := c.SetTarget(grp.Group, name, plan.TargetPending, "")
			if prev != nil {
				t.Attempt = prev.Attempt
			}
			state, target, reason, err := h.check(ctx, grp.Group, name, platforms, true)
			if err != nil {
				return "", err
			}
			if state != "" {
				if target != "" {
					c.SetTarget(grp.Group, name, target, reason).Attempt = t.Attempt
				}
				fail.set(state, reason)
			}
		}
	}
	return fail.result(c, plan.StateSchedulableWait)
}

func planFindTarget(ts []plan.TargetStatus, name string) *plan.TargetStatus {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

// check probes a target: it returns the error state it causes (or ""),
// the target state to set with it ("" to leave the target pending) and a
// reason, or an error to try again. restrict says whether to check the
// restrictions (only NewPlan does, as in k0s).
func (h *CommandHandler) check(ctx context.Context, group, name string, platforms map[string]jsontext.Value, restrict bool) (plan.State, plan.TargetState, string, error) {
	if name == "" {
		return plan.StateIncompleteTargets, plan.TargetMissing, fmt.Sprintf("discovery of group %q returned an empty node name", group), nil
	}
	node, err := h.Sender.Probe(ctx, name)
	if errors.Is(err, ErrHostNotFound) {
		return plan.StateIncompleteTargets, plan.TargetMissing, fmt.Sprintf("node %q does not exist", name), nil
	}
	if err != nil {
		return "", "", "", err
	}
	if want := h.groupKind(group); want != "" && node.Kind != want {
		return plan.StateIncompleteTargets, plan.TargetMissing, fmt.Sprintf("node %q is a %q, group %q takes %q nodes", name, node.Kind, group, want), nil
	}
	if platforms != nil && node.Platform != "" {
		if _, ok := platforms[node.Platform]; !ok {
			return plan.StateIncompleteTargets, plan.TargetMissingPlatform, fmt.Sprintf("no payload for platform %q of node %q", node.Platform, name), nil
		}
	}
	if restrict && slices.Contains(h.Restrict, node.Kind) {
		return plan.StateRestricted, "", fmt.Sprintf("node %q is a %s, and %s nodes are excluded from plans", name, node.Kind, node.Kind), nil
	}
	return "", "", "", nil
}

// planActiveGroup returns the first group with a target not completed, or -1.
func planActiveGroup(c *plan.CommandContext) int {
	for i, g := range c.Command.Targets {
		for _, t := range c.Status.Targets[g.Group] {
			if t.State != plan.TargetCompleted {
				return i
			}
		}
	}
	return -1
}

// completedBefore reports whether rep shows that its node completed
// command index of plan id, in any attempt (see SignalID).
func completedBefore(rep Report, id string, index int) bool {
	if rep.State != plan.TargetCompleted {
		return false
	}
	attempt, ok := strings.CutPrefix(rep.SignalID, id+"/"+strconv.Itoa(index)+"/")
	if !ok || attempt == "" {
		return false
	}
	_, err := strconv.ParseUint(attempt, 10, 0)
	return err == nil
}

// pending reports whether a target is still to be signalled.
func pending(s plan.TargetState) bool { return s == "" || s == plan.TargetPending }

// SchedulableWait implements CommandHandler: it sends the signal of every
// plan.TargetSent target whose report does not show it yet (see
// CommandHandler), reads back the signalled targets, applies the target
// timeout, adopts the pending targets that already completed the command,
// and says whether there is more to signal now.
func (h *CommandHandler) SchedulableWait(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
	var fail planFail
	for _, grp := range c.Command.Targets {
		for i := range c.Status.Targets[grp.Group] {
			t := &c.Status.Targets[grp.Group][i]
			if t.State != plan.TargetSent {
				continue
			}
			rep, err := h.deliver(ctx, c, grp.Group, t)
			if errors.Is(err, ErrHostNotFound) {
				reason := fmt.Sprintf("node %q disappeared while working on the command", t.Name)
				c.SetTarget(grp.Group, t.Name, plan.TargetMissing, reason)
				fail.set(plan.StateIncompleteTargets, reason)
				continue
			}
			if err != nil {
				return "", err
			}
			if rep.SignalID == SignalID(c.PlanID, c.Index, t.Attempt) {
				switch rep.State {
				case plan.TargetCompleted:
					c.SetTarget(grp.Group, t.Name, plan.TargetCompleted, "")
					continue
				case plan.TargetApplyFailed:
					reason := fmt.Sprintf("node %q failed: %s", t.Name, rep.Reason)
					c.SetTarget(grp.Group, t.Name, plan.TargetApplyFailed, rep.Reason)
					fail.set(plan.StateApplyFailed, reason)
					continue
				}
			}
			if c.TargetTimeout > 0 && c.Since(t.LastUpdatedTimestamp) >= c.TargetTimeout {
				reason := fmt.Sprintf("node %q did not complete within %s", t.Name, c.TargetTimeout)
				c.SetTarget(grp.Group, t.Name, plan.TargetTimedOut, reason)
				fail.set(plan.StateTimedOut, reason)
			}
		}
	}
	if fail.state != "" {
		return fail.result(c, "")
	}
	for {
		gi := planActiveGroup(c)
		if gi < 0 {
			return plan.StateCompleted, nil
		}
		grp := c.Command.Targets[gi]
		inflight := 0
		for _, t := range c.Status.Targets[grp.Group] {
			if t.State == plan.TargetSent {
				inflight++
			}
		}
		free := h.limit(grp) - inflight
		candidates, adopted := 0, false
		for i := range c.Status.Targets[grp.Group] {
			if candidates >= free {
				break
			}
			t := &c.Status.Targets[grp.Group][i]
			if !pending(t.State) {
				continue
			}
			rep, err := h.Sender.Read(ctx, t.Name)
			if err != nil && !errors.Is(err, ErrHostNotFound) {
				return "", err
			}
			if err == nil && completedBefore(rep, c.PlanID, c.Index) {
				c.SetTarget(grp.Group, t.Name, plan.TargetCompleted, "")
				adopted = true
				continue
			}
			candidates++ // Schedulable finds it gone, if it is
		}
		switch {
		case candidates > 0:
			return plan.StateSchedulable, nil
		case !adopted:
			return plan.StateSchedulableWait, nil
		}
	}
}

// deliver reads the report of t, signalled (plan.TargetSent), and sends t its
// signal first when the report does not show it and this handler has not
// sent it: the intent was stored by a step of this runner or of one that
// died, maybe before it could send.
func (h *CommandHandler) deliver(ctx context.Context, c *plan.CommandContext, group string, t *plan.TargetStatus) (Report, error) {
	rep, err := h.Sender.Read(ctx, t.Name)
	id := SignalID(c.PlanID, c.Index, t.Attempt)
	if err != nil || rep.SignalID == id || h.sentBefore(t.Name, id) {
		return rep, err
	}
	sig := Signal{ID: id, PlanID: c.PlanID, Command: c.Index, Kind: c.Command.Kind, Group: group, Attempt: t.Attempt, Spec: c.Command.Spec,
		TraceParent: converge.TraceParent(ctx)}
	if err := h.Sender.Send(ctx, t.Name, sig); err != nil {
		return Report{}, err
	}
	h.markSent(t.Name, id)
	// The node may have answered at once.
	return h.Sender.Read(ctx, t.Name)
}

// ready reports whether every controller of grp is ready, when the Sender
// can tell: false (wait) when one is not, or a failure state when one no
// longer exists.
func (h *CommandHandler) ready(ctx context.Context, c *plan.CommandContext, grp plan.CommandTargets, fail *planFail) (bool, error) {
	rp, ok := h.Sender.(ReadyProber)
	if !ok || h.groupKind(grp.Group) != kindController {
		return true, nil
	}
	for _, t := range c.Status.Targets[grp.Group] {
		ok, err := rp.Ready(ctx, t.Name)
		if errors.Is(err, ErrHostNotFound) {
			reason := fmt.Sprintf("controller %q no longer exists", t.Name)
			c.SetTarget(grp.Group, t.Name, plan.TargetMissing, reason)
			fail.set(plan.StateIncompleteTargets, reason)
			return false, nil
		}
		if err != nil || !ok {
			return false, nil
		}
	}
	return true, nil
}

// Schedulable implements CommandHandler: it picks the next pending targets
// of the active group, up to its concurrency limit, checks that they still
// exist and fit their group (and, for controllers, that every controller
// is ready), and records that they are to be signalled (plan.TargetSent);
// SchedulableWait sends the signals once that is stored. With nothing left
// to signal, the command is Completed.
func (h *CommandHandler) Schedulable(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
	gi := planActiveGroup(c)
	if gi < 0 {
		return plan.StateCompleted, nil
	}
	grp := c.Command.Targets[gi]
	var fail planFail
	inflight, waiting := 0, 0
	for _, t := range c.Status.Targets[grp.Group] {
		switch {
		case t.State == plan.TargetSent:
			inflight++
		case pending(t.State):
			waiting++
		}
	}
	if waiting == 0 {
		return plan.StateSchedulableWait, nil
	}
	if inflight < h.limit(grp) {
		ok, err := h.ready(ctx, c, grp, &fail)
		if err != nil {
			return "", err
		}
		if !ok {
			// Not ready now: stay, and try again on the next step.
			return fail.result(c, plan.StateSchedulable)
		}
	}
	platforms, _ := platformURLs(c.Command.Spec)
	for i := range c.Status.Targets[grp.Group] {
		if inflight >= h.limit(grp) {
			break
		}
		t := &c.Status.Targets[grp.Group][i]
		if !pending(t.State) {
			continue
		}
		state, target, reason, err := h.check(ctx, grp.Group, t.Name, platforms, false)
		if err != nil {
			return "", err
		}
		if state != "" {
			c.SetTarget(grp.Group, t.Name, target, reason)
			fail.set(state, reason)
			break
		}
		c.SetTarget(grp.Group, t.Name, plan.TargetSent, "")
		inflight++
	}
	return fail.result(c, plan.StateSchedulableWait)
}
