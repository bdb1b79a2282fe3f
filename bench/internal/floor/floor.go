// Package floor is the program that bench/cmd/agentcost measures a device
// agent against (cmd/enginefloor), and the same program linked with the
// agent's packages (cmd/linkfloor): the least a Go program must do to watch
// a Docker project, with the engine client library the agent uses.
package floor

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

// Main parses the command line and runs the floor; see cmd/enginefloor.
func Main() {
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
