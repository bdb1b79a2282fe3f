package otel_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// flasher is a handler that calls an adapter (a span of its own) and then
// blocks until its context ends, or, for "ok", moves it on.
type flasher struct{}

func (flasher) Handle(ctx context.Context, o controller.Object) (controller.Result, error) {
	_, sp := converge.StartSpan(ctx, "flash.write")
	sp.End(nil)
	switch {
	case o.State == "flashed":
		return controller.NoChange(), nil
	case o.Key == "ok":
		return controller.Transition("flashed"), nil
	}
	<-ctx.Done()
	return controller.Result{}, ctx.Err()
}

func TestHandlerTreeCancelled(t *testing.T) {
	for _, owner := range []string{"", "replica-1"} {
		t.Run("owner "+owner, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder(t)
				ctx := context.Background()
				c, err := controller.New(controller.Config{Kind: "vm", Store: converge.NewMemStore(), Owner: owner,
					Handler: flasher{}, Resync: time.Hour, LeaseTTL: time.Hour, Tracer: rec.tr})
				require.NoError(t, err)
				require.NoError(t, c.AddMany(ctx, []controller.NewObject{{Key: "a", State: "flashing"}, {Key: "ok", State: "flashing"}}))
				runCtx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- c.Run(runCtx) }()
				synctest.Wait()
				require.NoError(t, c.Cancel(ctx, "a", "alice"))
				synctest.Wait()
				stop()
				require.NoError(t, <-done)

				spans := rec.exp.GetSpans()
				assert.Equal(t, `controller.handle outcome=cancelled controller.kind=vm controller.state=flashing controller.attempt=1
  flash.write
controller.handle outcome=no-change controller.kind=vm controller.state=flashed controller.attempt=1
  flash.write
controller.handle outcome=transition controller.kind=vm controller.state=flashing controller.attempt=1
  flash.write
`, tree(spans))
				for _, s := range spans {
					if s.Name == controller.SpanHandle {
						assert.Equal(t, owner, attr(s, controller.AttrReplica))
					}
				}
			})
		})
	}
}
