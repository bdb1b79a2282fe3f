package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/system"
)

// WatchedEvents are the container events that can mean drift: a container
// of the project stopped, died, was killed, removed, renamed or paused.
var WatchedEvents = []string{"die", "stop", "kill", "oom", "destroy", "rename", "pause"}

// EventResync is the Action of the Event WatchEvents passes on after the
// engine's event stream broke: events may have been missed, look at
// everything.
const EventResync = "resync"

// EventSettle is how long WatchEvents waits after an event before calling
// its trigger; events within the delay are coalesced into one call. The
// engine publishes "die" before the container list shows the container
// stopped, so WatchEvents also inspects the container (which waits until
// the engine has recorded the exit) before it triggers.
const EventSettle = 200 * time.Millisecond

// Event is an engine event that can mean drift in a project: one of
// WatchedEvents on one of its containers, or EventResync. It carries the
// container's name and service, never its labels or environment.
type Event struct {
	// Action is the engine's action ("die", "stop", ...) or EventResync.
	Action string
	// Container is the container's name; "" for EventResync.
	Container string
	// Service is the service the container runs (LabelService); "" for
	// EventResync.
	Service string
	// ContainerID is the engine's ID of the container; "" for EventResync.
	ContainerID string
	// Time is when the engine recorded the event (when the stream broke,
	// for EventResync).
	Time time.Time
}

// engineClock is the optional ability of an Engine to tell its own time
// (a *client.Client has it); WatchEvents uses it so a clock difference
// between this process and the engine loses no event.
type engineClock interface {
	Info(ctx context.Context) (system.Info, error)
}

// WatchEvents subscribes to the engine's events for the containers of
// project and returns once subscribed: every change the engine records
// after WatchEvents returns reaches trigger. (The subscription asks the
// engine to replay its events since the engine time read before
// subscribing, taken from Info when eng has it, else from this process's
// clock, so no change between the subscription and the stream being in
// place is lost.)
//
// trigger is called for events that can mean drift (see WatchedEvents),
// EventSettle after the first of a burst, with the last event of the burst,
// one call at a time. Feed it a reconcile loop's Trigger so a killed
// container is brought back within a pass. When the event stream fails,
// WatchEvents calls trigger with EventResync and subscribes again after a
// backoff that doubles from 100ms up to 10s, replaying what the engine
// still holds since the last event seen. The watch ends when ctx is
// cancelled or stop is called; stop waits until trigger is no longer
// called and may be called more than once. trigger must not block for long.
func WatchEvents(ctx context.Context, eng Engine, project string, trigger func(Event)) (stop func(), err error) {
	if trigger == nil {
		return nil, &SpecError{Object: "watch of project " + project, Field: "trigger", Reason: "must not be nil"}
	}
	since := time.Now()
	if c, ok := eng.(engineClock); ok {
		info, err := c.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("docker: watch events of project %s: engine time: %w", project, err)
		}
		if t, err := time.Parse(time.RFC3339Nano, info.SystemTime); err == nil {
			since = t
		}
	}
	w := &watcher{eng: eng, project: project, trigger: trigger}
	wctx, cancel := context.WithCancel(ctx)
	sub := w.subscribe(wctx, since)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(wctx, sub, since)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}, nil
}

type watcher struct {
	eng     Engine
	project string
	trigger func(Event)
}

// subscription is one call of Engine.Events.
type subscription struct {
	msgs   <-chan events.Message
	errs   <-chan error
	cancel context.CancelFunc
}

func (w *watcher) subscribe(ctx context.Context, since time.Time) subscription {
	args := filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("label", LabelProject+"="+w.project),
	)
	for _, e := range WatchedEvents {
		args.Add("event", e)
	}
	sctx, cancel := context.WithCancel(ctx)
	msgs, errs := w.eng.Events(sctx, events.ListOptions{
		Filters: args,
		Since:   fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
	})
	return subscription{msgs: msgs, errs: errs, cancel: cancel}
}

// run pumps the subscription until ctx ends, coalescing events, and
// subscribes again when the stream breaks.
func (w *watcher) run(ctx context.Context, sub subscription, since time.Time) {
	var (
		last    Event
		settle  *time.Timer
		settleC <-chan time.Time
		retry   *time.Timer
		retryC  <-chan time.Time
		backoff = 100 * time.Millisecond
	)
	defer func() {
		sub.cancel()
		if settle != nil {
			settle.Stop()
		}
		if retry != nil {
			retry.Stop()
		}
	}()
	pend := func(e Event) {
		last = e
		if settleC == nil {
			settle = time.NewTimer(EventSettle)
			settleC = settle.C
		}
	}
	broken := func() {
		sub.cancel()
		sub.msgs, sub.errs = nil, nil
		pend(Event{Action: EventResync, Time: time.Now()})
		retry = time.NewTimer(backoff)
		retryC = retry.C
		backoff = min(backoff*2, 10*time.Second)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.errs:
			broken()
		case m, open := <-sub.msgs:
			if !open {
				broken()
				continue
			}
			backoff = 100 * time.Millisecond
			e := eventOf(m)
			if e.Time.After(since) {
				since = e.Time.Add(time.Nanosecond)
			}
			pend(e)
		case <-retryC:
			retryC = nil
			sub = w.subscribe(ctx, since)
		case <-settleC:
			settleC = nil
			if last.ContainerID != "" {
				// The engine holds the container's lock until the exit is
				// fully recorded; an inspect waits for it, so the pass that
				// follows lists the container as it now is.
				_, _ = w.eng.ContainerInspect(ctx, last.ContainerID)
			}
			if ctx.Err() != nil {
				return
			}
			w.trigger(last)
		}
	}
}

// eventOf reduces an engine message to an Event, dropping its labels.
func eventOf(m events.Message) Event {
	e := Event{Action: string(m.Action), ContainerID: m.Actor.ID,
		Container: m.Actor.Attributes["name"], Service: m.Actor.Attributes[LabelService]}
	switch {
	case m.TimeNano != 0:
		e.Time = time.Unix(0, m.TimeNano)
	case m.Time != 0:
		e.Time = time.Unix(m.Time, 0)
	}
	return e
}
