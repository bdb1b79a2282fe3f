package otel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

func TestWalkTreeFailedItemAndSkippedDependents(t *testing.T) {
	for _, par := range []int{1, 4} {
		t.Run(map[int]string{1: "one worker", 4: "four workers"}[par], func(t *testing.T) {
			rec := newRecorder(t)
			a := (&convergetest.Item{Key: "a", Goal: "1"}).FailAt(converge.PhaseApply, -1, nil)
			b := &convergetest.Item{Key: "b", Goal: "1"}
			c := &convergetest.Item{Key: "c", Goal: "1"}
			d := &convergetest.Item{Key: "d", Goal: "1"}
			e := &convergetest.Item{Key: "e", Goal: "1", Value: "1"}
			g := converge.NewGraph()
			g.Add(a.Node(), converge.Present)
			g.Add(b.Node(), converge.Present, "a")
			g.Add(c.Node(), converge.Present, "b")
			g.Add(d.Node(), converge.Present)
			g.Add(e.Node(), converge.Present)
			w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: par, Tracer: rec.tr})
			require.NoError(t, err)
			rep, err := w.Apply(context.Background(), g)
			require.Error(t, err)
			assert.Equal(t, 2, rep.Count(converge.OutcomeWaiting))

			assert.Equal(t, `converge.walk not_run=0 waiting=2 ERROR
  converge.item item=a outcome=failed phase=apply +apply ERROR
  converge.item item=b outcome=waiting
  converge.item item=c outcome=waiting
  converge.item item=d outcome=changed +apply +verify
  converge.item item=e outcome=unchanged
`, tree(rec.exp.GetSpans()))
		})
	}
}

// engineCall is an item whose Apply makes a call of an adapter, which
// starts its span through converge.StartSpan as the docker module does.
type engineCall struct{ convergetest.Item }

func (e *engineCall) Apply(ctx context.Context, current, target string) (string, error) {
	_, sp := converge.StartSpan(ctx, "docker.ContainerCreate", converge.StringAttr("docker.operation", "ContainerCreate"))
	sp.End(nil)
	return e.Item.Apply(ctx, current, target)
}

func TestWalkItemContextCarriesTheSpanForAdapters(t *testing.T) {
	rec := newRecorder(t)
	g := converge.NewGraph()
	g.Add(converge.Wrap[string](&engineCall{convergetest.Item{Key: "web", Goal: "1"}}), converge.Present)
	w, err := converge.NewWalker(converge.WalkerConfig{Tracer: rec.tr})
	require.NoError(t, err)
	_, err = w.Apply(context.Background(), g)
	require.NoError(t, err)
	assert.Equal(t, `converge.walk
  converge.item item=web outcome=changed +apply +verify
    docker.ContainerCreate docker.operation=ContainerCreate
`, tree(rec.exp.GetSpans()))
}

func TestWalkUnsampledStartsNoItemSpans(t *testing.T) {
	rec := newRecorder(t, sdktrace.WithSampler(sdktrace.NeverSample()))
	var spans int
	counting := countingTracer{Tracer: rec.tr, n: &spans}
	g := converge.NewGraph()
	for _, id := range []converge.ID{"a", "b", "c"} {
		g.Add((&convergetest.Item{Key: id, Goal: "1"}).Node(), converge.Present)
	}
	w, err := converge.NewWalker(converge.WalkerConfig{Tracer: counting})
	require.NoError(t, err)
	_, err = w.Apply(context.Background(), g)
	require.NoError(t, err)
	assert.Equal(t, 1, spans, "the walk's span only: its items' would not be sampled either")
	assert.Empty(t, rec.exp.GetSpans())
}

type countingTracer struct {
	converge.Tracer
	n *int
}

func (c countingTracer) Start(ctx context.Context, name string, attrs ...converge.SpanAttr) (context.Context, converge.Span) {
	*c.n++
	return c.Tracer.Start(ctx, name, attrs...)
}

// pair is a target of two items in a row, "a" (slow) then "b", both set
// to the target, in one stage.
type pair struct{ a, b *convergetest.Item }

