package autopilot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

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
	// plan.TargetCompleted or plan.TargetFailed.
	State  plan.TargetState `json:"state,omitempty"`
	Reason string           `json:"reason,omitempty"`
}

// Sender reaches target nodes: it probes them, delivers signals and
// reads back what they reported. Implementations must be safe for concurrent
// use. Bus is the in-process implementation.
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
	info   Host
	last   *Signal
	report Report
}

var _ Sender = (*Bus)(nil)

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

// Respond makes the node report state (plan.TargetCompleted, plan.TargetFailed, or
// plan.TargetSent for "still working") with reason about its last signal.
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
// k0supdate are two of them). Groups run in order; in a group, at most the
// group's concurrency limit of targets are signalled and unfinished at once.
//
// Error states: IncompleteTargets (a discovered target does not exist, or
// discovery found no target at all: a command that would do nothing),
// Restricted (its kind is in Restrict), InconsistentTargets (its kind is not
// the one its group expects, or it is listed twice), MissingPlatform (the
// command's `platforms` has no entry for its platform) in NewPlan;
// MissingSignalNode (a target vanished) and InconsistentTargets (its kind
// changed) when signalling; Failed (a target reported failure) and TimedOut
// (a target ran past the target timeout) when waiting.
//
// A target is signalled in two steps, so that a signal is never acted on
// twice: Schedulable records the intent (the target becomes plan.TargetSent, which
// the runner stores), and SchedulableWait then sends the signal to every
// plan.TargetSent target whose report does not show it yet. A runner that dies
// after sending and before storing anything leaves the intent stored: the
// runner that resumes waits for the node's report, sending the signal again
// (same ID, which the node ignores if it got it) only when the report does
// not show it. Within one process, a signal is sent once per node.
//
// The zero value has no Sender and must not be used; set at least Sender.
// A CommandHandler must not be copied after first use.
type CommandHandler struct {
	// Sender reaches the nodes; it is required.
	Sender Sender
	// Restrict lists node kinds excluded from plans.
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

func (h *CommandHandler) groupKind(group string) string {
	if h.GroupKinds == nil {
		switch group {
		case "controllers":
			return "controller"
		case "workers":
			return "worker"
		}
		return ""
	}
	return h.GroupKinds[group]
}

func (h *CommandHandler) discover(ctx context.Context, t plan.CommandTargets) ([]string, error) {
	switch {
	case t.Discovery.Func != nil:
		return t.Discovery.Func(ctx)
	case t.Discovery.Function != "":
		f := h.Discover[t.Discovery.Function]
		if f == nil {
			return nil, fmt.Errorf("group %q: %q: %w", t.Group, t.Discovery.Function, ErrNoDiscover)
		}
		return f(ctx)
	case t.Discovery.Selector != nil:
		if h.Select == nil {
			return nil, fmt.Errorf("group %q: %w", t.Group, ErrNoSelector)
		}
		return h.Select(ctx, *t.Discovery.Selector)
	}
	return t.Discovery.Static, nil
}

// planFail keeps the first error state a command meets, with its reason.
type planFail struct {
	state  plan.State
	reason string
}

func (f *planFail) set(state plan.State, reason string) {
	if f.state == "" {
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
	var platforms map[string]json.RawMessage
	var fail planFail
	if raw, ok := c.Command.Spec["platforms"]; ok {
		if err := json.Unmarshal(raw, &platforms); err != nil {
			fail.set(plan.StateMissingPlatform, fmt.Sprintf("platforms is not an object: %v", err))
		}
	}
	old := c.Status.Targets
	c.Status.Targets = map[string][]plan.TargetStatus{}
	seen := map[string]string{}
	found := 0
	for _, grp := range c.Command.Targets {
		nodes, err := h.discover(ctx, grp)
		if err != nil {
			return "", err
		}
		found += len(nodes)
		c.Status.Targets[grp.Group] = []plan.TargetStatus{}
		for _, name := range nodes {
			if name == "" {
				fail.set(plan.StateIncompleteTargets, fmt.Sprintf("discovery of group %q returned an empty node name", grp.Group))
				continue
			}
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
			state, reason, err := h.check(ctx, grp.Group, name, platforms)
			if err != nil {
				return "", err
			}
			if state != "" {
				c.SetTarget(grp.Group, name, planTargetFailure[state], reason).Attempt = t.Attempt
				fail.set(state, reason)
			}
		}
	}
	if found == 0 {
		fail.set(plan.StateIncompleteTargets, "discovery found no target in any group")
	}
	return fail.result(c, plan.StateSchedulableWait)
}

var planTargetFailure = map[plan.State]plan.TargetState{
	plan.StateIncompleteTargets:   plan.TargetMissing,
	plan.StateMissingSignalNode:   plan.TargetMissing,
	plan.StateRestricted:          plan.TargetRestricted,
	plan.StateInconsistentTargets: plan.TargetInconsistent,
	plan.StateMissingPlatform:     plan.TargetMissingPlatform,
}

func planFindTarget(ts []plan.TargetStatus, name string) *plan.TargetStatus {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

// check probes a target at NewPlan; it returns the error state it causes
// (or "") with a reason, or an error to try again.
func (h *CommandHandler) check(ctx context.Context, group, name string, platforms map[string]json.RawMessage) (plan.State, string, error) {
	node, err := h.Sender.Probe(ctx, name)
	if errors.Is(err, ErrHostNotFound) {
		return plan.StateIncompleteTargets, fmt.Sprintf("node %q does not exist", name), nil
	}
	if err != nil {
		return "", "", err
	}
	if slices.Contains(h.Restrict, node.Kind) {
		return plan.StateRestricted, fmt.Sprintf("node %q is a %s, and %s nodes are excluded from plans", name, node.Kind, node.Kind), nil
	}
	if want := h.groupKind(group); want != "" && node.Kind != want {
		return plan.StateInconsistentTargets, fmt.Sprintf("node %q is a %q, group %q takes %q nodes", name, node.Kind, group, want), nil
	}
	if platforms != nil && node.Platform != "" {
		if _, ok := platforms[node.Platform]; !ok {
			return plan.StateMissingPlatform, fmt.Sprintf("no payload for platform %q of node %q", node.Platform, name), nil
		}
	}
	return "", "", nil
}

// activeGroup returns the first group with a target not completed, or -1.
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

// SchedulableWait implements CommandHandler: it sends the signal of every
// plan.TargetSent target whose report does not show it yet (see CommandHandler),
// reads back the signalled targets, applies the target timeout, and says
// whether there is more to signal now.
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
				fail.set(plan.StateMissingSignalNode, reason)
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
				case plan.TargetFailed:
					reason := fmt.Sprintf("node %q failed: %s", t.Name, rep.Reason)
					c.SetTarget(grp.Group, t.Name, plan.TargetFailed, rep.Reason)
					fail.set(plan.StateFailed, reason)
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
	gi := planActiveGroup(c)
	if gi < 0 {
		return plan.StateCompleted, nil
	}
	grp := c.Command.Targets[gi]
	pending, inflight := 0, 0
	for _, t := range c.Status.Targets[grp.Group] {
		switch t.State {
		case "", plan.TargetPending:
			pending++
		case plan.TargetSent:
			inflight++
		}
	}
	if pending > 0 && inflight < grp.Limit() {
		return plan.StateSchedulable, nil
	}
	return plan.StateSchedulableWait, nil
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
	sig := Signal{ID: id, PlanID: c.PlanID, Command: c.Index, Kind: c.Command.Kind, Group: group, Attempt: t.Attempt, Spec: c.Command.Spec}
	if err := h.Sender.Send(ctx, t.Name, sig); err != nil {
		return Report{}, err
	}
	h.markSent(t.Name, id)
	// The node may have answered at once.
	return h.Sender.Read(ctx, t.Name)
}

// Schedulable implements CommandHandler: it picks the next pending targets
// of the active group, up to its concurrency limit, checks that they still
// exist and fit their group, and records that they are to be signalled
// (plan.TargetSent); SchedulableWait sends the signals once that is stored.
func (h *CommandHandler) Schedulable(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
	gi := planActiveGroup(c)
	if gi < 0 {
		return plan.StateSchedulableWait, nil
	}
	grp := c.Command.Targets[gi]
	var fail planFail
	inflight := 0
	for _, t := range c.Status.Targets[grp.Group] {
		if t.State == plan.TargetSent {
			inflight++
		}
	}
	for i := range c.Status.Targets[grp.Group] {
		if inflight >= grp.Limit() {
			break
		}
		t := &c.Status.Targets[grp.Group][i]
		if t.State != "" && t.State != plan.TargetPending {
			continue
		}
		node, err := h.Sender.Probe(ctx, t.Name)
		if errors.Is(err, ErrHostNotFound) {
			reason := fmt.Sprintf("node %q no longer exists", t.Name)
			c.SetTarget(grp.Group, t.Name, plan.TargetMissing, reason)
			fail.set(plan.StateMissingSignalNode, reason)
			break
		}
		if err != nil {
			return "", err
		}
		if want := h.groupKind(grp.Group); want != "" && node.Kind != want {
			reason := fmt.Sprintf("node %q is now a %q, group %q takes %q nodes", t.Name, node.Kind, grp.Group, want)
			c.SetTarget(grp.Group, t.Name, plan.TargetInconsistent, reason)
			fail.set(plan.StateInconsistentTargets, reason)
			break
		}
		c.SetTarget(grp.Group, t.Name, plan.TargetSent, "")
		inflight++
	}
	return fail.result(c, plan.StateSchedulableWait)
}
