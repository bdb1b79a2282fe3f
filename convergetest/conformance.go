package convergetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/convergekit/converge"
	"github.com/hashicorp/go-multierror"
)

// ErrNonConformant is matched by every *ConformanceError.
var ErrNonConformant = errors.New("convergetest: item breaks the Item contract")

// ConformanceError is one broken rule of the Item contract found by Conform.
type ConformanceError struct {
	ID   converge.ID
	Step string
	Err  error
}

// Error describes the problem, naming its culprit.
func (e *ConformanceError) Error() string {
	return fmt.Sprintf("convergetest: item %q: %s: %v", e.ID, e.Step, e.Err)
}

// Unwrap returns the cause.
func (e *ConformanceError) Unwrap() error { return e.Err }

// Is makes ConformanceError match ErrNonConformant.
func (e *ConformanceError) Is(target error) bool { return target == ErrNonConformant }

// ConformOptions tunes Conform. The zero value checks an item without
// dependencies and without a snapshot of the real system.
type ConformOptions struct {
	// Deps is what the item sees as its dependencies' states.
	Deps converge.DepStates
	// Snapshot, when set, captures the real system the item manages (a
	// directory tree, a list of containers). Conform compares snapshots
	// taken around ApplyDry with reflect.DeepEqual to prove it wrote
	// nothing. Without it, Conform compares StateCurrent with Check.
	Snapshot func(ctx context.Context) (any, error)
	// RefreshFor is what Conform passes to the Refresh of an item that is a
	// converge.Refresher as the dependencies that changed; nil means one
	// made-up ID (RefreshTrigger(item.ID())).
	RefreshFor []converge.ID
}

// Conform runs the Item contract against item on the real system it
// manages and returns nil or an error aggregating one *ConformanceError per
// broken rule. The item should start away from its goal so that every rule
// is exercised. Conform checks that:
//
//   - ApplyDry returns a state that Check accepts as converged and changes
//     nothing real;
//   - Apply reaches the goal (verified by StateCurrent and Check), and a
//     second Check says nothing is left to do;
//   - Apply run again on a converged item is harmless (idempotent);
//   - when the item implements converge.Refresher: Refresh on the converged
//     item keeps it converged (Check accepts the state it returns and,
//     once more, StateCurrent), twice in a row too, since a refresh may be
//     repeated; in a walk where a dependency would change, a dry run
//     (converge.Walker.ApplyDry) reports that the item would refresh,
//     never calls Refresh and changes nothing real, and an Apply refreshes
//     it exactly once and leaves it converged, and a walk that changes
//     nothing does not refresh it (the walks pass the item Deps, and run
//     it after a fake dependency of its own, RefreshTrigger(item.ID()));
//   - when the item implements converge.Cleaner: removal (Apply towards the
//     clean state) then Apply towards the goal round-trips.
//
// Conform leaves the item applied (at its goal). It imports no testing
// package, so it can run in any test framework or in a self-check command.
func Conform[S any](ctx context.Context, item converge.Item[S], opts ConformOptions) error {
	c := &conformer[S]{item: item, opts: opts}
	c.run(ctx)
	return c.errs.ErrorOrNil()
}

type conformer[S any] struct {
	item converge.Item[S]
	opts ConformOptions
	errs *multierror.Error
}

func (c *conformer[S]) fail(step string, err error) {
	c.errs = multierror.Append(c.errs, &ConformanceError{ID: c.item.ID(), Step: step, Err: err})
}

