package dockertest

import (
	"context"
	"errors"
	"fmt"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/convergekit/converge/docker"
)

// RemoveProject removes, on cli, the containers (with their anonymous
// volumes), networks and volumes labelled as project's: by converge
// (docker.LabelProject) or by compose (com.docker.compose.project). It is
// the cleanup of a test or a benchmark that made the project under a name
// of its own; it never touches what carries another project's label. What
// is already gone is no error; the other errors are joined, each naming
// the object.
func RemoveProject(ctx context.Context, cli *client.Client, project string) error {
	var errs []error
	keep := func(what string, err error) {
		if err != nil && !client.IsErrNotFound(err) {
			errs = append(errs, fmt.Errorf("dockertest: project %s: %s: %w", project, what, err))
		}
	}
	for _, label := range []string{docker.LabelProject, "com.docker.compose.project"} {
		f := filters.NewArgs(filters.Arg("label", label+"="+project))
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
		keep("list containers", err)
		for _, c := range cs {
			keep("remove container "+c.ID[:12], cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}))
		}
		ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
		keep("list networks", err)
		for _, n := range ns {
			keep("remove network "+n.Name, cli.NetworkRemove(ctx, n.ID))
		}
		vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
		keep("list volumes", err)
		for _, v := range vs.Volumes {
			keep("remove volume "+v.Name, cli.VolumeRemove(ctx, v.Name, true))
		}
	}
	return errors.Join(errs...)
}
