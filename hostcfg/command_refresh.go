package hostcfg

import (
	"context"
	"slices"

	"github.com/convergekit/converge"
)

var _ converge.Refresher[CommandState] = (*Command)(nil)

// Node returns the item wrapped for a graph. A RefreshOnly item is
// wrapped with its converge.Refresher ability, so a walk refreshes it
// when a dependency changed; any other Command is wrapped without it: its
// guards alone decide whether it runs, and a change of its dependencies
// neither runs it nor reports it changed. (converge.Unwrap of the latter
// returns a wrapper of the item, not the *Command.)
func (c *Command) Node() converge.Node {
	if c.RefreshOnly {
		return converge.Wrap[CommandState](c)
	}
	return converge.Wrap[CommandState](guardedCommand{c})
}

// Refresh runs the program of a RefreshOnly item, once per walk in which
// a dependency changed (see converge.Refresher), unless a guard holds;
// with guards, it verifies them after the run as Apply does. A failure is
// a *CommandError, and the walk keeps the refresh due for its next walk.
// The refresh is promised at least once (a process killed after the run
// and before the walk noted it runs it again), so the program must be
// harmless to repeat, as a restart is. On an item that is not RefreshOnly
// it runs nothing and returns current: Node does not hand such an item to
// a walk as a Refresher.
func (c *Command) Refresh(ctx context.Context, current CommandState, changed []converge.ID) (CommandState, error) {
	if err := c.Validate(); err != nil {
		return CommandState{}, err
	}
	if !c.RefreshOnly {
		return current, nil
	}
	st, err := c.runGuarded(ctx)
	if err != nil {
		return CommandState{}, err
	}
	st.Changed = slices.Clone(changed)
	return st, nil
}

// guardedCommand is a Command that is not RefreshOnly, as a graph holds
// it: the Item methods only, so that converge.Wrap does not make it a
// refresher.
type guardedCommand struct{ c *Command }

func (g guardedCommand) ID() converge.ID { return g.c.ID() }

func (g guardedCommand) StateCurrent(ctx context.Context, deps converge.DepStates) (CommandState, error) {
	return g.c.StateCurrent(ctx, deps)
}

func (g guardedCommand) StateGoal(ctx context.Context, deps converge.DepStates) (CommandState, error) {
	return g.c.StateGoal(ctx, deps)
}

func (g guardedCommand) Check(ctx context.Context, current, target CommandState) (converge.Decision, error) {
	return g.c.Check(ctx, current, target)
}

func (g guardedCommand) Apply(ctx context.Context, current, target CommandState) (CommandState, error) {
	return g.c.Apply(ctx, current, target)
}

func (g guardedCommand) ApplyDry(ctx context.Context, current, target CommandState) (CommandState, error) {
	return g.c.ApplyDry(ctx, current, target)
}
