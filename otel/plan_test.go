package otel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// TestPlanSignalCarriesTheStepsTrace: a traced runner's signal carries the
// traceparent of the plan step that sent it, and the node's work, started
// from it, is a child of that step in the same trace.
func TestPlanSignalCarriesTheStepsTrace(t *testing.T) {
	rec := newRecorder(t)
	bus := autopilot.NewBus(autopilot.Host{Name: "worker0", Kind: "worker", Platform: "linux-amd64"})
	var got []autopilot.Signal
	bus.OnSignal = func(node string, s autopilot.Signal) {
		got = append(got, s)
		ctx := converge.WithTraceParent(context.Background(), rec.tr, s.TraceParent)
		_, sp := converge.StartSpan(ctx, "node.update")
		sp.End(nil)
		assert.NoError(t, bus.Respond(node, plan.TargetCompleted, ""))
	}
	h := &autopilot.CommandHandler{Sender: bus}
	r, err := plan.NewRunner(nil, plan.RunnerConfig{Tracer: rec.tr, Handlers: map[string]plan.CommandHandler{"k0supdate": h}})
	require.NoError(t, err)
	doc, err := autopilot.Decode([]byte(`
apiVersion: autopilot.k0sproject.io/v1beta2
kind: Plan
metadata: {name: autopilot}
spec:
  id: traced
  timestamp: now
  commands:
  - k0supdate:
      version: v1.30.4+k0s.0
      platforms: {linux-amd64: {url: "https://example.invalid/k0s"}}
      targets:
        workers: {discovery: {static: {nodes: [worker0]}}}
`))
	require.NoError(t, err)
	for range 20 {
		step, err := r.Step(t.Context(), doc)
		require.NoError(t, err)
		if step.Done {
			break
		}
	}
	require.Len(t, got, 1, "worker0 got its signal once")
	require.NotEmpty(t, got[0].TraceParent)

	var node, sender *tracetest.SpanStub
	spans := rec.exp.GetSpans()
	for i, s := range spans {
		if s.Name == "node.update" {
			node = &spans[i]
		}
	}
	require.NotNil(t, node)
	for i, s := range spans {
		if s.SpanContext.SpanID() == node.Parent.SpanID() {
			sender = &spans[i]
		}
	}
	require.NotNil(t, sender, "the node's span has a parent among the runner's spans")
	assert.Equal(t, plan.SpanStep, sender.Name, "the step that sent the signal")
	assert.Equal(t, sender.SpanContext.TraceID(), node.SpanContext.TraceID(), "one trace")
	assert.True(t, node.Parent.IsRemote(), "the node's work joins the trace from the signal, as a remote parent")
}
