package converge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
)

// Signal is what a target node receives for one command of a plan. The
// zero value carries nothing; CommandSignalHandler fills every field.
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

// SignalNode describes a target node as its probe sees it. The zero value
// is a node with no name, kind or platform.
type SignalNode struct {
	Name string `json:"name"`
	// Kind is the node's kind, for example "controller" or "worker"; it is
	// matched against restrictions and group kinds.
	Kind string `json:"kind,omitempty"`
	// Platform is the node's platform, for example "linux-amd64"; "" skips
	// the platform check.
	Platform string `json:"platform,omitempty"`
}

// SignalReport is what a node last reported about the last signal it got.
// The zero value means the node never got a signal.
type SignalReport struct {
	// SignalID is the signal the report answers ("" when the node never got
	// one).
	SignalID string `json:"signalID,omitempty"`
	// State is SignalSent while the node works on the signal, then
	// SignalCompleted or SignalFailed.
	State  PlanTargetState `json:"state,omitempty"`
	Reason string          `json:"reason,omitempty"`
}

// SignalSender reaches target nodes: it probes them, delivers signals and
// reads back what they reported. Implementations must be safe for concurrent
// use. SignalBus is the in-process implementation.
type SignalSender interface {
	// Probe describes the node, or fails with an error matching
	// ErrSignalNodeNotFound when it does not exist.
	Probe(ctx context.Context, node string) (SignalNode, error)
	// Send delivers s to the node. Delivering the same signal twice must
	// be harmless, but CommandSignalHandler avoids it.
	Send(ctx context.Context, node string, s Signal) error
	// Read returns the node's report about the last signal it got (the
	// zero report when none), or an error matching ErrSignalNodeNotFound.
	Read(ctx context.Context, node string) (SignalReport, error)
}

// SignalDelivery records one signal delivered by a SignalBus.
type SignalDelivery struct {
	Node   string
	Signal Signal
}

// SignalBus is an in-process SignalSender for tests, examples and programs
// whose targets live in the same process. Nodes are added with AddNode; the
// node side answers with Respond (or automatically through OnSignal). It
// records every delivery. The zero value is an empty bus, safe for
// concurrent use.
type SignalBus struct {
	// OnSignal, when set, is called after every delivery, outside the
	// bus's lock, from the goroutine that sent it: it may call Respond.
	OnSignal func(node string, s Signal)

	mu    sync.Mutex
	nodes map[string]*signalBusNode
	sent  []SignalDelivery
}

type signalBusNode struct {
	info   SignalNode
	last   *Signal
	report SignalReport
}

var _ SignalSender = (*SignalBus)(nil)

// NewSignalBus returns a bus with the given nodes.
func NewSignalBus(nodes ...SignalNode) *SignalBus {
	b := &SignalBus{}
	for _, n := range nodes {
		b.AddNode(n)
	}
	return b
}

// AddNode adds the node, or replaces its description (keeping its signals).
func (b *SignalBus) AddNode(n SignalNode) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nodes == nil {
		b.nodes = map[string]*signalBusNode{}
	}
	if cur, ok := b.nodes[n.Name]; ok {
		cur.info = n
		return
	}
	b.nodes[n.Name] = &signalBusNode{info: n}
}

// RemoveNode removes the node: probes and reads then fail with
// ErrSignalNodeNotFound.
func (b *SignalBus) RemoveNode(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.nodes, name)
}

func (b *SignalBus) node(name string) (*signalBusNode, error) {
	n, ok := b.nodes[name]
	if !ok {
		return nil, fmt.Errorf("converge: signal node %q: %w", name, ErrSignalNodeNotFound)
	}
	return n, nil
}

