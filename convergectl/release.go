package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// releaseObject releases the halted object key of kind in st.
func releaseObject(ctx context.Context, st converge.Store, kind, key, by string) error {
	cfg := controller.Config{
		Kind:  kind,
		Store: st,
		Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
			return controller.NoChange(), errors.New("convergectl runs no handler")
		}),
	}
	if _, ok := st.(converge.Queue); ok {
		// Release makes the object due at once, which wakes the replicas
		// sharing the store.
		cfg.Owner = "convergectl:" + by
	}
	c, err := controller.New(cfg)
	if err != nil {
		return fmt.Errorf("convergectl: release %s %q: %w", kind, key, err)
	}
	return c.Release(ctx, key)
}

// historyBy names who made the transition h.
func historyBy(h converge.HistoryEntry) string { return h.By }

// abortPlan asks the plan id to stop, for reason.
func abortPlan(ctx context.Context, r *converge.PlanRunner, id, reason, by string) error {
	return r.Abort(ctx, id, reason+" (by "+by+")")
}

// retryPlan makes the plan id runnable again.
func retryPlan(ctx context.Context, r *converge.PlanRunner, id, _ string) error {
	return r.Retry(ctx, id)
}
