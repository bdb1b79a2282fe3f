package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/otel"
)

// discard is an OpenTelemetry exporter that drops what it is given: the
// cost measured is converge's and the SDK's, not a backend's.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// benchTracedWalk is BenchmarkWalkNoop10k with the otel module's Tracer
// over an SDK TracerProvider with sampler s, whose spans go through a
// batch span processor (blocking when its queue is full, so no span is
// dropped) to an exporter that discards them.
func benchTracedWalk(b *testing.B, s sdktrace.Sampler) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(s),
		sdktrace.WithBatcher(discard{}, sdktrace.WithBlocking()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	benchNoopWalkWith(b, converge.WalkerConfig{Parallelism: noopPar, Tracer: otel.New(tp)})
}

// BenchmarkWalkNoop10kTracedUnsampled is BenchmarkWalkNoop10k with tracing
// on but the walk not sampled (a parent-based sampler that samples no
// root): compare its ns/item with BenchmarkWalkNoop10k's in the same run
// (goal: at most 50 ns more per item).
func BenchmarkWalkNoop10kTracedUnsampled(b *testing.B) {
	benchTracedWalk(b, sdktrace.ParentBased(sdktrace.NeverSample()))
}

// BenchmarkWalkNoop10kTraced is BenchmarkWalkNoop10k with every walk
// sampled: a span per walk and per item, exported (goal: at most 1.5 µs
// per item).
func BenchmarkWalkNoop10kTraced(b *testing.B) {
	benchTracedWalk(b, sdktrace.AlwaysSample())
}

// BenchmarkWalkNoop10kBareSDK is the floor of BenchmarkWalkNoop10kTraced:
// the same spans made directly with the OpenTelemetry SDK, through the same
// TracerProvider, sampler, batch span processor and exporter, with no
// converge: per op a root span and, under it, one span per item for
// 10,000 items (their attributes item and presence at the start, outcome
// at the end, all made in advance), by as many goroutines as the walk has
// workers. What
// BenchmarkWalkNoop10kTraced costs above BenchmarkWalkNoop10k and this is
// converge's share of the tracing; this is the SDK's.
func BenchmarkWalkNoop10kBareSDK(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(discard{}, sdktrace.WithBlocking()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer(otel.ScopeName)
	// The options and attributes are made before the measured loop: what
	// is measured is what the SDK itself spends on the spans.
	present := attribute.String(converge.AttrPresence, converge.Present.String())
	unchanged := []attribute.KeyValue{attribute.String(converge.AttrOutcome, converge.OutcomeUnchanged.String())}
	opts := make([][]trace.SpanStartOption, noopItems)
	for k := range opts {
		opts[k] = []trace.SpanStartOption{trace.WithAttributes(attribute.String(converge.AttrItem, string(nodeID(k))), present)}
	}
	op := func() {
		ctx, root := tr.Start(context.Background(), converge.SpanWalk)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range noopPar {
			wg.Go(func() {
				for k := int(next.Add(1)) - 1; k < noopItems; k = int(next.Add(1)) - 1 {
					_, s := tr.Start(ctx, converge.SpanItem, opts[k]...)
					s.SetAttributes(unchanged...)
					s.End()
				}
			})
		}
		wg.Wait()
		root.End()
	}
	op()
	b.ReportAllocs()
	b.ResetTimer()
	before := mallocs()
	for b.Loop() {
		op()
	}
	reportPerItem(b, noopItems, before)
}
