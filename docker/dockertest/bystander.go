package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
)

// ErrBystanderTouched is matched by the error of Bystander.Check when a
// test changed the project it must leave alone.
var ErrBystanderTouched = errors.New("touched by a test")

// Bystander is a project that runs on the engine beside the tests, as a
// user's own does: one named like an example's project ("deviceagent"),
// which a test of that example must leave alone. Tests start one before
// they run (StartBystander), and Check it after their cleanup: the same
// containers (IDs), started at the same time, on the same networks and
// volumes, with the data written in its volume.
//
// Test runs that share an engine (the packages of one `go test`, two
// developers' runs) share one bystander: each watcher holds a token (a
// small volume labelled LabelBystander), and the last one to Remove its
// token removes the project, when tests made it.
type Bystander struct {
	cli     *client.Client
	project docker.Project
	// test: the project carries TestLabel (a test made it, this one or
	// another run's); otherwise it is a user's own, only watched.
	test       bool
	created    bool
	token      string
	containers map[string]bystanderContainer
	networks   map[string]string // name -> ID
	volumes    []string
}

// LabelBystander labels the tokens of a bystander's watchers (see
// Bystander); its value is the project's name.
const LabelBystander = "io.convergekit.test.bystander"

type bystanderContainer struct {
	id, startedAt string
	running       bool
}

// bystanderData is the file StartBystander writes in the project's volume
// (mounted at /data in its db container).
const bystanderData = "bystander"

// StartBystander makes sure a project named name runs on cli, as a user
// running the example of that name has it, and records it, holding a
// token until Remove. When containers of a project by that name exist
// already (a user's own, or one another test run made), it creates
// nothing and only records them. Otherwise it creates the project as
// converge does (containers name-db and name-web on the network
// name_default, the volume name_data mounted at /data in name-db, every
// object labelled TestLabel) on image (BuildAppImage's) and writes a random
// value in a file of the volume.
func StartBystander(ctx context.Context, cli *client.Client, name, image string) (*Bystander, error) {
	b := &Bystander{cli: cli, project: bystanderProject(name, image)}
	tok := make([]byte, 6)
	_, _ = rand.Read(tok)
	b.token = name + "-bystander-" + hex.EncodeToString(tok)
	// The token first: a watcher that removes its own token meanwhile
	// sees this one and leaves the project.
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: b.token, Labels: map[string]string{TestLabel: "1", LabelBystander: name}}); err != nil {
		return nil, fmt.Errorf("dockertest: bystander %s: token: %w", name, err)
	}
	if err := b.start(ctx); err != nil {
		_ = b.Remove(context.WithoutCancel(ctx))
		return nil, err
	}
	return b, nil
}

func (b *Bystander) start(ctx context.Context) error {
	cs, err := b.list(ctx)
	if err != nil {
		return err
	}
	b.test = true
	running := 0
	for _, c := range cs {
		b.test = b.test && c.Labels[TestLabel] == "1"
		if c.State == container.StateRunning {
			running++
		}
	}
	if b.test && running < len(b.project.Containers) {
		// None, or another run is making it right now: converge it (what
		// is there already is adopted, nothing is recreated).
		g, err := b.project.Graph(b.cli)
		if err != nil {
			return err
		}
		if _, err := converge.Apply(ctx, g); err != nil {
			return fmt.Errorf("dockertest: bystander %s: %w", b.project.Name, err)
		}
		b.created = len(cs) == 0
	}
	if b.containers, b.networks, b.volumes, err = b.snapshot(ctx); err != nil {
		return err
	}
	if b.test {
		// The data is the ID of the db container: every run that watches
		// the project knows what it must be, and writes the same.
		if want := b.containers[b.project.Name+"-db"].id; b.readDataIs(ctx, want) != nil {
			return b.writeData(ctx, want)
		}
	}
	return nil
}

func bystanderProject(name, image string) docker.Project {
	labels := map[string]string{TestLabel: "1"}
	net, vol := name+"_default", name+"_data"
	return docker.Project{
		Name: name,
		Containers: []docker.ContainerSpec{
			{Service: "db", Image: image, Command: []string{"/app", "sleep"}, Labels: labels,
				Mounts: []docker.Mount{{Type: "volume", Source: vol, Target: "/data"}}, Networks: []docker.NetworkAttachment{{Name: net}}},
			{Service: "web", Image: image, Command: []string{"/app", "sleep"}, Labels: labels,
				Networks: []docker.NetworkAttachment{{Name: net}}, DependsOn: []docker.Dependency{{Service: "db"}}},
		},
		Networks:      []docker.NetworkSpec{{Name: net, Labels: labels}},
		Volumes:       []docker.VolumeSpec{{Name: vol, Labels: labels}},
		RemoveVolumes: true,
	}
}

// Name is the name of the project.
func (b *Bystander) Name() string { return b.project.Name }

// Created reports whether this StartBystander created the project (true),
// or found it there (false): a user's own, or one another test run made.
func (b *Bystander) Created() bool { return b.created }

func (b *Bystander) filter() container.ListOptions {
	return container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelProject+"="+b.project.Name))}
}

