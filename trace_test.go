package converge_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// fakeTracer records the spans it starts, in order, each with its parent
// (the span the start's context carried) and its attributes; it carries
// a traceparent as the name of its span.
type fakeTracer struct {
	mu    sync.Mutex
	spans []*fakeSpan
}

type fakeSpanKey struct{}

type fakeSpan struct {
	name, parent string
	attrs        []string
	events       []string
	err          error
	ended        int
}

func (f *fakeTracer) Start(ctx context.Context, name string, attrs ...converge.SpanAttr) (context.Context, converge.Span) {
	s := &fakeSpan{name: name}
	if p, ok := ctx.Value(fakeSpanKey{}).(*fakeSpan); ok {
		s.parent = p.name
	}
	for _, a := range attrs {
		s.attrs = append(s.attrs, a.String())
	}
	f.mu.Lock()
	f.spans = append(f.spans, s)
	f.mu.Unlock()
	return converge.WithTracer(context.WithValue(ctx, fakeSpanKey{}, s), f), &fakeSpanHandle{f, s}
}

func (f *fakeTracer) TraceParent(ctx context.Context) string {
	if p, ok := ctx.Value(fakeSpanKey{}).(*fakeSpan); ok {
		return "tp:" + p.name
	}
	return ""
}

func (f *fakeTracer) WithTraceParent(ctx context.Context, tp string) context.Context {
	return context.WithValue(ctx, fakeSpanKey{}, &fakeSpan{name: "remote " + tp})
}

type fakeSpanHandle struct {
	f *fakeTracer
	s *fakeSpan
}

func (h *fakeSpanHandle) Recording() bool { return true }
func (h *fakeSpanHandle) SetAttrs(attrs ...converge.SpanAttr) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	for _, a := range attrs {
		h.s.attrs = append(h.s.attrs, a.String())
	}
}
func (h *fakeSpanHandle) Event(name string, _ ...converge.SpanAttr) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	h.s.events = append(h.s.events, name)
}
func (h *fakeSpanHandle) End(err error) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	h.s.err = err
	h.s.ended++
}

func TestStartSpanWithoutTracerIsNop(t *testing.T) {
	ctx := context.Background()
	got, sp := converge.StartSpan(ctx, "x", converge.StringAttr("k", "v"))
	assert.Equal(t, ctx, got)
	assert.Equal(t, converge.NopSpan{}, sp)
	assert.False(t, sp.Recording())
	sp.SetAttrs(converge.IntAttr("n", 1))
	sp.Event("e")
	sp.End(errors.New("ignored"))
	assert.Nil(t, converge.TracerFrom(ctx))
	assert.Empty(t, converge.TraceParent(ctx))
	assert.Equal(t, ctx, converge.WithTraceParent(ctx, nil, "00-abc"))
	assert.Equal(t, ctx, converge.WithTracer(ctx, nil))
}

func TestSpanAttrValues(t *testing.T) {
	tests := []struct {
		attr converge.SpanAttr
		val  any
		text string
	}{
		{converge.StringAttr("s", "v"), "v", "s=v"},
		{converge.IntAttr("n", -3), int64(-3), "n=-3"},
		{converge.BoolAttr("b", true), true, "b=true"},
		{converge.BoolAttr("b", false), false, "b=false"},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			assert.Equal(t, tt.val, tt.attr.Value())
			assert.Equal(t, tt.text, tt.attr.String())
		})
	}
}

func TestStartSpanUsesTheTracerInContext(t *testing.T) {
	f := &fakeTracer{}
	ctx, parent := f.Start(context.Background(), "parent")
	assert.Equal(t, converge.Tracer(f), converge.TracerFrom(ctx))
	_, child := converge.StartSpan(ctx, "child", converge.StringAttr("k", "v"))
	child.End(nil)
	parent.End(nil)
	require.Len(t, f.spans, 2)
	assert.Equal(t, "parent", f.spans[1].parent)
	assert.Equal(t, []string{"k=v"}, f.spans[1].attrs)
	assert.Equal(t, "tp:parent", converge.TraceParent(ctx))
	remote := converge.WithTraceParent(context.Background(), f, "00-x")
	_, sp := converge.StartSpan(remote, "pass")
	sp.End(nil)
	assert.Equal(t, "remote 00-x", f.spans[2].parent, "WithTraceParent set the tracer and the remote parent")
}

