package otel_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/fleet"
	"github.com/convergekit/converge/plan"
)

// TestJoinedTreeServerToDevice follows one target from a server's span
// to an engine call on a device, over the fleet link: the server sets the
// target under a rollout's, a wave's and a device's spans (started here
// as a rollout would start them), SetTarget stores the W3C traceparent
// with the target, the agent receives it over HTTP, and the device's
// reconciler (TraceParent: fleet.TargetTraceParent) makes its pass a
// child of it; the item's engine call is the item's child. One trace.
func TestJoinedTreeServerToDevice(t *testing.T) {
	rec := newRecorder(t)
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	srv, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Logger: logger, Rate: -1})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	defer func() { hs.Close(); _ = srv.Close() }()
	tok, err := srv.Enrol(ctx, "dev-1", nil)
	require.NoError(t, err)

	// The server: rollout, wave, device; the target is set under the
	// device's span.
	rctx, rollout := rec.tr.Start(ctx, "fleet.rollout")
	wctx, wave := rec.tr.Start(rctx, "fleet.wave", converge.StringAttr("fleet.wave", "canary"))
	dctx, dev := rec.tr.Start(wctx, "fleet.device", converge.StringAttr("fleet.device", "dev-1"))
	rev, err := srv.SetTarget(dctx, "dev-1", fleet.Target{Desired: converge.Desired{Items: []converge.DesiredItem{{ID: "web", Presence: converge.Present}}}})
	require.NoError(t, err)
	dev.End(nil)
	wave.End(nil)
	rollout.End(nil)

	// The device: an agent feeding a reconciler whose one item makes an
	// engine call.
	build := func(_ context.Context, target fleet.Target) ([]converge.TargetStage, error) {
		g := converge.NewGraph()
		g.Add(converge.Wrap[string](&engineCall{convergetest.Item{Key: "web", Goal: "up"}}), converge.Present)
		return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
	}
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[fleet.Target]{Name: "fleet", Build: build,
		Walk: converge.WalkerConfig{Tracer: rec.tr, Logger: logger}, TraceParent: fleet.TargetTraceParent})
	require.NoError(t, err)
	ag, err := fleet.NewAgent(fleet.AgentConfig{Server: hs.URL, Device: "dev-1", Token: tok, Reconciler: r,
		Wait: time.Second, Logger: logger})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(runCtx) })
	wg.Go(func() { _ = ag.Run(runCtx) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := srv.DeviceStatus(ctx, "dev-1")
		require.NoError(c, err)
		assert.Equal(c, rev, st.Reported)
	}, 20*time.Second, 10*time.Millisecond, "the device reported its pass")
	stop()
	wg.Wait()

	spans := rec.exp.GetSpans()
	assert.Equal(t, `fleet.rollout
  fleet.wave fleet.wave=canary
    fleet.device fleet.device=dev-1
      converge.pass outcome=finished
        converge.stage stage=apps
          converge.walk
            converge.item item=web outcome=changed +apply +verify
              docker.ContainerCreate docker.operation=ContainerCreate
          converge.walk
            converge.item item=web outcome=unchanged
`, tree(spans))
	for _, s := range spans {
		assert.Equal(t, spans[0].SpanContext.TraceID(), s.SpanContext.TraceID(), "%s is in the one trace", s.Name)
	}
}

