package docker_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
)

// spanLog is a converge.Tracer that records, for every span, its name,
// its parent's name and whether it ended with an error.
type spanLog struct {
	mu    sync.Mutex
	spans []*loggedSpan
}

type loggedSpan struct {
	name, parent, item, op string
	failed, ended          bool
}

type loggedKey struct{}

func (l *spanLog) Start(ctx context.Context, name string, attrs ...converge.SpanAttr) (context.Context, converge.Span) {
	s := &loggedSpan{name: name}
	if p, ok := ctx.Value(loggedKey{}).(*loggedSpan); ok {
		s.parent = p.name + " " + p.item
	}
	for _, a := range attrs {
		switch a.Key {
		case converge.AttrItem:
			s.item = a.Value().(string)
		case docker.AttrOperation:
			s.op = a.Value().(string)
		}
	}
	l.mu.Lock()
	l.spans = append(l.spans, s)
	l.mu.Unlock()
	return converge.WithTracer(context.WithValue(ctx, loggedKey{}, s), l), &loggedHandle{l, s}
}

type loggedHandle struct {
	l *spanLog
	s *loggedSpan
}

func (h *loggedHandle) Recording() bool                    { return true }
func (h *loggedHandle) SetAttrs(...converge.SpanAttr)      {}
func (h *loggedHandle) Event(string, ...converge.SpanAttr) {}
func (h *loggedHandle) End(err error) {
	h.l.mu.Lock()
	h.s.failed, h.s.ended = err != nil, true
	h.l.mu.Unlock()
}

// startFails is an engine whose first ContainerStart fails.
type startFails struct {
	docker.Engine
	mu     sync.Mutex
	failed bool
}

func (e *startFails) ContainerStart(ctx context.Context, id string, opts container.StartOptions) error {
	e.mu.Lock()
	first := !e.failed
	e.failed = true
	e.mu.Unlock()
	if first {
		return errors.New("no such device")
	}
	return e.Engine.ContainerStart(ctx, id, opts)
}

func TestEngineCallsAreChildrenOfTheirItemsSpan(t *testing.T) {
	p := load(t, threeServices)
	g, err := p.Graph(&startFails{Engine: newFake()})
	require.NoError(t, err)
	tr := &spanLog{}
	w, err := converge.NewWalker(converge.WalkerConfig{Tracer: tr})
	require.NoError(t, err)
	_, err = w.Apply(context.Background(), g)
	require.Error(t, err)

	tr.mu.Lock()
	defer tr.mu.Unlock()
	calls := map[string]int{}
	var failed []string
	for _, s := range tr.spans {
		require.True(t, s.ended, "%s ended", s.name)
		if s.op == "" {
			continue
		}
		assert.Equal(t, docker.SpanPrefix+s.op, s.name)
		assert.Regexp(t, `^converge\.item \S+$`, s.parent, "%s is a child of an item", s.name)
		calls[s.op]++
		if s.failed {
			failed = append(failed, s.parent+" "+s.op)
		}
	}
	assert.Positive(t, calls["ContainerCreate"])
	assert.Positive(t, calls["ContainerList"])
	assert.Len(t, failed, 1, "the one failed call: %v", failed)
	assert.Contains(t, failed[0], "ContainerStart")
	assert.Contains(t, failed[0], "converge.item "+string(docker.ContainerID("shop", "")), "a container's item made it")
}

func TestEngineCallsWithoutTracerStartNoSpan(t *testing.T) {
	ctx, sp := converge.StartSpan(context.Background(), "x")
	assert.Equal(t, converge.NopSpan{}, sp)
	assert.Nil(t, converge.TracerFrom(ctx))
	apply(t, newFake(), load(t, threeServices)) // no Tracer: the walk is as before
}