func TestWalkSpansItemsAndWaiting(t *testing.T) {
	f := &fakeTracer{}
	a := (&convergetest.Item{Key: "a", Goal: "1"}).FailAt(converge.PhaseCheck, -1, nil)
	g := converge.NewGraph()
	g.Add(a.Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "b", Goal: "1"}).Node(), converge.Present, "a")
	g.Add((&convergetest.Item{Key: "c", Goal: "1"}).Node(), converge.Present)
	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 1, Tracer: f})
	require.NoError(t, err)
	_, err = w.Apply(context.Background(), g)
	require.Error(t, err)
	require.Len(t, f.spans, 4)
	walk := f.spans[0]
	assert.Equal(t, converge.SpanWalk, walk.name)
	assert.Error(t, walk.err)
	got := map[string][]string{}
	for _, s := range f.spans[1:] {
		assert.Equal(t, converge.SpanItem, s.name)
		assert.Equal(t, converge.SpanWalk, s.parent)
		assert.Equal(t, 1, s.ended)
		got[s.attrs[0]] = append(s.attrs[2:], s.events...)
	}
	assert.Equal(t, map[string][]string{
		"converge.item=a": {"converge.outcome=failed", "converge.phase=check"},
		"converge.item=b": {"converge.outcome=waiting"},
		"converge.item=c": {"converge.outcome=changed", "apply", "verify"},
	}, got)
}

func TestReconcilePassIsChildOfTheTargetsTraceParent(t *testing.T) {
	synctest.Test(t, reconcilePassIsChildOfTheTargetsTraceParent)
}

func reconcilePassIsChildOfTheTargetsTraceParent(t *testing.T) {
	f := &fakeTracer{}
	item := &convergetest.Item{Key: "a", Goal: "1"}
	build := func(_ context.Context, s spec) ([]converge.TargetStage, error) {
		g := converge.NewGraph()
		g.Add(item.Node(), converge.Present)
		return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
	}
	r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: build, Walk: converge.WalkerConfig{Tracer: f},
		TraceParent: func(s spec) string { return "tp-" + s.App }})
	require.NoError(t, r.SetTarget(context.Background(), spec{App: "v1"}))
	stop := runReconciler(t, r)
	time.Sleep(time.Minute)
	require.NoError(t, stop())
	require.Len(t, ev.of(converge.TargetPassFinished), 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	var names, parents []string
	for _, s := range f.spans {
		names, parents = append(names, s.name), append(parents, s.parent)
	}
	// Two walks: the second finds nothing to change.
	assert.Equal(t, []string{converge.SpanPass, converge.SpanStage, converge.SpanWalk, converge.SpanItem, converge.SpanWalk, converge.SpanItem}, names)
	assert.Equal(t, []string{"remote tp-v1", converge.SpanPass, converge.SpanStage, converge.SpanWalk, converge.SpanStage, converge.SpanWalk}, parents)
	assert.Contains(t, f.spans[0].attrs, "converge.outcome=finished")
	assert.Contains(t, f.spans[1].attrs, "converge.round=2")
}

// TestWalkSpansCarryEachWalksPresence: the attributes of the item spans
// (made once per graph) follow the walk: present in an Apply, absent in a
// Clean of the same graph, and name each item.
func TestWalkSpansCarryEachWalksPresence(t *testing.T) {
	f := &fakeTracer{}
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "a", Goal: "1"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "b", Goal: "1"}).Node(), converge.Present, "a")
	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 1, Tracer: f})
	require.NoError(t, err)
	_, err = w.Apply(context.Background(), g)
	require.NoError(t, err)
	_, err = w.Clean(context.Background(), g)
	require.NoError(t, err)
	_, err = w.Apply(context.Background(), g)
	require.NoError(t, err)
	var got []string
	for _, s := range f.spans {
		if s.name == converge.SpanItem {
			got = append(got, strings.Join(s.attrs, " "))
		}
	}
	assert.Equal(t, []string{
		"converge.item=a converge.presence=present converge.outcome=changed",
		"converge.item=b converge.presence=present converge.outcome=changed",
		"converge.item=b converge.presence=absent converge.outcome=changed",
		"converge.item=a converge.presence=absent converge.outcome=changed",
		"converge.item=a converge.presence=present converge.outcome=changed",
		"converge.item=b converge.presence=present converge.outcome=changed",
	}, got)
}
