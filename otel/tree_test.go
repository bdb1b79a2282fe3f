package otel_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/otel"
)

// recorder is a TracerProvider whose spans end up, synchronously, in an
// in-memory exporter, and the converge.Tracer over it.
type recorder struct {
	exp *tracetest.InMemoryExporter
	tp  *sdktrace.TracerProvider
	tr  *otel.Tracer
}

func newRecorder(t *testing.T, opts ...sdktrace.TracerProviderOption) *recorder {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSyncer(exp)}, opts...)...)
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return &recorder{exp: exp, tp: tp, tr: otel.New(tp)}
}

// shownAttrs are the attributes a tree line shows, in this order.
var shownAttrs = []string{
	converge.AttrStage, converge.AttrItem, converge.AttrOutcome, converge.AttrPhase,
	converge.AttrNotRun, converge.AttrWaiting, "controller.kind", "controller.state",
	"controller.attempt", "docker.operation", "fleet.rollout", "plan.state", "fleet.device", "fleet.wave",
}

// line renders one span: its name, the shown attributes it has, its
// events and "ERROR" when its status is Error.
func line(s tracetest.SpanStub) string {
	var b strings.Builder
	b.WriteString(s.Name)
	for _, k := range shownAttrs {
		for _, kv := range s.Attributes {
			if string(kv.Key) == k {
				fmt.Fprintf(&b, " %s=%s", strings.TrimPrefix(k, "converge."), kv.Value.Emit())
			}
		}
	}
	for _, e := range s.Events {
		b.WriteString(" +" + e.Name)
	}
	if s.Status.Code == codes.Error {
		b.WriteString(" ERROR")
	}
	return b.String()
}

// tree renders the spans as an indented tree: every root (a span whose
// parent is not among them), then its children, siblings in the order
// they started, but items in the order of their lines (so the walk's
// concurrency does not show).
func tree(spans tracetest.SpanStubs) string {
	byParent := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if p := s.Parent.SpanID(); s.Parent.IsValid() && ids[p] {
			byParent[p] = append(byParent[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(ss []tracetest.SpanStub, depth int)
	walk = func(ss []tracetest.SpanStub, depth int) {
		slices.SortStableFunc(ss, func(x, y tracetest.SpanStub) int {
			if x.Name != converge.SpanItem || y.Name != converge.SpanItem {
				if c := x.StartTime.Compare(y.StartTime); c != 0 {
					return c
				}
			}
			return strings.Compare(line(x), line(y))
		})
		for _, s := range ss {
			b.WriteString(strings.Repeat("  ", depth) + line(s) + "\n")
			walk(byParent[s.SpanContext.SpanID()], depth+1)
		}
	}
	walk(roots, 0)
	return b.String()
}

// attr returns the value of attribute key of s, "" when s has none.
func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == attribute.Key(key) {
			return kv.Value.Emit()
		}
	}
	return ""
}
