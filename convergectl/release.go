package main

import (
	"context"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/plan"
)

// releaseObject releases the halted object key of kind in st, by by.
func releaseObject(ctx context.Context, st converge.Store, kind, key, by string) error {
	return controller.Release(ctx, st, kind, key, by)
}

// historyBy names who made the transition h.
func historyBy(h converge.HistoryEntry) string { return h.By }

// abortPlan asks the plan id to stop, for reason, by by.
func abortPlan(ctx context.Context, r *plan.Runner, id, reason, by string) error {
	return r.AbortBy(ctx, id, reason, by)
}

// retryPlan makes the plan id runnable again, by by.
func retryPlan(ctx context.Context, r *plan.Runner, id, by string) error {
	return r.RetryBy(ctx, id, by)
}
