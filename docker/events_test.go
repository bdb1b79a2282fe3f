package docker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/docker/docker/api/types/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// breakingEvents fails its first event stream at once, then delegates;
// it records the Since of every subscription.
type breakingEvents struct {
	*dockertest.Engine
	mu     sync.Mutex
	since  []string
	broken bool
}

func (b *breakingEvents) Events(ctx context.Context, o events.ListOptions) (<-chan events.Message, <-chan error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.since = append(b.since, o.Since)
	if !b.broken {
		b.broken = true
		errs := make(chan error, 1)
		errs <- errors.New("stream reset")
		return nil, errs
	}
	return b.Engine.Events(ctx, o)
}

// TestWatchEventsResyncsAfterStreamBreak: a broken stream is reported as
// EventResync and subscribed again, asking the engine to replay since the
// watch began; later changes are seen.
func TestWatchEventsResyncsAfterStreamBreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		apply(t, f, load(t, threeServices))
		eng := &breakingEvents{Engine: f}
		got := make(chan docker.Event, 16)
		stop, err := docker.WatchEvents(context.Background(), eng, "shop", func(e docker.Event) { got <- e })
		require.NoError(t, err)
		defer stop()
		e := <-got
		assert.Equal(t, docker.EventResync, e.Action)
		assert.Empty(t, e.Container)
		synctest.Wait() // subscribed again after the backoff
		f.Kill("shop-db")
		e = <-got
		assert.Equal(t, "die", e.Action)
		assert.Equal(t, "shop-db", e.Container)
		eng.mu.Lock()
		defer eng.mu.Unlock()
		require.Len(t, eng.since, 2)
		assert.NotEmpty(t, eng.since[0], "the engine is asked to replay")
		assert.Equal(t, eng.since[0], eng.since[1], "no event seen yet: replay from the start of the watch")
	})
}
