package otel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/convergekit/converge"
)

// ScopeName is the instrumentation scope of converge's spans: the name of
// the OpenTelemetry Tracer that New takes from its TracerProvider.
const ScopeName = "github.com/convergekit/converge"

// Tracer is a converge.Tracer and converge.TracePropagator over an
// OpenTelemetry TracerProvider. Make one with New; it is safe for
// concurrent use.
type Tracer struct {
	t    trace.Tracer
	prop propagation.TraceContext
}

var (
	_ converge.Tracer          = (*Tracer)(nil)
	_ converge.TracePropagator = (*Tracer)(nil)
)

// New returns a Tracer that starts its spans with the Tracer that tp
// gives for ScopeName. A nil tp is refused with a panic: a program that
// wants no spans sets no converge.Tracer at all, which costs nothing.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		panic("converge/otel: New with a nil TracerProvider")
	}
	return &Tracer{t: tp.Tracer(ScopeName)}
}

// Start begins an OpenTelemetry span called name with attrs, a child of
// the span ctx carries (a local span, or a remote one from
// WithTraceParent), and returns a context that carries it and t.
func (t *Tracer) Start(ctx context.Context, name string, attrs ...converge.SpanAttr) (context.Context, converge.Span) {
	var s trace.Span
	if len(attrs) == 0 {
		ctx, s = t.t.Start(ctx, name)
	} else {
		buf := getBuf(attrs)
		buf.opts[0] = trace.WithAttributes(buf.kv...)
		ctx, s = t.t.Start(ctx, name, buf.opts[:]...)
		putBuf(buf)
	}
	if converge.TracerFrom(ctx) != converge.Tracer(t) {
		ctx = converge.WithTracer(ctx, t)
	}
	return ctx, span{s}
}

// TraceParent returns the W3C traceparent header value of the span ctx
// carries, "" when it carries no valid span.
func (t *Tracer) TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	t.prop.Inject(ctx, c)
	return c[traceparent]
}

// WithTraceParent returns ctx carrying the remote span the traceparent
// value tp names; ctx itself when tp is not a valid traceparent.
func (t *Tracer) WithTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	out := t.prop.Extract(ctx, propagation.MapCarrier{traceparent: tp})
	if !trace.SpanContextFromContext(out).IsRemote() {
		return ctx
	}
	return out
}

const traceparent = "traceparent"

// span is a converge.Span over an OpenTelemetry span.
type span struct{ s trace.Span }

func (s span) Recording() bool { return s.s.IsRecording() }

func (s span) SetAttrs(attrs ...converge.SpanAttr) {
	if len(attrs) > 0 && s.s.IsRecording() {
		buf := getBuf(attrs)
		s.s.SetAttributes(buf.kv...)
		putBuf(buf)
	}
}

func (s span) Event(name string, attrs ...converge.SpanAttr) {
	if !s.s.IsRecording() {
		return
	}
	if len(attrs) == 0 {
		s.s.AddEvent(name)
		return
	}
	s.s.AddEvent(name, trace.WithAttributes(convert(nil, attrs)...)) // kept by the span: not a pooled buffer
}

func (s span) End(err error) {
	if err != nil && s.s.IsRecording() {
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// convert turns converge's attributes into OpenTelemetry's, appended to
// kv.
func convert(kv []attribute.KeyValue, attrs []converge.SpanAttr) []attribute.KeyValue {
	for _, a := range attrs {
		switch v := a.Value().(type) {
		case int64:
			kv = append(kv, attribute.Int64(a.Key, v))
		case bool:
			kv = append(kv, attribute.Bool(a.Key, v))
		case string:
			kv = append(kv, attribute.String(a.Key, v))
		}
	}
	return kv
}

// attrBuf holds the attributes of one call, converted, and the options of
// a span's start. The SDK copies the attributes it is given (into the
// span, whose sampler has seen them by then), so a buffer serves one call
// after another: a traced walk converts attributes for every item without
// allocating.
type attrBuf struct {
	kv   []attribute.KeyValue
	opts [1]trace.SpanStartOption
}

var attrBufs = sync.Pool{New: func() any { return &attrBuf{kv: make([]attribute.KeyValue, 0, 8)} }}

// getBuf returns a buffer holding attrs converted.
func getBuf(attrs []converge.SpanAttr) *attrBuf {
	b := attrBufs.Get().(*attrBuf)
	b.kv = convert(b.kv[:0], attrs)
	return b
}

// putBuf gives b back, cleared so that it keeps no string alive.
func putBuf(b *attrBuf) {
	clear(b.kv)
	b.kv, b.opts[0] = b.kv[:0], nil
	if cap(b.kv) <= 64 {
		attrBufs.Put(b)
	}
}
