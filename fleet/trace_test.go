package fleet_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/fleet"
)

// parentTracer is a converge.Tracer and converge.TracePropagator whose
// spans are named by the traceparent they carry.
type parentTracer struct{}

type parentKey struct{}

func (p parentTracer) Start(ctx context.Context, name string, _ ...converge.SpanAttr) (context.Context, converge.Span) {
	return converge.WithTracer(context.WithValue(ctx, parentKey{}, "00-"+name), p), converge.NopSpan{}
}

func (parentTracer) TraceParent(ctx context.Context) string {
	tp, _ := ctx.Value(parentKey{}).(string)
	return tp
}

func (parentTracer) WithTraceParent(ctx context.Context, tp string) context.Context {
	return context.WithValue(ctx, parentKey{}, tp)
}

func TestTargetCarriesTheTraceParentOfItsSetter(t *testing.T) {
	ctx := context.Background()
	srv, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Rate: -1})
	require.NoError(t, err)
	defer srv.Close()
	tok, err := srv.Enrol(ctx, "d1", nil)
	require.NoError(t, err)
	items := []converge.DesiredItem{{ID: "app", Presence: converge.Present}}

	read := func() fleet.Target {
		t.Helper()
		res := get(srv, "/v1/devices/d1/target", tok, "")
		require.Equal(t, 200, res.Code)
		tgt, err := fleet.DecodeTarget(res.Body.Bytes(), converge.DecodeLimits{})
		require.NoError(t, err)
		return tgt
	}
	_, err = srv.SetTarget(ctx, "d1", fleet.Target{Desired: converge.Desired{Items: items}, TraceParent: "ignored"})
	require.NoError(t, err)
	assert.Empty(t, read().TraceParent, "no span, no trace context; the caller's field is ignored")

	sctx, _ := parentTracer{}.Start(ctx, "rollout")
	_, err = srv.SetTarget(sctx, "d1", fleet.Target{Desired: converge.Desired{Items: items}})
	require.NoError(t, err)
	got := read()
	assert.Equal(t, "00-rollout", got.TraceParent)
	assert.Equal(t, "00-rollout", fleet.TargetTraceParent(got))
}

func TestDecodeTargetCapsTheTraceParent(t *testing.T) {
	doc := `{"format":1,"desired":{"revision":1,"items":[{"id":"a","presence":"present"}]},"set":"2026-12-04T00:00:00Z","traceparent":"` +
		strings.Repeat("0", fleet.MaxTraceParent+1) + `"}`
	_, err := fleet.DecodeTarget([]byte(doc), converge.DecodeLimits{})
	var re *fleet.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "target.traceparent", re.Field)
}