func (p *pair) build(_ context.Context, target string) ([]converge.TargetStage, error) {
	g := converge.NewGraph()
	goal := func(converge.DepStates) (string, error) { return target, nil }
	p.a.GoalFunc, p.b.GoalFunc = goal, goal
	g.Add(p.a.Node(), converge.Present)
	g.Add(p.b.Node(), converge.Present, "a")
	return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
}

func TestPassTreePreemptedByANewTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder(t)
		p := &pair{a: &convergetest.Item{Key: "a", Latency: 10 * time.Second}, b: &convergetest.Item{Key: "b"}}
		r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
			Name: "device", Build: p.build, Walk: converge.WalkerConfig{Parallelism: 1, Tracer: rec.tr}})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, r.SetTarget(ctx, "v1"))
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		time.Sleep(5 * time.Second) // a is applying v1
		require.NoError(t, r.SetTarget(ctx, "v2"))
		time.Sleep(time.Minute)
		cancel()
		require.NoError(t, <-done)

		spans := rec.exp.GetSpans()
		assert.Equal(t, `converge.pass outcome=preempted
  converge.stage stage=apps
    converge.walk not_run=1 waiting=0
      converge.item item=a outcome=changed +apply +verify
converge.pass outcome=finished
  converge.stage stage=apps
    converge.walk
      converge.item item=a outcome=changed +apply +verify
      converge.item item=b outcome=changed +apply +verify
    converge.walk
      converge.item item=a outcome=unchanged
      converge.item item=b outcome=unchanged
`, tree(spans))
		revs := map[string]bool{}
		for _, s := range spans {
			if s.Name == converge.SpanPass {
				assert.Equal(t, "device", attr(s, converge.AttrTarget))
				revs[attr(s, converge.AttrRevision)] = true
			}
		}
		assert.Len(t, revs, 2, "each pass names its own revision")
	})
}

// TestWalkItemSpansKeepTheirOwnAttributes: the attributes of spans started
// at once by many workers (converted through buffers the Tracer reuses)
// are each span's own, and an event's attributes stay the event's.
func TestWalkItemSpansKeepTheirOwnAttributes(t *testing.T) {
	rec := newRecorder(t)
	const n = 300
	g := converge.NewGraph()
	for k := range n {
		it := &convergetest.Item{Key: converge.ID(fmt.Sprintf("item-%03d", k)), Goal: "1"}
		if k%3 == 0 {
			it.Value = "1" // unchanged
		}
		g.Add(it.Node(), converge.Present)
	}
	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 8, Tracer: rec.tr})
	require.NoError(t, err)
	_, err = w.Apply(context.Background(), g)
	require.NoError(t, err)
	ctx, sp := rec.tr.Start(context.Background(), "outer", converge.StringAttr("k", "v"))
	sp.Event("e1", converge.StringAttr("ek", "first"), converge.IntAttr("n", 1))
	_, inner := rec.tr.Start(ctx, "inner", converge.StringAttr("k", "w"))
	inner.End(nil)
	sp.Event("e2", converge.BoolAttr("b", true))
	sp.End(nil)

	seen := map[string]bool{}
	for _, s := range rec.exp.GetSpans() {
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		switch s.Name {
		case converge.SpanItem:
			id := attrs[converge.AttrItem]
			require.False(t, seen[id], "one span per item: %s", id)
			seen[id] = true
			var k int
			_, err := fmt.Sscanf(id, "item-%03d", &k)
			require.NoError(t, err)
			want := "changed"
			if k%3 == 0 {
				want = "unchanged"
			}
			assert.Equal(t, map[string]string{converge.AttrItem: id, converge.AttrPresence: "present", converge.AttrOutcome: want}, attrs, id)
		case "outer":
			assert.Equal(t, map[string]string{"k": "v"}, attrs)
			require.Len(t, s.Events, 2)
			assert.Equal(t, "ek:first n:1", eventAttrs(s.Events[0]))
			assert.Equal(t, "b:true", eventAttrs(s.Events[1]))
		case "inner":
			assert.Equal(t, map[string]string{"k": "w"}, attrs)
		}
	}
	assert.Len(t, seen, n)
}

func eventAttrs(e sdktrace.Event) string {
	var parts []string
	for _, kv := range e.Attributes {
		parts = append(parts, string(kv.Key)+":"+kv.Value.Emit())
	}
	return strings.Join(parts, " ")
}
