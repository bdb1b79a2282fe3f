package converge

import (
	"context"
	"strconv"
)

// Tracer starts the spans of converge's work: a TargetReconciler's passes
// and their stages, walks and their items, a controller's handler runs, a
// plan's steps and signals, and, through the context an item gets, the
// calls an adapter makes for the item (the docker module's engine calls).
// The otel module implements it over an OpenTelemetry TracerProvider
// (otel.New); a program sets it in WalkerConfig.Tracer (and so in
// TargetReconcilerConfig.Walk), controller.Config.Tracer or
// plan.RunnerConfig.Tracer. nil, everywhere, means no spans and no cost.
//
// Spans are started and ended on the goroutine that does the work, in
// step with it, so a span started with the context a span's Start
// returned is its child. (The Observer's events, delivered later from a
// mailbox, cannot give that parentage.) Attributes are bounded: names of
// targets, stages, items and kinds, outcomes, phases, counts; never a
// state, a target or a secret.
//
// Implementations must be safe for concurrent use.
type Tracer interface {
	// Start begins a span called name, a child of the span that ctx
	// carries if any, with attrs, and returns a context that carries the
	// new span and the Tracer (so StartSpan, called with it, starts its
	// children), and the span. The caller ends the span. Start must
	// neither change attrs nor keep the slice after it returns (copy the
	// attributes): the walk passes the same slices for every span.
	Start(ctx context.Context, name string, attrs ...SpanAttr) (context.Context, Span)
}

// Span is one span a Tracer started.
type Span interface {
	// Recording reports whether the span is recorded (sampled). A walk
	// whose span is not recorded starts no span per item: under a sampler
	// that follows the parent's decision, OpenTelemetry's default, they
	// would not be recorded either.
	Recording() bool
	// SetAttrs adds or replaces attributes. Like Start, it must neither
	// change attrs nor keep the slice.
	SetAttrs(attrs ...SpanAttr)
	// Event records that something happened at this moment of the span.
	Event(name string, attrs ...SpanAttr)
	// End ends the span. A nil err leaves its status unset (success); an
	// error marks it failed, with the error's text as the status's
	// description (converge's errors carry no secret). Calls after the
	// first do nothing.
	End(err error)
}

// TracePropagator is the optional ability of a Tracer to carry a span's
// context out of the process and back in, as a W3C trace context
// (https://www.w3.org/TR/trace-context/). The fleet module uses it on the
// link's requests and in the targets it hands out, so a device's pass is
// a child of the server's span that set its target; the plan package
// passes it to a signal through its context.
type TracePropagator interface {
	// TraceParent returns the traceparent header value of the span ctx
	// carries, "" when it carries none.
	TraceParent(ctx context.Context) string
	// WithTraceParent returns ctx carrying the remote span that the
	// traceparent value tp names, as the parent of the spans started with
	// it; ctx itself when tp is empty or not a valid traceparent.
	WithTraceParent(ctx context.Context, tp string) context.Context
}

// SpanAttr is one attribute of a span: a key and a string, integer or
// boolean value. Make one with StringAttr, IntAttr or BoolAttr.
type SpanAttr struct {
	Key  string
	kind spanAttrKind
	str  string
	num  int64
}

type spanAttrKind uint8

const (
	spanAttrString spanAttrKind = iota
	spanAttrInt
	spanAttrBool
)

// StringAttr returns an attribute with a string value.
func StringAttr(key, value string) SpanAttr { return SpanAttr{Key: key, str: value} }

// IntAttr returns an attribute with an integer value.
func IntAttr(key string, value int64) SpanAttr {
	return SpanAttr{Key: key, kind: spanAttrInt, num: value}
}

// BoolAttr returns an attribute with a boolean value.
func BoolAttr(key string, value bool) SpanAttr {
	a := SpanAttr{Key: key, kind: spanAttrBool}
	if value {
		a.num = 1
	}
	return a
}

// Value returns the attribute's value: a string, an int64 or a bool.
func (a SpanAttr) Value() any {
	switch a.kind {
	case spanAttrInt:
		return a.num
	case spanAttrBool:
		return a.num != 0
	}
	return a.str
}

// String renders the attribute as key=value, for tests and logs.
func (a SpanAttr) String() string {
	switch a.kind {
	case spanAttrInt:
		return a.Key + "=" + strconv.FormatInt(a.num, 10)
	case spanAttrBool:
		return a.Key + "=" + strconv.FormatBool(a.num != 0)
	}
	return a.Key + "=" + a.str
}

