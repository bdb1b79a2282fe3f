package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// lifecycleProject is a project of the test image with short waits, its
// objects labelled for cleanup.
func lifecycleProject(name string, specs ...docker.ContainerSpec) *docker.Project {
	for i := range specs {
		if specs[i].Labels == nil {
			specs[i].Labels = map[string]string{}
		}
		specs[i].Labels[dockertest.TestLabel] = "1"
		if specs[i].StopTimeout == nil {
			d := time.Second
			specs[i].StopTimeout = &d
		}
	}
	return &docker.Project{Name: name, Containers: specs, PollInterval: 100 * time.Millisecond}
}

func applyGraph(t *testing.T, eng docker.Engine, p *docker.Project, run func(context.Context, *converge.Graph) (*converge.Report, error)) (*converge.Report, error) {
	t.Helper()
	g, err := p.Graph(eng)
	require.NoError(t, err)
	return run(context.Background(), g)
}

// projectObjects lists what carries the project label on the engine:
// containers, networks and volumes by name.
func projectObjects(t *testing.T, cli *client.Client, project string) []string {
	t.Helper()
	ctx := context.Background()
	f := filters.NewArgs(filters.Arg("label", docker.LabelProject+"="+project))
	var out []string
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	require.NoError(t, err)
	for _, c := range cs {
		out = append(out, "container "+strings.TrimPrefix(c.Names[0], "/"))
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	require.NoError(t, err)
	for _, n := range ns {
		out = append(out, "network "+n.Name)
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	require.NoError(t, err)
	for _, v := range vs.Volumes {
		out = append(out, "volume "+v.Name)
	}
	return out
}

// assertReadsOnce checks that an error message carries one package prefix,
// no repeated step and the object once.
func assertReadsOnce(t *testing.T, err error, object string) {
	t.Helper()
	msg := err.Error()
	first, _, _ := strings.Cut(msg, "\n")
	assert.Equal(t, 1, strings.Count(msg, "docker: "), "one prefix: %q", msg)
	assert.Equal(t, 1, strings.Count(first, object), "object named once: %q", msg)
	for _, step := range []string{"create: create", "start: start", "remove: remove", "stop: stop", "pull: pull"} {
		assert.NotContains(t, msg, step, "no repeated step: %q", msg)
	}
	assert.NotContains(t, msg, "_converge_tmp", "no temporary name: %q", msg)
}

func TestIntegrationPausedContainerIsUnpaused(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	proj := uniqueName("cvp")
	cleanupProject(t, cli, proj)
	p := lifecycleProject(proj, docker.ContainerSpec{Service: "app", Image: img, Command: []string{"/app", "sleep"}})
	_, err := applyGraph(t, cli, p, converge.Apply)
	require.NoError(t, err)
	name := proj + "-app"
	require.NoError(t, cli.ContainerPause(ctx, name))

	rep, err := applyGraph(t, cli, p, converge.ApplyDry)
	require.NoError(t, err)
	r, ok := rep.Item(docker.ContainerID(proj, "app"))
	require.True(t, ok)
	assert.True(t, r.Before.(docker.ContainerState).Paused, "the state shows the pause")
	assert.True(t, r.Decision.Required(), "a paused container is not converged")
	assert.Contains(t, docker.Plans(rep), docker.Plan{Container: name, Action: docker.ActionUnpause})

	rep, err = applyGraph(t, cli, p, converge.Apply)
	require.NoError(t, err)
	assert.Equal(t, []converge.ID{docker.ContainerID(proj, "app")}, rep.IDs(converge.OutcomeChanged))
	st := inspect(t, cli, name).State
	assert.True(t, st.Running)
	assert.False(t, st.Paused, "unpaused")
}

func TestIntegrationInterruptedUpIsFinished(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	spec := func(greeting string) docker.ContainerSpec {
		return docker.ContainerSpec{Service: "app", Image: img, Command: []string{"/app", "sleep"}, Env: map[string]string{"GREETING": greeting}}
	}

	t.Run("killed between create and start", func(t *testing.T) {
		proj := uniqueName("cvu")
		cleanupProject(t, cli, proj)
		stopped := spec("hello")
		stopped.Run = docker.Stopped
		_, err := applyGraph(t, cli, lifecycleProject(proj, stopped), converge.Apply)
		require.NoError(t, err)
		created := inspect(t, cli, proj+"-app")
		require.Equal(t, container.ContainerState("created"), created.State.Status)

		_, err = applyGraph(t, cli, lifecycleProject(proj, spec("hello")), converge.Apply)
		require.NoError(t, err)
		after := inspect(t, cli, proj+"-app")
		assert.Equal(t, created.ID, after.ID, "the created container is adopted")
		assert.True(t, after.State.Running)
	})

	// leftovers recreates the state a recreate of v1 -> v2 leaves when it
	// is killed after creating the new container under the temporary name:
	// keepOld says whether the old container was already removed.
	leftovers := func(t *testing.T, proj string, keepOld bool) (tmpID string) {
		_, err := applyGraph(t, cli, lifecycleProject(proj, spec("v1")), converge.Apply)
		require.NoError(t, err)
		old := inspect(t, cli, proj+"-app")
		_, err = applyGraph(t, cli, lifecycleProject(proj, spec("v2")), converge.Apply)
		require.NoError(t, err)
		tmp := proj + "-app_converge_tmp"
		require.NoError(t, cli.ContainerStop(ctx, proj+"-app", container.StopOptions{}))
		require.NoError(t, cli.ContainerRename(ctx, proj+"-app", tmp))
		if keepOld {
			// The old container, as the engine had it, with its labels.
			_, err := cli.ContainerCreate(ctx, old.Config, old.HostConfig, nil, nil, proj+"-app")
			require.NoError(t, err)
		}
		return inspect(t, cli, tmp).ID
	}
	for _, keepOld := range []bool{false, true} {
		name := "killed mid-recreate, old removed"
		if keepOld {
			name = "killed mid-recreate, old still there"
		}
		t.Run(name, func(t *testing.T) {
			proj := uniqueName("cvu")
			cleanupProject(t, cli, proj)
			tmpID := leftovers(t, proj, keepOld)
			p := lifecycleProject(proj, spec("v2"))
			rep, err := applyGraph(t, cli, p, converge.ApplyDry)
			require.NoError(t, err)
			want := docker.Plan{Container: proj + "-app", Action: docker.ActionAdopt}
			if keepOld {
				want = docker.Plan{Container: proj + "-app", Action: docker.ActionRecreate, Fields: []string{"env.GREETING"}}
			}
			assert.Contains(t, docker.Plans(rep), want)

			_, err = applyGraph(t, cli, p, converge.Apply)
			require.NoError(t, err)
			after := inspect(t, cli, proj+"-app")
			assert.Equal(t, tmpID, after.ID, "the container under the temporary name is adopted")
			assert.True(t, after.State.Running)
			assert.Contains(t, after.Config.Env, "GREETING=v2")
			assert.Equal(t, []string{"container " + proj + "-app"}, projectObjects(t, cli, proj), "nothing else is left")
		})
	}
}

func TestIntegrationPreflightMissingImage(t *testing.T) {
	cli, img := realEngine(t)
	for name, pull := range map[string]docker.PullPolicy{"never": docker.PullNever, "missing": docker.PullMissing} {
		t.Run(name, func(t *testing.T) {
			proj := uniqueName("cvm")
			cleanupProject(t, cli, proj)
			missing := "converge-test/missing:" + proj
			p := lifecycleProject(proj,
				docker.ContainerSpec{Service: "ok", Image: img, Command: []string{"/app", "sleep"},
					Networks: []docker.NetworkAttachment{{Name: proj + "-net"}},
					Mounts:   []docker.Mount{{Type: "volume", Source: proj + "-vol", Target: "/data"}}},
				docker.ContainerSpec{Service: "a", Image: missing, Pull: pull},
				docker.ContainerSpec{Service: "b", Image: missing, Pull: pull, Update: docker.KillThenDownload},
			)
			p.Networks = []docker.NetworkSpec{{Name: proj + "-net", Labels: map[string]string{dockertest.TestLabel: "1"}}}
			p.Volumes = []docker.VolumeSpec{{Name: proj + "-vol", Labels: map[string]string{dockertest.TestLabel: "1"}}}

			checkErr := func(t *testing.T, err error) {
				t.Helper()
				var ie *docker.ImageError
				require.ErrorAs(t, err, &ie)
				assert.Equal(t, missing, ie.Ref)
				assert.Equal(t, []string{"a", "b"}, ie.Services)
				if pull == docker.PullNever {
					assert.ErrorIs(t, err, docker.ErrImageMissing)
				}
				assertReadsOnce(t, ie, missing)
			}

			_, err := applyGraph(t, cli, p, converge.ApplyDry)
			checkErr(t, err)

			_, err = applyGraph(t, cli, p, converge.Apply)
			checkErr(t, err)
			assert.Empty(t, projectObjects(t, cli, proj), "nothing was created")
		})
	}
}

func TestIntegrationCleanRemovesOrphansFirstAndKeepsVolumes(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	proj := uniqueName("cvc")
	cleanupProject(t, cli, proj)
	net, vol := proj+"-net", proj+"-vol"
	p := lifecycleProject(proj,
		docker.ContainerSpec{Service: "db", Image: img, Command: []string{"/app", "sleep"},
			Networks: []docker.NetworkAttachment{{Name: net}}, Mounts: []docker.Mount{{Type: "volume", Source: vol, Target: "/data"}}},
		docker.ContainerSpec{Service: "web", Image: img, Command: []string{"/app", "sleep"},
			Networks: []docker.NetworkAttachment{{Name: net}}, DependsOn: []docker.Dependency{{Service: "db"}}},
	)
	p.Networks = []docker.NetworkSpec{{Name: net, Labels: map[string]string{dockertest.TestLabel: "1"}}}
	p.Volumes = []docker.VolumeSpec{{Name: vol, Labels: map[string]string{dockertest.TestLabel: "1"}}}
	_, err := applyGraph(t, cli, p, converge.Apply)
	require.NoError(t, err)

	// An orphan: a running container of the project the spec no longer
	// names, on the project's network and volume.
	orphan := proj + "-old"
	stop := 1
	_, err = cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"/app", "sleep"}, StopTimeout: &stop,
		Labels: map[string]string{docker.LabelOwner: docker.OwnerValue, docker.LabelProject: proj, docker.LabelService: "old", dockertest.TestLabel: "1"}},
		&container.HostConfig{NetworkMode: container.NetworkMode(net), Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/data"}}},
		nil, nil, orphan)
	require.NoError(t, err)
	require.NoError(t, cli.ContainerStart(ctx, orphan, container.StartOptions{}))

	_, err = applyGraph(t, cli, p, converge.Clean)
	require.NoError(t, err)
	assert.Equal(t, []string{"volume " + vol}, projectObjects(t, cli, proj), "containers and network gone, the volume kept")

	p.RemoveVolumes = true
	_, err = applyGraph(t, cli, p, converge.Clean)
	require.NoError(t, err)
	assert.Empty(t, projectObjects(t, cli, proj), "RemoveVolumes removes the volume")
}

