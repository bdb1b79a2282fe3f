// Command enginefloor is the floor that bench/cmd/agentcost measures a
// device agent against: the least a Go program must do to watch a Docker
// project, with the same engine client library the agent uses.
//
//	enginefloor -mode events -project P   # hold the engine's event stream until killed
//	enginefloor -mode start -project P    # list and inspect the project's containers, then exit
//
// In events mode it prints "ready" once subscribed and then only reads
// events; in start mode it prints how many containers it inspected.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

func main() {
	mode := flag.String("mode", "events", "events or start")
	project := flag.String("project", "", "the value of the project label to filter on")
	label := flag.String("label", "io.convergekit.project", "the project label")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *mode, *label+"="+*project); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "enginefloor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, mode, label string) error {
	eng, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer eng.Close()
	f := filters.NewArgs(filters.Arg("label", label))
	switch mode {
	case "start":
		list, err := eng.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
		if err != nil {
			return err
		}
		for _, c := range list {
			if _, err := eng.ContainerInspect(ctx, c.ID); err != nil {
				return err
			}
		}
		fmt.Printf("inspected %d\n", len(list))
		return nil
	case "events":
		f.Add("type", string(events.ContainerEventType))
		msgs, errs := eng.Events(ctx, events.ListOptions{Filters: f})
		if _, err := eng.Ping(ctx); err != nil {
			return err
		}
		fmt.Println("ready")
		for {
			select {
			case <-msgs:
			case err := <-errs:
				return err
			}
		}
	}
	return fmt.Errorf("unknown mode %q", mode)
}