// The attribute keys of converge's spans.
const (
	AttrTarget       = "converge.target"       // a TargetReconciler's Name
	AttrRevision     = "converge.revision"     // the revision of the target a pass converges to
	AttrPass         = "converge.pass"         // the pass's number in its reconciler
	AttrIntermediate = "converge.intermediate" // the pass is of an intermediate target
	AttrForced       = "converge.forced"       // the pass is forced past update locks
	AttrStage        = "converge.stage"        // a stage's name
	AttrRound        = "converge.round"        // the walk's number in its stage
	AttrMode         = "converge.mode"         // apply or clean
	AttrDry          = "converge.dry"          // a dry run
	AttrItems        = "converge.items"        // the number of items of a walk
	AttrItem         = "converge.item"         // an item's ID
	AttrPresence     = "converge.presence"     // present or absent
	AttrOutcome      = "converge.outcome"      // what happened (an Outcome, or a pass's or handler's outcome)
	AttrPhase        = "converge.phase"        // the phase an item failed in
	AttrNotRun       = "converge.not_run"      // the items a walk did not start
	AttrWaiting      = "converge.waiting"      // the items a walk resolved as waiting
)

// The span names of the core.
const (
	SpanPass  = "converge.pass"
	SpanStage = "converge.stage"
	SpanWalk  = "converge.walk"
	SpanItem  = "converge.item"
)

type tracerKey struct{}

// WithTracer returns ctx carrying t, for StartSpan; a nil t returns ctx.
// A walk with a Tracer passes it to its items this way, so an adapter's
// calls for an item (an engine call, say) are spans of that item.
func WithTracer(ctx context.Context, t Tracer) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, tracerKey{}, t)
}

// TracerFrom returns the Tracer ctx carries, nil when none.
func TracerFrom(ctx context.Context) Tracer {
	t, _ := ctx.Value(tracerKey{}).(Tracer)
	return t
}

// StartSpan starts a span with the Tracer ctx carries (see WithTracer), a
// child of ctx's span. Without a Tracer it returns ctx and a Span that
// does nothing, at the cost of one context lookup. Adapters call it
// around the work they do for an item.
func StartSpan(ctx context.Context, name string, attrs ...SpanAttr) (context.Context, Span) {
	t := TracerFrom(ctx)
	if t == nil {
		return ctx, NopSpan{}
	}
	return t.Start(ctx, name, attrs...)
}

// TraceParent returns the W3C traceparent of the span ctx carries, through
// the Tracer in ctx when it is a TracePropagator; "" otherwise.
func TraceParent(ctx context.Context) string {
	if p, ok := TracerFrom(ctx).(TracePropagator); ok {
		return p.TraceParent(ctx)
	}
	return ""
}

// WithTraceParent returns ctx carrying the remote span that tp names, the
// parent of the spans started with it, through t when it is a
// TracePropagator (t nil means the Tracer ctx carries); ctx itself
// otherwise, or when tp is empty or invalid. The result carries t.
func WithTraceParent(ctx context.Context, t Tracer, tp string) context.Context {
	if t == nil {
		t = TracerFrom(ctx)
	} else if TracerFrom(ctx) != t {
		ctx = WithTracer(ctx, t)
	}
	if p, ok := t.(TracePropagator); ok && tp != "" {
		return p.WithTraceParent(ctx, tp)
	}
	return ctx
}

// NopSpan is a Span that records nothing: what StartSpan returns without
// a Tracer.
type NopSpan struct{}

// Recording returns false.
func (NopSpan) Recording() bool { return false }

// SetAttrs does nothing.
func (NopSpan) SetAttrs(...SpanAttr) {}

// Event does nothing.
func (NopSpan) Event(string, ...SpanAttr) {}

// End does nothing.
func (NopSpan) End(error) {}

// itemSpanAttrs returns the attributes of the span of item k with
// presence p (item, presence), built for every item of c at the first
// call for p: a traced walk starts a span per item without making them
// again.
func (c *compiled) itemSpanAttrs(k int, p Presence) []SpanAttr {
	c.spanOnce[p&1].Do(func() {
		attrs := make([]SpanAttr, 2*len(c.items))
		presence := StringAttr(AttrPresence, p.String())
		for j := range c.items {
			attrs[2*j], attrs[2*j+1] = StringAttr(AttrItem, string(c.items[j].id)), presence
		}
		c.spanAttrs[p&1] = attrs
	})
	return c.spanAttrs[p&1][2*k : 2*k+2 : 2*k+2]
}

// outcomeSpanAttrs are the attributes an item's span ends with, by
// outcome; failedSpanAttrs those of a failed item, by phase. Made once.
var (
	outcomeSpanAttrs = func() (a [len(outcomeNames)][]SpanAttr) {
		for o, name := range outcomeNames {
			a[o] = []SpanAttr{StringAttr(AttrOutcome, name)}
		}
		return a
	}()
	failedSpanAttrs = func() (a [len(phaseNames)][]SpanAttr) {
		for p, name := range phaseNames {
			a[p] = []SpanAttr{StringAttr(AttrOutcome, OutcomeFailed.String()), StringAttr(AttrPhase, name)}
		}
		return a
	}()
)

// startSpan starts a span with t, which may be nil.
func startSpan(ctx context.Context, t Tracer, name string, attrs ...SpanAttr) (context.Context, Span) {
	if t == nil {
		return ctx, NopSpan{}
	}
	return t.Start(ctx, name, attrs...)
}