func TestIntegrationFailureShowsLogTail(t *testing.T) {
	cli, img := realEngine(t)
	const (
		secret    = "s3cret-in-the-log"
		urlPass   = "url-pw-in-the-log"
		webSecret = "web-token-in-db-log" // a secret of web only, which db's log quotes
	)
	var many []string
	for i := range 30 {
		many = append(many, "line "+string(rune('a'+i%26))+strings.Repeat("x", i))
	}

	t.Run("own start", func(t *testing.T) {
		proj := uniqueName("cvf")
		cleanupProject(t, cli, proj)
		p := lifecycleProject(proj, docker.ContainerSpec{Service: "app", Image: img, Env: map[string]string{"DB_PASSWORD": secret},
			Command: append(append([]string{"/app", "fail"}, many...), "password is $DB_PASSWORD",
				"dsn postgres://app:"+urlPass+"@db/app", "boom: cannot open database")})
		p.PollInterval = time.Second // the container has long exited when it is looked at
		_, err := applyGraph(t, cli, p, converge.Apply)
		require.ErrorIs(t, err, docker.ErrContainerFailed)
		var ce *docker.ContainerError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, proj+"-app", ce.Container)
		assert.Equal(t, "app", ce.Service)
		assert.Equal(t, 3, ce.ExitCode)
		assert.Contains(t, ce.Log, "boom: cannot open database")
		assert.NotContains(t, ce.Log, "line a\n", "only the tail")
		assert.LessOrEqual(t, strings.Count(ce.Log, "\n"), 20)
		assert.Contains(t, err.Error(), "boom: cannot open database")
		assert.NotContains(t, err.Error(), secret)
		assert.Contains(t, err.Error(), docker.Redacted)
		assert.Contains(t, ce.Log, "dsn postgres://app:"+docker.Redacted+"@db/app")
		assertNoSecret(t, err, secret, urlPass)
		assertReadsOnce(t, ce, proj+"-app")
	})

	t.Run("dependency turns unhealthy", func(t *testing.T) {
		proj := uniqueName("cvf")
		cleanupProject(t, cli, proj)
		p := lifecycleProject(proj,
			docker.ContainerSpec{Service: "db", Image: img, Env: map[string]string{"DB_PASSWORD": secret},
				Command:     []string{"/app", "say", "connecting with $DB_PASSWORD", "peer token " + webSecret, "disk full"},
				Healthcheck: &docker.Healthcheck{Test: []string{"CMD", "/app", "exit", "1"}, Interval: time.Second, Timeout: time.Second, Retries: 1}},
			docker.ContainerSpec{Service: "web", Image: img, Command: []string{"/app", "sleep"}, Env: map[string]string{"API_TOKEN": webSecret},
				DependsOn: []docker.Dependency{{Service: "db", Condition: docker.ServiceHealthy, Timeout: 2 * time.Minute}}},
		)
		start := time.Now()
		_, err := applyGraph(t, cli, p, converge.Apply)
		assert.Less(t, time.Since(start), time.Minute, "the wait ended when db turned unhealthy")
		require.ErrorIs(t, err, docker.ErrDependencyFailed)
		var de *docker.DependencyError
		require.ErrorAs(t, err, &de)
		assert.Equal(t, proj+"-web", de.Container)
		assert.Equal(t, "db", de.Service)
		assert.Equal(t, docker.ServiceHealthy, de.Condition)
		assert.Contains(t, de.Log, "disk full")
		assert.Contains(t, de.Log, "peer token "+docker.Redacted, "web's secret is scrubbed from the error about web")
		assertNoSecret(t, err, secret, webSecret)
		assert.NotContains(t, err.Error(), secret)
		assert.Contains(t, err.Error(), "disk full")
		assertReadsOnce(t, de, proj+"-web")
	})

	t.Run("dependency wait times out", func(t *testing.T) {
		proj := uniqueName("cvf")
		cleanupProject(t, cli, proj)
		p := lifecycleProject(proj,
			docker.ContainerSpec{Service: "db", Image: img, Command: []string{"/app", "say", "still starting"},
				Healthcheck: &docker.Healthcheck{Test: []string{"CMD", "/app", "ok"}, Interval: time.Hour, StartPeriod: time.Hour}},
			docker.ContainerSpec{Service: "web", Image: img, Command: []string{"/app", "sleep"},
				DependsOn: []docker.Dependency{{Service: "db", Condition: docker.ServiceHealthy, Timeout: time.Second}}},
		)
		_, err := applyGraph(t, cli, p, converge.Apply)
		require.ErrorIs(t, err, docker.ErrDependencyTimeout)
		var de *docker.DependencyError
		require.ErrorAs(t, err, &de)
		assert.Equal(t, "db", de.Service)
		assert.Equal(t, docker.ServiceHealthy, de.Condition)
		assert.Contains(t, err.Error(), "service_healthy")
		assert.Contains(t, de.Log, "still starting")
		assertReadsOnce(t, de, proj+"-web")
	})
}
