package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// otelpgxScope is the instrumentation scope of otelpgx's spans.
const otelpgxScope = "github.com/exaring/otelpgx"

// TestStoreCallsUnderTheHandlerSpan: with pgstore's Tracer set to
// otelpgx's, the statements a handler's store call makes are spans under
// that handler's run (controller.handle), in its trace: a controller on
// PostgreSQL, traced from the handler down to the database.
func TestStoreCallsUnderTheHandlerSpan(t *testing.T) {
	dsn := pgtest.DSN(t)
	rec := newRecorder(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := pgstore.Open(ctx, dsn, pgstore.Options{Tracer: otelpgx.NewTracer(otelpgx.WithTracerProvider(rec.tp))})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	_, err = st.Put(ctx, converge.StoreRecord{Key: "racks/r1", Value: []byte(`{"powered":true}`)})
	require.NoError(t, err)

	read := make(chan error, 1)
	c, err := controller.New(controller.Config{Kind: "machine", Store: st, Tracer: rec.tr, Resync: time.Hour,
		Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
			_, err := st.Get(ctx, "racks/r1") // the machine reads its rack
			read <- err
			return controller.Transition("ready"), nil
		})})
	require.NoError(t, err)
	require.NoError(t, c.Add(ctx, "m1", "new", nil))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	require.NoError(t, <-read)
	stop()
	require.NoError(t, <-done)

	spans := rec.exp.GetSpans()
	var handle *tracetest.SpanStub
	for i, s := range spans {
		if s.Name == controller.SpanHandle && attr(s, "controller.state") == "new" {
			handle = &spans[i]
		}
	}
	require.NotNil(t, handle, "the handler's run is a span")
	var under []string
	for _, s := range spans {
		if s.InstrumentationScope.Name == otelpgxScope && s.Parent.SpanID() == handle.SpanContext.SpanID() {
			assert.Equal(t, handle.SpanContext.TraceID(), s.SpanContext.TraceID())
			under = append(under, s.Name)
		}
	}
	assert.NotEmpty(t, under, "the rack's read is traced under the handler's span")
	var pg int
	for _, s := range spans {
		if s.InstrumentationScope.Name == otelpgxScope {
			pg++
		}
	}
	t.Logf("%d spans, %d of them otelpgx's, %d under the handler's run: %v", len(spans), pg, len(under), under)
}
