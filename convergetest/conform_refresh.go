package convergetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/convergekit/converge"
)

// RefreshTrigger returns the ID of the fake dependency that Conform's walks
// put before a converge.Refresher item with ID id, and that Conform passes
// to its Refresh when ConformOptions.RefreshFor is nil: id followed by
// "#conform-trigger".
func RefreshTrigger(id converge.ID) converge.ID { return id + "#conform-trigger" }

// refresh checks the Refresher rules of the contract on the converged item.
func (c *conformer[S]) refresh(ctx context.Context, r converge.Refresher[S], goal S) bool {
	changed := c.opts.RefreshFor
	if changed == nil {
		changed = []converge.ID{RefreshTrigger(c.item.ID())}
	}
	for _, step := range []string{"Refresh on a converged item", "Refresh again"} {
		cur, err := c.current(ctx)
		if err != nil {
			c.fail(step+": StateCurrent", err)
			return false
		}
		got, err := r.Refresh(ctx, cur, slices.Clone(changed))
		if err != nil {
			c.fail(step, err)
			return false
		}
		d, err := c.item.Check(ctx, got, goal)
		if err != nil {
			c.fail(step+": Check", err)
			return false
		}
		if d.Required() {
			c.fail(step, errors.New("the state Refresh returned is not converged: a refresh must keep a converged item converged"))
			return false
		}
		if !c.settled(ctx, step, goal) {
			return false
		}
	}
	return c.refreshWalks(ctx, r, goal)
}

// refreshWalks walks the item after a fake dependency that changes: a dry
// run, an Apply, and an Apply that changes nothing.
func (c *conformer[S]) refreshWalks(ctx context.Context, r converge.Refresher[S], goal S) bool {
	id := c.item.ID()
	probe := &refreshProbe[S]{item: c.item, r: r, deps: c.opts.Deps}
	trigger := &Item{Key: RefreshTrigger(id), Goal: "changed"}
	g := converge.NewGraph()
	g.Add(trigger.Node(), converge.Present)
	g.Add(converge.Wrap[S](probe), converge.Present, trigger.Key)
	// A walker of its own, with a log of its own: nothing is pending for
	// the item from anyone else's walks.
	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 1, RefreshLog: &converge.MemRefreshLog{}})
	if err != nil {
		c.fail("walk", err)
		return false
	}
	want := []converge.ID{trigger.Key}

	const dry = "dry run walk with a changed dependency"
	snapBefore, err := c.snapshot(ctx)
	if err != nil {
		c.fail("Snapshot", err)
		return false
	}
	rep, err := w.ApplyDry(ctx, g)
	if err != nil {
		c.fail(dry, err)
		return false
	}
	ok := true
	if n := probe.count(); n != 0 {
		c.fail(dry, fmt.Errorf("Refresh was called %d times: a dry run must never refresh", n))
		ok = false
	}
	if res, _ := rep.Item(id); res.Outcome != converge.OutcomeWouldChange || !slices.Equal(res.Refresh, want) {
		c.fail(dry, fmt.Errorf("the result does not say the item would refresh for %v: outcome %s, refresh %v", want, res.Outcome, res.Refresh))
		ok = false
	}
	snapAfter, err := c.snapshot(ctx)
	if err != nil {
		c.fail("Snapshot", err)
		return false
	}
	if !reflect.DeepEqual(snapBefore, snapAfter) {
		c.fail(dry, errors.New("the real system changed during a dry run"))
		ok = false
	}
	if !ok {
		return false
	}

	const apply = "walk with a changed dependency"
	rep, err = w.Apply(ctx, g)
	if err != nil {
		c.fail(apply, err)
		return false
	}
	if n := probe.count(); n != 1 {
		c.fail(apply, fmt.Errorf("Refresh was called %d times, want exactly once", n))
		return false
	}
	if res, _ := rep.Item(id); res.Outcome != converge.OutcomeChanged || !slices.Equal(res.Refresh, want) {
		c.fail(apply, fmt.Errorf("the result does not say the item was refreshed for %v: outcome %s, refresh %v", want, res.Outcome, res.Refresh))
		return false
	}
	if !c.settled(ctx, apply, goal) {
		return false
	}

	const quiet = "walk that changes nothing"
	rep, err = w.Apply(ctx, g)
	if err != nil {
		c.fail(quiet, err)
		return false
	}
	if n := probe.count(); n != 1 {
		c.fail(quiet, errors.New("the item was refreshed although nothing changed"))
		return false
	}
	if res, _ := rep.Item(id); res.Outcome != converge.OutcomeUnchanged {
		c.fail(quiet, fmt.Errorf("outcome %s, want %s", res.Outcome, converge.OutcomeUnchanged))
		return false
	}
	return true
}

// refreshProbe runs the item under test in Conform's walks: it hands the
// item ConformOptions.Deps (when set) in place of the walk's states, and
// counts the walk's calls of Refresh.
type refreshProbe[S any] struct {
	item converge.Item[S]
	r    converge.Refresher[S]
	deps converge.DepStates

	mu    sync.Mutex
	calls int
}

func (p *refreshProbe[S]) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func (p *refreshProbe[S]) depsFor(walk converge.DepStates) converge.DepStates {
	if p.deps != nil {
		return p.deps
	}
	return walk
}

func (p *refreshProbe[S]) ID() converge.ID { return p.item.ID() }

func (p *refreshProbe[S]) StateCurrent(ctx context.Context, deps converge.DepStates) (S, error) {
	return p.item.StateCurrent(ctx, p.depsFor(deps))
}

func (p *refreshProbe[S]) StateGoal(ctx context.Context, deps converge.DepStates) (S, error) {
	return p.item.StateGoal(ctx, p.depsFor(deps))
}

func (p *refreshProbe[S]) Check(ctx context.Context, current, target S) (converge.Decision, error) {
	return p.item.Check(ctx, current, target)
}

func (p *refreshProbe[S]) Apply(ctx context.Context, current, target S) (S, error) {
	return p.item.Apply(ctx, current, target)
}

func (p *refreshProbe[S]) ApplyDry(ctx context.Context, current, target S) (S, error) {
	return p.item.ApplyDry(ctx, current, target)
}

func (p *refreshProbe[S]) Refresh(ctx context.Context, current S, changed []converge.ID) (S, error) {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	return p.r.Refresh(ctx, current, changed)
}
