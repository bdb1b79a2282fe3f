package otel_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/otel"
)

// receiver is an OTLP/HTTP trace receiver: it decodes every request's
// protobuf body as an ExportTraceServiceRequest and keeps its spans.
type receiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	scope []string
	paths []string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not protobuf", http.StatusUnsupportedMediaType)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.paths = append(rc.paths, r.URL.Path)
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				rc.spans = append(rc.spans, s)
				rc.scope = append(rc.scope, ss.Scope.GetName())
			}
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func TestOTLPHTTPRoundTrip(t *testing.T) {
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))

	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "config", Goal: "1"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "service", Goal: "1"}).FailAt(converge.PhaseApply, -1, nil).Node(), converge.Present, "config")
	w, err := converge.NewWalker(converge.WalkerConfig{Tracer: otel.New(tp)})
	require.NoError(t, err)
	_, err = w.Apply(ctx, g)
	require.Error(t, err)
	require.NoError(t, tp.Shutdown(ctx)) // flushes the batch to the receiver

	rc.mu.Lock()
	defer rc.mu.Unlock()
	require.Len(t, rc.spans, 3)
	assert.Contains(t, rc.paths, "/v1/traces")
	byName := map[string][]*tracepb.Span{}
	for i, s := range rc.spans {
		byName[s.Name] = append(byName[s.Name], s)
		assert.Equal(t, otel.ScopeName, rc.scope[i])
	}
	require.Len(t, byName[converge.SpanWalk], 1)
	walk := byName[converge.SpanWalk][0]
	assert.Empty(t, walk.ParentSpanId, "the walk is the trace's root")
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, walk.Status.GetCode())
	items := map[string]*tracepb.Span{}
	for _, s := range byName[converge.SpanItem] {
		assert.Equal(t, hex.EncodeToString(walk.TraceId), hex.EncodeToString(s.TraceId))
		assert.Equal(t, hex.EncodeToString(walk.SpanId), hex.EncodeToString(s.ParentSpanId), "an item is a child of its walk")
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[kv.Key] = kv.Value.GetStringValue()
		}
		items[attrs[converge.AttrItem]] = s
		assert.LessOrEqual(t, walk.StartTimeUnixNano, s.StartTimeUnixNano)
		assert.GreaterOrEqual(t, walk.EndTimeUnixNano, s.EndTimeUnixNano)
	}
	require.Contains(t, items, "config")
	require.Contains(t, items, "service")
	assert.Equal(t, tracepb.Status_STATUS_CODE_UNSET, items["config"].Status.GetCode())
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, items["service"].Status.GetCode())
	assert.Contains(t, items["service"].Status.GetMessage(), "apply")
	var events []string
	for _, e := range items["service"].Events {
		events = append(events, e.Name)
	}
	assert.Equal(t, []string{"apply"}, events)
}