func (b *Bystander) list(ctx context.Context) ([]container.Summary, error) {
	cs, err := b.cli.ContainerList(ctx, b.filter())
	if err != nil {
		return nil, fmt.Errorf("dockertest: bystander %s: %w", b.project.Name, err)
	}
	return cs, nil
}

// snapshot reads the project's containers, networks and volumes.
func (b *Bystander) snapshot(ctx context.Context) (map[string]bystanderContainer, map[string]string, []string, error) {
	fail := func(err error) (map[string]bystanderContainer, map[string]string, []string, error) {
		return nil, nil, nil, fmt.Errorf("dockertest: bystander %s: %w", b.project.Name, err)
	}
	cs, err := b.list(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	containers := map[string]bystanderContainer{}
	for _, c := range cs {
		r, err := b.cli.ContainerInspect(ctx, c.ID)
		if err != nil {
			return fail(err)
		}
		bc := bystanderContainer{id: r.ID}
		if r.State != nil {
			bc.startedAt, bc.running = r.State.StartedAt, r.State.Running
		}
		containers[r.Name[1:]] = bc
	}
	f := filters.NewArgs(filters.Arg("label", docker.LabelProject+"="+b.project.Name))
	ns, err := b.cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return fail(err)
	}
	networks := map[string]string{}
	for _, n := range ns {
		networks[n.Name] = n.ID
	}
	vs, err := b.cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return fail(err)
	}
	var volumes []string
	for _, v := range vs.Volumes {
		volumes = append(volumes, v.Name)
	}
	slices.Sort(volumes)
	return containers, networks, volumes, nil
}

// Check returns an error matching ErrBystanderTouched that says what
// changed since StartBystander: a container gone, replaced, added,
// restarted or stopped; a network or volume gone or replaced; the data
// written in the volume changed.
func (b *Bystander) Check(ctx context.Context) error {
	containers, networks, volumes, err := b.snapshot(ctx)
	if err != nil {
		return err
	}
	var diffs []string
	for _, n := range slices.Sorted(maps.Keys(b.containers)) {
		was, now := b.containers[n], containers[n]
		switch {
		case now.id == "":
			diffs = append(diffs, "container "+n+" is gone")
		case now.id != was.id:
			diffs = append(diffs, "container "+n+" was replaced")
		case now != was:
			diffs = append(diffs, "container "+n+" was stopped or restarted")
		}
	}
	for _, n := range slices.Sorted(maps.Keys(containers)) {
		if _, ok := b.containers[n]; !ok {
			diffs = append(diffs, "container "+n+" was added")
		}
	}
	for _, n := range slices.Sorted(maps.Keys(b.networks)) {
		switch id, ok := networks[n]; {
		case !ok:
			diffs = append(diffs, "network "+n+" is gone")
		case id != b.networks[n]:
			diffs = append(diffs, "network "+n+" was replaced")
		}
	}
	for _, v := range b.volumes {
		if !slices.Contains(volumes, v) {
			diffs = append(diffs, "volume "+v+" is gone")
		}
	}
	if b.test && len(diffs) == 0 {
		if err := b.readDataIs(ctx, b.containers[b.project.Name+"-db"].id); err != nil {
			diffs = append(diffs, fmt.Sprintf("the data in volume %s_data: %v", b.project.Name, err))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("dockertest: bystander %s: %w: %s", b.project.Name, ErrBystanderTouched, strings.Join(diffs, "; "))
	}
	return nil
}

// Remove ends this watch: it removes its token, and the project with its
// volume when tests made the project and no other watcher holds a token;
// a user's project is left as it is.
func (b *Bystander) Remove(ctx context.Context) error {
	if err := b.cli.VolumeRemove(ctx, b.token, true); err != nil && !client.IsErrNotFound(err) {
		return fmt.Errorf("dockertest: bystander %s: token: %w", b.project.Name, err)
	}
	if !b.test {
		return nil
	}
	others, err := b.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelBystander+"="+b.project.Name))})
	if err != nil {
		return fmt.Errorf("dockertest: bystander %s: %w", b.project.Name, err)
	}
	if len(others.Volumes) > 0 {
		return nil // another watcher removes it
	}
	g, err := b.project.Graph(b.cli)
	if err != nil {
		return err
	}
	if _, err := converge.Clean(ctx, g); err != nil {
		return fmt.Errorf("dockertest: bystander %s: remove: %w", b.project.Name, err)
	}
	return nil
}

// writeData writes data in the volume, through the db container.
func (b *Bystander) writeData(ctx context.Context, data string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: bystanderData, Mode: 0o644, Size: int64(len(data))}); err != nil {
		return err
	}
	if _, err := tw.Write([]byte(data)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := b.cli.CopyToContainer(ctx, b.project.Name+"-db", "/data", &buf, container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("dockertest: bystander %s: write data: %w", b.project.Name, err)
	}
	return nil
}

// readDataIs reads the data back from the volume and says how it is not
// want.
func (b *Bystander) readDataIs(ctx context.Context, want string) error {
	rc, _, err := b.cli.CopyFromContainer(ctx, b.project.Name+"-db", "/data/"+bystanderData)
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(tr, 1<<10))
	if err == nil && string(data) != want {
		err = fmt.Errorf("it holds %q, not %q", data, want)
	}
	return err
}
