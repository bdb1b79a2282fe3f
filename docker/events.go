package docker

import (
	"context"
	"sync"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
)

// WatchedEvents are the container events that can mean drift: a container
// of the project stopped, died, was killed, removed, renamed or paused.
var WatchedEvents = []string{"die", "stop", "kill", "oom", "destroy", "rename", "pause"}

// EventSettle is how long WatchEvents waits after an event before calling
// its trigger; events within the delay are coalesced into one call. The
// engine publishes "die" before the container list shows the container
// stopped, so WatchEvents also inspects the container (which waits until
// the engine has recorded the exit) before it triggers.
const EventSettle = 200 * time.Millisecond

// WatchEvents subscribes to the engine's events for the containers of
// project and calls trigger for events that can mean drift (see
// WatchedEvents), EventSettle after the first of a burst, with the last
// event of the burst. Feed it a reconcile loop's Trigger so a killed
// container is brought back within a pass. Events carry names and labels,
// never environment values. When the event stream fails, WatchEvents calls
// trigger once (events may have been missed) and subscribes again after a
// backoff that doubles from 100ms up to 10s. It returns ctx.Err() when ctx
// is cancelled. trigger must not block for long.
func WatchEvents(ctx context.Context, eng Engine, project string, trigger func(events.Message)) error {
	var (
		mu      sync.Mutex
		last    events.Message
		pending *time.Timer
	)
	defer func() {
		mu.Lock()
		if pending != nil {
			pending.Stop()
		}
		mu.Unlock()
	}()
	settle := func(m events.Message) {
		mu.Lock()
		defer mu.Unlock()
		last = m
		if pending != nil {
			return
		}
		pending = time.AfterFunc(EventSettle, func() {
			mu.Lock()
			m := last
			pending = nil
			mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			if m.Actor.ID != "" {
				// The engine holds the container's lock until the exit is
				// fully recorded; an inspect waits for it, so the pass that
				// follows lists the container as it now is.
				_, _ = eng.ContainerInspect(ctx, m.Actor.ID)
			}
			trigger(m)
		})
	}
	args := filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("label", LabelProject+"="+project),
	)
	for _, e := range WatchedEvents {
		args.Add("event", e)
	}
	backoff := 100 * time.Millisecond
	for {
		sctx, cancel := context.WithCancel(ctx)
		msgs, errs := eng.Events(sctx, events.ListOptions{Filters: args})
		err := pump(sctx, msgs, errs, settle, func() { backoff = 100 * time.Millisecond })
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = err // the stream broke: resubscribe
		settle(events.Message{Type: events.ContainerEventType, Action: "resync"})
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func pump(ctx context.Context, msgs <-chan events.Message, errs <-chan error, trigger func(events.Message), ok func()) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case m, open := <-msgs:
			if !open {
				return nil
			}
			ok()
			trigger(m)
		}
	}
}