// TestJoinedTreeRolloutToEngineCall runs a real rollout (a canary wave of
// one device) on a traced server, and the device's agent and reconciler
// traced into the same exporter: the tree runs rollout, wave (the plan's
// step that moves the device), device (the move that sets its target),
// then on the device the pass, stage, walk, item and engine call. One
// trace.
func TestJoinedTreeRolloutToEngineCall(t *testing.T) {
	rec := newRecorder(t)
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	srv, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Logger: logger, Rate: -1,
		Tracer: rec.tr, RolloutPoll: 20 * time.Millisecond})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	defer func() { hs.Close(); _ = srv.Close() }()
	tok, err := srv.Enrol(ctx, "pi-1", map[string]string{"site": "lyon"})
	require.NoError(t, err)
	_, err = srv.CreateRollout(ctx, fleet.RolloutSpec{ID: "app-2", Selector: "site=lyon",
		Items: []converge.DesiredItem{{ID: "web", Presence: converge.Present}}, Payload: json.RawMessage(`{"version":"2"}`),
		Waves: []fleet.Wave{{Name: "canary", Count: 1}}})
	require.NoError(t, err)

	build := func(_ context.Context, target fleet.Target) ([]converge.TargetStage, error) {
		g := converge.NewGraph()
		g.Add(converge.Wrap[string](&engineCall{convergetest.Item{Key: "web", Goal: "up"}}), converge.Present)
		return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
	}
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[fleet.Target]{Name: "fleet", Build: build,
		Walk: converge.WalkerConfig{Tracer: rec.tr, Logger: logger}, TraceParent: fleet.TargetTraceParent})
	require.NoError(t, err)
	ag, err := fleet.NewAgent(fleet.AgentConfig{Server: hs.URL, Device: "pi-1", Token: tok, Reconciler: r,
		Wait: time.Second, Logger: logger})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.RunRollouts(runCtx) })
	wg.Go(func() { _ = r.Run(runCtx) })
	wg.Go(func() { _ = ag.Run(runCtx) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := srv.Rollout(ctx, "app-2")
		require.NoError(c, err)
		assert.Equal(c, fleet.RolloutCompleted, st.State)
	}, 20*time.Second, 10*time.Millisecond, "the rollout completed")
	stop()
	wg.Wait()

	spans := rec.exp.GetSpans()
	var move tracetest.SpanStub
	for _, s := range spans {
		if s.Name == fleet.SpanMove {
			move = s
		}
	}
	require.Equal(t, fleet.SpanMove, move.Name, "the device was moved under a span")
	// The chain from the engine call up to the rollout.
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	var call tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "docker.ContainerCreate" {
			call = s
		}
	}
	require.Equal(t, "docker.ContainerCreate", call.Name)
	var chain []string
	for s, ok := call, true; ok; s, ok = byID[s.Parent.SpanID()] {
		chain = append([]string{s.Name + " " + attr(s, fleet.AttrRollout) + attr(s, plan.AttrKind) + attr(s, fleet.AttrDevice) + attr(s, converge.AttrItem)}, chain...)
		assert.Equal(t, call.SpanContext.TraceID(), s.SpanContext.TraceID(), "one trace")
	}
	t.Logf("joined tree:\n%s", tree(spans))
	assert.Equal(t, []string{
		"fleet.rollout app-2",
		"plan.step " + fleet.WaveKind,
		"fleet.move pi-1",
		"converge.pass ",
		"converge.stage ",
		"converge.walk ",
		"converge.item web",
		"docker.ContainerCreate ",
	}, chain)

	// The device's report for the rollout's target is a server span in
	// the same trace, a child of the move that set the target.
	moves := map[trace.SpanID]bool{}
	for _, s := range spans {
		if s.Name == fleet.SpanMove {
			moves[s.SpanContext.SpanID()] = true
		}
	}
	var reports []string
	for _, s := range spans {
		if s.Name == fleet.SpanReport && moves[s.Parent.SpanID()] {
			assert.Equal(t, move.SpanContext.TraceID(), s.SpanContext.TraceID(), "one trace")
			reports = append(reports, attr(s, fleet.AttrDevice)+" "+attr(s, converge.AttrOutcome)+" "+attr(s, converge.AttrRevision))
		}
	}
	require.NotEmpty(t, reports, "the report of the rollout's target joined its trace")
	assert.Equal(t, "pi-1 accepted 1", reports[0])

	// A report refused is a failed span, with its outcome.
	rec.exp.Reset()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, hs.URL+"/v1/devices/pi-1/report", strings.NewReader("{"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("traceparent", strings.Repeat("0", fleet.MaxTraceParent+1)) // too long: ignored
	res, err := hs.Client().Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusBadRequest, res.StatusCode)
	spans = rec.exp.GetSpans()
	require.Len(t, spans, 1)
	assert.Equal(t, fleet.SpanReport+" "+"pi-1 invalid", spans[0].Name+" "+attr(spans[0], fleet.AttrDevice)+" "+attr(spans[0], converge.AttrOutcome))
	assert.Equal(t, codes.Error, spans[0].Status.Code)
	assert.False(t, spans[0].Parent.IsValid(), "a root span: the traceparent was too long to read")
}
