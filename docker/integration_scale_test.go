package docker_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// TestIntegrationScale: on a real engine, a service given 3 replicas keeps
// its one container as replica 1, and the replicas run as
// <project>-web-1..3 with compose's numbers and the service's alias;
// scaling to 1 removes 2 and 3 and leaves 1 alone; scaling to 2 adds 2
// again; a changed spec recreates both; 0 runs none. The service that
// depends on web waits for every replica.
func TestIntegrationScale(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	name := uniqueName("cvs")
	cleanupProject(t, cli, name)
	eng := dockertest.Count(cli)
	net := name + "_back"
	project := func(replicas int, v string) *docker.Project {
		p := &docker.Project{Name: name, Networks: []docker.NetworkSpec{{Name: net}}, Containers: []docker.ContainerSpec{
			{Service: "web", Image: img, Pull: docker.PullNever, Command: []string{"/app", "sleep"}, Replicas: &replicas,
				Env: map[string]string{"V": v}, Ports: []docker.Port{{ContainerPort: 8080}},
				Networks: []docker.NetworkAttachment{{Name: net}}, Labels: map[string]string{dockertest.TestLabel: "1"}},
			{Service: "worker", Image: img, Pull: docker.PullNever, Command: []string{"/app", "sleep"},
				DependsOn: []docker.Dependency{{Service: "web"}},
				Networks:  []docker.NetworkAttachment{{Name: net}}, Labels: map[string]string{dockertest.TestLabel: "1"}},
		}}
		if replicas < 0 { // unscaled
			p.Containers[0].Replicas = nil
		}
		return p
	}
	replica := func(n int) string { return fmt.Sprintf("%s-web-%d", name, n) }
	gone := func(n int) {
		t.Helper()
		_, err := cli.ContainerInspect(ctx, replica(n))
		assert.True(t, client.IsErrNotFound(err), "%s still there: %v", replica(n), err)
	}

	// The service's one container becomes replica 1 when it is scaled.
	apply(t, eng, project(-1, "1"))
	single := inspect(t, cli, name+"-web")

	rep := apply(t, eng, project(3, "1"))
	assert.Equal(t, single.ID, inspect(t, cli, replica(1)).ID, "renamed to replica 1, not recreated")
	_, err := cli.ContainerInspect(ctx, name+"-web")
	assert.True(t, client.IsErrNotFound(err), "%v", err)
	ids := map[int]string{}
	for n := 1; n <= 3; n++ {
		r := inspect(t, cli, replica(n))
		ids[n] = r.ID
		assert.True(t, r.State.Running, replica(n))
		assert.Equal(t, fmt.Sprint(n), r.Config.Labels[docker.LabelComposeContainerNumber], replica(n))
		assert.Equal(t, "web", r.Config.Labels[docker.LabelComposeService], replica(n))
		assert.Equal(t, name, r.Config.Labels[docker.LabelComposeProject], replica(n))
		require.Contains(t, r.NetworkSettings.Networks, net)
		assert.Contains(t, r.NetworkSettings.Networks[net].Aliases, "web", replica(n))
		assert.Contains(t, rep.IDs(converge.OutcomeChanged), docker.ReplicaID(name, "web", n)) // 1 renamed, 2 and 3 created
	}
	worker := inspect(t, cli, name+"-worker")
	assert.True(t, worker.State.Running)
	g := mustGraph(t, project(3, "1"), eng)
	for n := 1; n <= 3; n++ {
		assert.Contains(t, g.Dependencies(docker.ContainerID(name, "worker")), docker.ReplicaID(name, "web", n))
	}

	// Converged: nothing written.
	eng.Reset()
	rep = apply(t, eng, project(3, "1"))
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.Zero(t, eng.Writes(), "calls: %v", eng.Calls())

	// Scale to 1: 3 and 2 removed, 1 untouched.
	apply(t, eng, project(1, "1"))
	gone(3)
	gone(2)
	assert.Equal(t, ids[1], inspect(t, cli, replica(1)).ID)
	assert.Equal(t, worker.ID, inspect(t, cli, name+"-worker").ID)

	// Scale to 2: 2 added again, 1 untouched.
	apply(t, eng, project(2, "1"))
	two := inspect(t, cli, replica(2))
	assert.True(t, two.State.Running)
	assert.NotEqual(t, ids[2], two.ID, "a new container")
	assert.Equal(t, "2", two.Config.Labels[docker.LabelComposeContainerNumber])
	assert.Equal(t, ids[1], inspect(t, cli, replica(1)).ID)
	gone(3)

	// A changed spec recreates every replica.
	apply(t, eng, project(2, "2"))
	for n, old := range map[int]string{1: ids[1], 2: two.ID} {
		r := inspect(t, cli, replica(n))
		assert.NotEqual(t, old, r.ID, replica(n))
		assert.Contains(t, r.Config.Env, "V=2")
		assert.True(t, r.State.Running)
	}

	// Zero runs none; the other service stays.
	apply(t, eng, project(0, "2"))
	gone(1)
	gone(2)
	assert.True(t, inspect(t, cli, name+"-worker").State.Running)
}

