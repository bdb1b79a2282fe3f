package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// slowEvents is the real engine whose event stream takes a while to be in
// place, as over a slow link: the request reaches the engine 300ms late.
type slowEvents struct{ *client.Client }

func (s slowEvents) Events(ctx context.Context, o events.ListOptions) (<-chan events.Message, <-chan error) {
	msgs, errs := make(chan events.Message), make(chan error, 1)
	go func() {
		late := time.NewTimer(300 * time.Millisecond)
		defer late.Stop()
		select {
		case <-ctx.Done():
			errs <- ctx.Err()
			return
		case <-late.C:
		}
		in, inErr := s.Client.Events(ctx, o)
		for {
			select {
			case m := <-in:
				select {
				case msgs <- m:
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
			case err := <-inErr:
				errs <- err
				return
			}
		}
	}()
	return msgs, errs
}

// TestWatchEventsSeesChangeRightAfterReady: a container killed right after
// WatchEvents returns is reported, on the real engine, even when the event
// stream is slow to be in place.
func TestWatchEventsSeesChangeRightAfterReady(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	proj := uniqueName("cvev")
	cleanupProject(t, cli, proj)
	p, err := docker.LoadCompose(ctx, []byte(`
name: `+proj+`
services:
  app:
    image: `+img+`
    command: ["/app", "sleep"]
    labels:
      `+dockertest.TestLabel+`: "1"
`), docker.LoadOptions{})
	require.NoError(t, err)
	name := proj + "-app"
	for _, eng := range []docker.Engine{cli, slowEvents{cli}} {
		for round := range 3 {
			apply(t, cli, p)
			got := make(chan docker.Event, 16)
			stop, err := docker.WatchEvents(ctx, eng, proj, func(e docker.Event) { got <- e })
			require.NoError(t, err)
			// No pause: the change is made the moment the watch is ready.
			require.NoError(t, cli.ContainerKill(ctx, name, "KILL"))
			select {
			case e := <-got:
				require.Equal(t, name, e.Container, "%T round %d", eng, round)
				require.Equal(t, "app", e.Service)
				require.Contains(t, []string{"kill", "die"}, e.Action)
			case <-time.After(20 * time.Second):
				t.Fatalf("%T round %d: the kill made right after the watch was ready was not reported", eng, round)
			}
			stop()
			r, err := cli.ContainerInspect(ctx, name)
			require.NoError(t, err)
			require.Equal(t, container.StateExited, r.State.Status)
		}
	}
}