// Probe implements SignalSender.
func (b *SignalBus) Probe(ctx context.Context, name string) (SignalNode, error) {
	if err := ctx.Err(); err != nil {
		return SignalNode{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(name)
	if err != nil {
		return SignalNode{}, err
	}
	return n.info, nil
}

// Send implements SignalSender: the node's last signal becomes s and its
// report becomes "working on s" (SignalSent).
func (b *SignalBus) Send(ctx context.Context, name string, s Signal) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	n, err := b.node(name)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	sig := s
	n.last = &sig
	n.report = SignalReport{SignalID: s.ID, State: SignalSent}
	b.sent = append(b.sent, SignalDelivery{Node: name, Signal: s})
	on := b.OnSignal
	b.mu.Unlock()
	if on != nil {
		on(name, s)
	}
	return nil
}

// Read implements SignalSender.
func (b *SignalBus) Read(ctx context.Context, name string) (SignalReport, error) {
	if err := ctx.Err(); err != nil {
		return SignalReport{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(name)
	if err != nil {
		return SignalReport{}, err
	}
	return n.report, nil
}

// ErrSignalNone means a node was asked to answer a signal it never got.
var ErrSignalNone = errors.New("converge: node has no signal to answer")

// Respond makes the node report state (SignalCompleted, SignalFailed, or
// SignalSent for "still working") with reason about its last signal.
func (b *SignalBus) Respond(name string, state PlanTargetState, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(name)
	if err != nil {
		return err
	}
	if n.last == nil {
		return fmt.Errorf("converge: signal node %q: %w", name, ErrSignalNone)
	}
	n.report = SignalReport{SignalID: n.last.ID, State: state, Reason: reason}
	return nil
}

// Last returns the last signal the node got.
func (b *SignalBus) Last(name string) (Signal, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.nodes[name]
	if !ok || n.last == nil {
		return Signal{}, false
	}
	return *n.last, true
}

// Sent returns a copy of every delivery so far, in order.
func (b *SignalBus) Sent() []SignalDelivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sent)
}

// CommandSignalHandler is a CommandHandler that runs a command by signalling
// its targets through a SignalSender, for any kind (k0s airgapupdate and
// k0supdate are two of them). Groups run in order; in a group, at most the
// group's concurrency limit of targets are signalled and unfinished at once.
//
// Error states: IncompleteTargets (a discovered target does not exist),
// Restricted (its kind is in Restrict), InconsistentTargets (its kind is not
// the one its group expects, or it is listed twice), MissingPlatform (the
// command's `platforms` has no entry for its platform) in NewPlan;
// MissingSignalNode (a target vanished) and InconsistentTargets (its kind
// changed) when signalling; Failed (a target reported failure) and TimedOut
// (a target ran past the target timeout) when waiting.
//
// The zero value has no Sender and must not be used; set at least Sender.
type CommandSignalHandler struct {
	// Sender reaches the nodes; it is required.
	Sender SignalSender
	// Restrict lists node kinds excluded from plans.
	Restrict []string
	// GroupKinds maps a group name to the node kind its targets must have;
	// nil means {"controllers": "controller", "workers": "worker"}. Groups
	// not listed accept any kind.
	GroupKinds map[string]string
	// Select resolves selector discovery; nil makes a command with a
	// selector fail to start (a handler error).
	Select func(ctx context.Context, sel CommandSelector) ([]string, error)
	// Discover maps a name to the discovery function that
	// CommandDiscovery.Function names; a name not in it makes the command
	// fail to start (a handler error).
	Discover map[string]CommandDiscoverFunc
}

var _ CommandHandler = (*CommandSignalHandler)(nil)

// Discovery errors of CommandSignalHandler.
var (
	// ErrSignalNoSelector means a command uses selector discovery and the
	// handler has no Select function.
	ErrSignalNoSelector = errors.New("converge: no selector resolver")
	// ErrSignalNoDiscover means a command names a discovery function the
	// handler does not know.
	ErrSignalNoDiscover = errors.New("converge: unknown discovery function")
)

func (h *CommandSignalHandler) groupKind(group string) string {
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

func (h *CommandSignalHandler) discover(ctx context.Context, t CommandTargets) ([]string, error) {
	switch {
	case t.Discovery.Func != nil:
		return t.Discovery.Func(ctx)
	case t.Discovery.Function != "":
		f := h.Discover[t.Discovery.Function]
		if f == nil {
			return nil, fmt.Errorf("group %q: %q: %w", t.Group, t.Discovery.Function, ErrSignalNoDiscover)
		}
		return f(ctx)
	case t.Discovery.Selector != nil:
		if h.Select == nil {
			return nil, fmt.Errorf("group %q: %w", t.Group, ErrSignalNoSelector)
		}
		return h.Select(ctx, *t.Discovery.Selector)
	}
	return t.Discovery.Static, nil
}

// planFail keeps the first error state a command meets, with its reason.
type planFail struct {
	state  PlanState
	reason string
}

func (f *planFail) set(state PlanState, reason string) {
	if f.state == "" {
		f.state, f.reason = state, reason
	}
}

func (f *planFail) result(c *CommandContext, ok PlanState) (PlanState, error) {
	if f.state != "" {
		c.Status.Reason = f.reason
		return f.state, nil
	}
	return ok, nil
}

// NewPlan implements CommandHandler: it discovers and checks every target.
// Targets already completed (a retried plan) stay completed.
func (h *CommandSignalHandler) NewPlan(ctx context.Context, c *CommandContext) (PlanState, error) {
	var platforms map[string]json.RawMessage
	var fail planFail
	if raw, ok := c.Command.Spec["platforms"]; ok {
		if err := json.Unmarshal(raw, &platforms); err != nil {
			fail.set(PlanMissingPlatform, fmt.Sprintf("platforms is not an object: %v", err))
		}
	}
	old := c.Status.Targets
	c.Status.Targets = map[string][]PlanTargetStatus{}
	seen := map[string]string{}
	for _, grp := range c.Command.Targets {
		nodes, err := h.discover(ctx, grp)
		if err != nil {
			return "", err
		}
		c.Status.Targets[grp.Group] = []PlanTargetStatus{}
		for _, name := range nodes {
			if name == "" {
				fail.set(PlanIncompleteTargets, fmt.Sprintf("discovery of group %q returned an empty node name", grp.Group))
				continue
			}
			prev := planFindTarget(old[grp.Group], name)
			if g, dup := seen[name]; dup {
				reason := fmt.Sprintf("node %q is listed in groups %q and %q", name, g, grp.Group)
				if g == grp.Group {
					reason = fmt.Sprintf("node %q is listed twice in group %q", name, g)
				}
				c.SetTarget(grp.Group, name, SignalInconsistent, reason)
				fail.set(PlanInconsistentTargets, reason)
				continue
			}
			seen[name] = grp.Group
			if prev != nil && prev.State == SignalCompleted {
				c.Status.Targets[grp.Group] = append(c.Status.Targets[grp.Group], *prev)
				continue
			}
			t := c.SetTarget(grp.Group, name, SignalPending, "")
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
	return fail.result(c, PlanSchedulableWait)
}

var planTargetFailure = map[PlanState]PlanTargetState{
	PlanIncompleteTargets:   SignalMissingNode,
	PlanMissingSignalNode:   SignalMissingNode,
	PlanRestricted:          SignalRestricted,
	PlanInconsistentTargets: SignalInconsistent,
	PlanMissingPlatform:     SignalMissingPlatform,
}

func planFindTarget(ts []PlanTargetStatus, name string) *PlanTargetStatus {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

// check probes a target at NewPlan; it returns the error state it causes
// (or "") with a reason, or an error to try again.
func (h *CommandSignalHandler) check(ctx context.Context, group, name string, platforms map[string]json.RawMessage) (PlanState, string, error) {
	node, err := h.Sender.Probe(ctx, name)
	if errors.Is(err, ErrSignalNodeNotFound) {
		return PlanIncompleteTargets, fmt.Sprintf("node %q does not exist", name), nil
	}
	if err != nil {
		return "", "", err
	}
	if slices.Contains(h.Restrict, node.Kind) {
		return PlanRestricted, fmt.Sprintf("node %q is a %s, and %s nodes are excluded from plans", name, node.Kind, node.Kind), nil
	}
	if want := h.groupKind(group); want != "" && node.Kind != want {
		return PlanInconsistentTargets, fmt.Sprintf("node %q is a %q, group %q takes %q nodes", name, node.Kind, group, want), nil
	}
	if platforms != nil && node.Platform != "" {
		if _, ok := platforms[node.Platform]; !ok {
			return PlanMissingPlatform, fmt.Sprintf("no payload for platform %q of node %q", node.Platform, name), nil
		}
	}
	return "", "", nil
}

// activeGroup returns the first group with a target not completed, or -1.
func planActiveGroup(c *CommandContext) int {
	for i, g := range c.Command.Targets {
		for _, t := range c.Status.Targets[g.Group] {
			if t.State != SignalCompleted {
				return i
			}
		}
	}
	return -1
}

// SchedulableWait implements CommandHandler: it reads back the signalled
// targets, applies the target timeout, and says whether there is more to
// signal now.
func (h *CommandSignalHandler) SchedulableWait(ctx context.Context, c *CommandContext) (PlanState, error) {
	var fail planFail
	for _, grp := range c.Command.Targets {
		for i := range c.Status.Targets[grp.Group] {
			t := &c.Status.Targets[grp.Group][i]
			if t.State != SignalSent {
				continue
			}
			rep, err := h.Sender.Read(ctx, t.Name)
			if errors.Is(err, ErrSignalNodeNotFound) {
				reason := fmt.Sprintf("node %q disappeared while working on the command", t.Name)
				c.SetTarget(grp.Group, t.Name, SignalMissingNode, reason)
				fail.set(PlanMissingSignalNode, reason)
				continue
			}
			if err != nil {
				return "", err
			}
			if rep.SignalID == SignalID(c.PlanID, c.Index, t.Attempt) {
				switch rep.State {
				case SignalCompleted:
					c.SetTarget(grp.Group, t.Name, SignalCompleted, "")
					continue
				case SignalFailed:
					reason := fmt.Sprintf("node %q failed: %s", t.Name, rep.Reason)
					c.SetTarget(grp.Group, t.Name, SignalFailed, rep.Reason)
					fail.set(PlanFailed, reason)
					continue
				}
			}
			if c.TargetTimeout > 0 && c.Now.Sub(t.LastUpdatedTimestamp) >= c.TargetTimeout {
				reason := fmt.Sprintf("node %q did not complete within %s", t.Name, c.TargetTimeout)
				c.SetTarget(grp.Group, t.Name, SignalTimedOut, reason)
				fail.set(PlanTimedOut, reason)
			}
		}
	}
	if fail.state != "" {
		return fail.result(c, "")
	}
	gi := planActiveGroup(c)
	if gi < 0 {
		return PlanCompleted, nil
	}
	grp := c.Command.Targets[gi]
	pending, inflight := 0, 0
	for _, t := range c.Status.Targets[grp.Group] {
		switch t.State.normal() {
		case SignalPending:
			pending++
		case SignalSent:
			inflight++
		}
	}
	if pending > 0 && inflight < grp.concurrent() {
		return PlanSchedulable, nil
	}
	return PlanSchedulableWait, nil
}

// Schedulable implements CommandHandler: it signals the next pending
// targets of the active group, up to its concurrency limit. A target that
// already got this very signal (the runner stopped between sending and
// storing) is not signalled again.
func (h *CommandSignalHandler) Schedulable(ctx context.Context, c *CommandContext) (PlanState, error) {
	gi := planActiveGroup(c)
	if gi < 0 {
		return PlanSchedulableWait, nil
	}
	grp := c.Command.Targets[gi]
	var fail planFail
	inflight := 0
	for _, t := range c.Status.Targets[grp.Group] {
		if t.State == SignalSent {
			inflight++
		}
	}
	for i := range c.Status.Targets[grp.Group] {
		if inflight >= grp.concurrent() {
			break
		}
		t := &c.Status.Targets[grp.Group][i]
		if t.State.normal() != SignalPending {
			continue
		}
		node, err := h.Sender.Probe(ctx, t.Name)
		if errors.Is(err, ErrSignalNodeNotFound) {
			reason := fmt.Sprintf("node %q no longer exists", t.Name)
			c.SetTarget(grp.Group, t.Name, SignalMissingNode, reason)
			fail.set(PlanMissingSignalNode, reason)
			break
		}
		if err != nil {
			return "", err
		}
		if want := h.groupKind(grp.Group); want != "" && node.Kind != want {
			reason := fmt.Sprintf("node %q is now a %q, group %q takes %q nodes", t.Name, node.Kind, grp.Group, want)
			c.SetTarget(grp.Group, t.Name, SignalInconsistent, reason)
			fail.set(PlanInconsistentTargets, reason)
			break
		}
		id := SignalID(c.PlanID, c.Index, t.Attempt)
		rep, err := h.Sender.Read(ctx, t.Name)
		if err != nil && !errors.Is(err, ErrSignalNodeNotFound) {
			return "", err
		}
		if rep.SignalID != id {
			sig := Signal{ID: id, PlanID: c.PlanID, Command: c.Index, Kind: c.Command.Kind, Group: grp.Group, Attempt: t.Attempt, Spec: c.Command.Spec}
			if err := h.Sender.Send(ctx, t.Name, sig); err != nil {
				return "", err
			}
		}
		c.SetTarget(grp.Group, t.Name, SignalSent, "")
		inflight++
	}
	return fail.result(c, PlanSchedulableWait)
}