// TestIntegrationScaleDownRunsPreStop: a scale-down stops its surplus
// replicas as compose does, pre_stop hooks first (through the engine's
// exec): the hook runs once per surplus replica, highest number first,
// and the others are untouched; a hook that fails keeps its replica
// running and names it, with the hook's output.
func TestIntegrationScaleDownRunsPreStop(t *testing.T) {
	compose := func(name, img string, replicas int, preStop string) *docker.Project {
		return loadFast(t, fmt.Sprintf(`name: %s
services:
  web:
    image: %s
    command: ["/app", "serve"]
    labels: {%s: "1"}
    deploy: {replicas: %d}
    pre_stop:
      - command: %s
`, name, img, dockertest.TestLabel, replicas, preStop), docker.LoadOptions{})
	}
	run := func(eng docker.Engine, p *docker.Project) error {
		g, err := p.Graph(eng)
		require.NoError(t, err)
		_, err = converge.Apply(context.Background(), g)
		return err
	}

	t.Run("hook succeeds", func(t *testing.T) {
		cli, img, name, eng := fieldsEngine(t, "cvp")
		replica := func(n int) string { return fmt.Sprintf("%s-web-%d", name, n) }
		require.NoError(t, run(eng, compose(name, img, 3, `["/app", "ok"]`)))
		kept := []string{inspect(t, cli, replica(1)).ID, inspect(t, cli, replica(2)).ID}
		eng.Reset()
		require.NoError(t, run(eng, compose(name, img, 2, `["/app", "ok"]`)))
		assert.Equal(t, 1, eng.Calls()["ContainerExecCreate"], "the hook ran once, in the surplus replica: %v", eng.Calls())
		_, err := cli.ContainerInspect(context.Background(), replica(3))
		assert.True(t, client.IsErrNotFound(err), "%s removed: %v", replica(3), err)
		assert.Equal(t, kept, []string{inspect(t, cli, replica(1)).ID, inspect(t, cli, replica(2)).ID}, "the others untouched")
	})

	t.Run("hook fails", func(t *testing.T) {
		cli, img, name, eng := fieldsEngine(t, "cvq")
		replica := func(n int) string { return fmt.Sprintf("%s-web-%d", name, n) }
		fails := `["/app", "fail", "still draining"]`
		require.NoError(t, run(eng, compose(name, img, 2, fails)))
		eng.Reset()
		err := run(eng, compose(name, img, 1, fails))
		var he *docker.HookError
		require.ErrorAs(t, err, &he, "the surplus replica's pre_stop ran and failed")
		assert.Equal(t, replica(2), he.Container)
		assert.Equal(t, "pre_stop[0]", he.Hook)
		assert.Contains(t, he.Output, "still draining")
		assert.True(t, inspect(t, cli, replica(2)).State.Running, "a failing pre_stop leaves the replica running")
		assert.Zero(t, eng.Calls()["ContainerStop"], "nothing stopped: %v", eng.Calls())
	})
}