func (c *conformer[S]) run(ctx context.Context) {
	goal, err := c.item.StateGoal(ctx, c.opts.Deps)
	if err != nil {
		c.fail("StateGoal", err)
		return
	}
	if !c.dryChangesNothing(ctx, goal) {
		return
	}
	if !c.converge(ctx, "apply", goal) {
		return
	}
	// Idempotence: Apply once more on a converged item.
	cur, err := c.current(ctx)
	if err != nil {
		c.fail("StateCurrent after apply", err)
		return
	}
	if _, err := c.item.Apply(ctx, cur, goal); err != nil {
		c.fail("Apply on a converged item", err)
		return
	}
	if !c.settled(ctx, "Apply on a converged item", goal) {
		return
	}
	if r, ok := c.item.(converge.Refresher[S]); ok && !c.refresh(ctx, r, goal) {
		return
	}
	cleaner, ok := c.item.(converge.Cleaner[S])
	if !ok {
		return
	}
	clean, err := cleaner.StateClean(ctx, c.opts.Deps)
	if err != nil {
		c.fail("StateClean", err)
		return
	}
	if !c.converge(ctx, "clean", clean) {
		return
	}
	c.converge(ctx, "apply after clean", goal)
}

func (c *conformer[S]) current(ctx context.Context) (S, error) {
	s, err := c.item.StateCurrent(ctx, c.opts.Deps)
	if errors.Is(err, converge.ErrStateUnknown) {
		var zero S
		return zero, nil
	}
	return s, err
}

func (c *conformer[S]) snapshot(ctx context.Context) (any, error) {
	if c.opts.Snapshot == nil {
		return nil, nil
	}
	return c.opts.Snapshot(ctx)
}

// dryChangesNothing runs ApplyDry towards goal and checks its promise and
// that the real system did not move.
func (c *conformer[S]) dryChangesNothing(ctx context.Context, goal S) bool {
	before, err := c.current(ctx)
	if err != nil {
		c.fail("StateCurrent", err)
		return false
	}
	snapBefore, err := c.snapshot(ctx)
	if err != nil {
		c.fail("Snapshot", err)
		return false
	}
	sim, err := c.item.ApplyDry(ctx, before, goal)
	if err != nil {
		c.fail("ApplyDry", err)
		return false
	}
	ok := true
	if d, err := c.item.Check(ctx, sim, goal); err != nil {
		c.fail("Check after ApplyDry", err)
		ok = false
	} else if d.Required() {
		c.fail("ApplyDry", errors.New("the simulated state is not converged: a dry run promises what Apply will not do"))
		ok = false
	}
	snapAfter, err := c.snapshot(ctx)
	if err != nil {
		c.fail("Snapshot", err)
		return false
	}
	if !reflect.DeepEqual(snapBefore, snapAfter) {
		c.fail("ApplyDry", errors.New("the real system changed during a dry run"))
		ok = false
	}
	after, err := c.current(ctx)
	if err != nil {
		c.fail("StateCurrent after ApplyDry", err)
		return false
	}
	if d, err := c.item.Check(ctx, after, before); err != nil {
		c.fail("Check after ApplyDry", err)
		ok = false
	} else if d.Required() {
		c.fail("ApplyDry", errors.New("StateCurrent changed during a dry run"))
		ok = false
	}
	return ok
}

// converge applies towards target when Check asks for it and verifies.
func (c *conformer[S]) converge(ctx context.Context, step string, target S) bool {
	cur, err := c.current(ctx)
	if err != nil {
		c.fail(step+": StateCurrent", err)
		return false
	}
	d, err := c.item.Check(ctx, cur, target)
	if err != nil {
		c.fail(step+": Check", err)
		return false
	}
	if d.Required() {
		if _, err := c.item.Apply(ctx, cur, target); err != nil {
			c.fail(step+": Apply", err)
			return false
		}
	}
	return c.settled(ctx, step, target)
}

// settled verifies that the item is at target and that a second look says
// nothing is left to do.
func (c *conformer[S]) settled(ctx context.Context, step string, target S) bool {
	for i := range 2 {
		cur, err := c.current(ctx)
		if err != nil {
			c.fail(step+": StateCurrent (verify)", err)
			return false
		}
		d, err := c.item.Check(ctx, cur, target)
		if err != nil {
			c.fail(step+": Check (verify)", err)
			return false
		}
		if d.Required() {
			c.fail(step, fmt.Errorf("check %d after Apply still requires work: %w", i+1, converge.ErrNotConverged))
			return false
		}
	}
	return true
}
