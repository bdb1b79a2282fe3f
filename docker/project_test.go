package docker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

const threeServices = `
name: shop
services:
  db:
    image: app:1
    command: ["/app", "sleep"]
    environment:
      DB_PASSWORD: hunter2-secret
      MODE: primary
    volumes: [data:/data]
    networks: [back]
    healthcheck:
      test: ["CMD", "/app", "health"]
      interval: 1s
  web:
    image: app:1
    command: ["/app", "serve"]
    environment:
      GREETING: hello
    ports: ["18080:8080"]
    networks:
      back:
        aliases: [www]
    restart: unless-stopped
    depends_on:
      db:
        condition: service_healthy
        x-timeout: 20s
  worker:
    image: app:1
    command: ["/app", "sleep"]
    networks: [back]
    depends_on: [db]
networks:
  back: {}
volumes:
  data: {}
`

func load(t testing.TB, yaml string) *docker.Project {
	t.Helper()
	p, err := docker.LoadCompose(context.Background(), []byte(yaml), docker.LoadOptions{})
	require.NoError(t, err)
	return p
}

func newFake() *dockertest.Engine {
	f := dockertest.New()
	f.AddImage("app:1")
	return f
}

func apply(t testing.TB, eng docker.Engine, p *docker.Project) *converge.Report {
	t.Helper()
	g, err := p.Graph(eng)
	require.NoError(t, err)
	rep, err := converge.Apply(context.Background(), g)
	require.NoError(t, err)
	return rep
}

func dry(t testing.TB, eng docker.Engine, p *docker.Project) *converge.Report {
	t.Helper()
	g, err := p.Graph(eng)
	require.NoError(t, err)
	rep, err := converge.ApplyDry(context.Background(), g)
	require.NoError(t, err)
	return rep
}

func names(cs []dockertest.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name+"="+string(c.Status))
	}
	return out
}

func TestProjectLifecycle(t *testing.T) {
	f := newFake()
	p := load(t, threeServices)

	rep := apply(t, f, p)
	assert.Equal(t, []string{"shop-db=running", "shop-web=running", "shop-worker=running"}, names(f.Containers()))
	assert.Contains(t, f.NetworkNames(), "shop_back")
	assert.Contains(t, f.VolumeNames(), "shop_data")
	assert.Len(t, rep.IDs(converge.OutcomeChanged), 5, "3 containers, 1 network, 1 volume changed: %v", rep.IDs(converge.OutcomeChanged))

	web, ok := f.Container("shop-web")
	require.True(t, ok)
	assert.Equal(t, "docker-project", strings.Split(string(docker.ProjectID("shop")), ":")[0])
	assert.Equal(t, docker.OwnerValue, web.Config.Labels[docker.LabelOwner])
	assert.Equal(t, "shop", web.Config.Labels[docker.LabelProject])
	assert.Equal(t, "web", web.Config.Labels[docker.LabelService])
	assert.Regexp(t, `^hmac-sha256:[0-9a-f]{64}$`, web.Config.Labels[docker.LabelSpecHash])
	assert.ElementsMatch(t, []string{"www", "web"}, web.Networks["shop_back"].Aliases)
	assert.Equal(t, container.RestartPolicyUnlessStopped, web.Host.RestartPolicy.Name)

	// A second apply changes nothing and only reads.
	f.ResetCalls()
	rep = apply(t, f, p)
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.Zero(t, f.WriteCalls())
	assert.LessOrEqual(t, f.TotalCalls(), 3, "calls: %v", f.Calls())

	// Change one env value: only that container is recreated, and the dry
	// run says so first, field by field, without writing.
	before := idsByName(f)
	p2 := load(t, strings.Replace(threeServices, "GREETING: hello", "GREETING: bonjour", 1))
	f.ResetCalls()
	plans := docker.Plans(dry(t, f, p2))
	assert.Zero(t, f.WriteCalls(), "dry run wrote: %v", f.Calls())
	assert.Equal(t, []docker.Plan{
		{Container: "shop-db", Action: docker.ActionNone},
		{Container: "shop-web", Action: docker.ActionRecreate, Fields: []string{"env.GREETING"}},
		{Container: "shop-worker", Action: docker.ActionNone},
	}, plans)
	rep = apply(t, f, p2)
	assert.Equal(t, []converge.ID{docker.ContainerID("shop", "web")}, rep.IDs(converge.OutcomeChanged))
	after := idsByName(f)
	assert.Equal(t, before["shop-db"], after["shop-db"])
	assert.Equal(t, before["shop-worker"], after["shop-worker"])
	assert.NotEqual(t, before["shop-web"], after["shop-web"])
	assert.Len(t, after, 3, "no temporary container left: %v", names(f.Containers()))

	// A stopped container that should run is started; one killed too.
	f.Kill("shop-worker")
	plans = docker.Plans(dry(t, f, p2))
	assert.Contains(t, plans, docker.Plan{Container: "shop-worker", Action: docker.ActionStart})
	apply(t, f, p2)
	w, _ := f.Container("shop-worker")
	assert.Equal(t, container.ContainerState("running"), w.Status)
	assert.Equal(t, after["shop-worker"], w.ID, "started, not recreated")

	// Drift behind our back: disconnected from its network -> repaired.
	f.Tamper("shop-worker", func(c *dockertest.Container) { delete(c.Networks, "shop_back") })
	plans = docker.Plans(dry(t, f, p2))
	assert.Contains(t, plans, docker.Plan{Container: "shop-worker", Action: docker.ActionRecreate, Fields: []string{"network.shop_back"}})
	apply(t, f, p2)
	w, _ = f.Container("shop-worker")
	assert.Contains(t, w.Networks, "shop_back")

	// Remove a service from the file: its container goes.
	p3 := load(t, strings.Replace(strings.Replace(threeServices, `  worker:
    image: app:1
    command: ["/app", "sleep"]
    networks: [back]
    depends_on: [db]
`, "", 1), "GREETING: hello", "GREETING: bonjour", 1))
	plans = docker.Plans(dry(t, f, p3))
	assert.Contains(t, plans, docker.Plan{Container: "shop-worker", Action: docker.ActionRemove})
	apply(t, f, p3)
	assert.Equal(t, []string{"shop-db=running", "shop-web=running"}, names(f.Containers()))

	// Clean removes what we own and nothing else.
	_, err := f.ContainerCreate(context.Background(), &container.Config{Image: "app:1"}, nil, nil, nil, "not-ours")
	require.NoError(t, err)
	_, err = f.NetworkCreate(context.Background(), "foreign", network.CreateOptions{})
	require.NoError(t, err)
	_, err = f.VolumeCreate(context.Background(), volume.CreateOptions{Name: "foreign"})
	require.NoError(t, err)
	g, err := p3.Graph(f)
	require.NoError(t, err)
	_, err = converge.Clean(context.Background(), g)
	require.NoError(t, err)
	assert.Equal(t, []string{"not-ours=created"}, names(f.Containers()))
	assert.Equal(t, []string{"bridge", "foreign"}, f.NetworkNames())
	assert.Equal(t, []string{"foreign", "shop_data"}, f.VolumeNames(), "volumes are kept by default")
	p3.RemoveVolumes = true
	g, err = p3.Graph(f)
	require.NoError(t, err)
	_, err = converge.Clean(context.Background(), g)
	require.NoError(t, err)
	assert.Equal(t, []string{"foreign"}, f.VolumeNames(), "RemoveVolumes removes them")
}

func TestGraphCopiesTheProject(t *testing.T) {
	f := newFake()
	p := &docker.Project{Name: "cp", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Env: map[string]string{"K": "1"}}}}
	g, err := p.Graph(f)
	require.NoError(t, err)
	p.Containers[0].Env["K"] = "2"
	_, err = converge.Apply(context.Background(), g)
	require.NoError(t, err)
	c, _ := f.Container("cp-a")
	assert.Equal(t, []string{"K=1"}, c.Config.Env)
}

func TestNameTakenByForeignContainer(t *testing.T) {
	f := newFake()
	_, err := f.ContainerCreate(context.Background(), &container.Config{Image: "app:1"}, nil, nil, nil, "x-a")
	require.NoError(t, err)
	g, err := (&docker.Project{Name: "x", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1"}}}).Graph(f)
	require.NoError(t, err)
	_, err = converge.Apply(context.Background(), g)
	require.ErrorIs(t, err, docker.ErrNotOwned)
	c, ok := f.Container("x-a")
	require.True(t, ok)
	assert.Empty(t, c.Config.Labels, "the foreign container is untouched")
}

func idsByName(f *dockertest.Engine) map[string]string {
	m := map[string]string{}
	for _, c := range f.Containers() {
		m[c.Name] = c.ID
	}
	return m
}

func nServices(n int) string {
	var b strings.Builder
	b.WriteString("name: many\nservices:\n")
	for i := range n {
		fmt.Fprintf(&b, "  s%02d:\n    image: app:1\n    command: [\"/app\", \"sleep\"]\n    environment: {N: \"%d\"}\n", i, i)
	}
	return b.String()
}

func TestNoopCallsConstant(t *testing.T) {
	counts := map[int]int{}
	for _, n := range []int{1, 5, 20} {
		f := newFake()
		p := load(t, nServices(n))
		apply(t, f, p)
		f.ResetCalls()
		rep := apply(t, f, p)
		require.True(t, rep.Converged())
		assert.Empty(t, rep.IDs(converge.OutcomeChanged))
		assert.Zero(t, f.WriteCalls())
		counts[n] = f.TotalCalls()
		assert.Equal(t, 0, f.Calls()[dockertest.ContainerInspect], "no per-container inspect")
	}
	assert.Equal(t, counts[1], counts[20], "calls do not grow with containers: %v", counts)
	assert.LessOrEqual(t, counts[20], 3)
}

func TestDryRunFromEmptyWritesNothing(t *testing.T) {
	f := newFake()
	p := load(t, threeServices)
	rep := dry(t, f, p)
	assert.Zero(t, f.WriteCalls(), "calls: %v", f.Calls())
	assert.Empty(t, f.Containers())
	assert.Equal(t, 0, rep.Count(converge.OutcomeFailed))
	var acts []string
	for _, pl := range docker.Plans(rep) {
		acts = append(acts, pl.String())
	}
	assert.Equal(t, []string{"shop-db: create", "shop-web: create", "shop-worker: create"}, acts)
}

func TestRunModes(t *testing.T) {
	f := newFake()
	p := &docker.Project{Name: "modes", Containers: []docker.ContainerSpec{
		{Service: "idle", Image: "app:1", Run: docker.Stopped},
		{Service: "init", Image: "app:1", Run: docker.Once},
		{Service: "main", Image: "app:1", DependsOn: []docker.Dependency{{Service: "init", Condition: docker.ServiceCompletedSuccessfully}}},
	}}
	f.OnStart = func(c *dockertest.Container) (container.ContainerState, int) {
		if c.Name == "modes-init" {
			return "exited", 0
		}
		return "running", 0
	}
	apply(t, f, p)
	assert.Equal(t, []string{"modes-idle=created", "modes-init=exited", "modes-main=running"}, names(f.Containers()))
	f.ResetCalls()
	apply(t, f, p)
	assert.Zero(t, f.WriteCalls(), "an init container that exited 0 is converged")

	// Stopped mode stops a running container.
	require.NoError(t, f.ContainerStart(context.Background(), "modes-idle", container.StartOptions{}))
	assert.Contains(t, docker.Plans(dry(t, f, p)), docker.Plan{Container: "modes-idle", Action: docker.ActionStop})
	apply(t, f, p)
	c, _ := f.Container("modes-idle")
	assert.Equal(t, container.ContainerState("exited"), c.Status)

	// A failed init is started again.
	f.Exit("modes-init", 3)
	assert.Contains(t, docker.Plans(dry(t, f, p)), docker.Plan{Container: "modes-init", Action: docker.ActionStart})
}

func TestDependsOnConditions(t *testing.T) {
	tests := []struct {
		name    string
		cond    docker.Condition
		onStart func(c *dockertest.Container) (container.ContainerState, int)
		health  *docker.Healthcheck
		wantErr error
	}{
		{name: "started", cond: docker.ServiceStarted},
		{name: "healthy", cond: docker.ServiceHealthy, health: &docker.Healthcheck{Test: []string{"CMD", "true"}}},
		{name: "no healthcheck", cond: docker.ServiceHealthy, wantErr: docker.ErrDependencyFailed},
		{name: "never healthy", cond: docker.ServiceHealthy, health: &docker.Healthcheck{Test: []string{"CMD", "true"}},
			onStart: func(c *dockertest.Container) (container.ContainerState, int) {
				c.Health = container.Starting
				return "running", 0
			}, wantErr: docker.ErrDependencyTimeout},
		{name: "completed", cond: docker.ServiceCompletedSuccessfully,
			onStart: func(c *dockertest.Container) (container.ContainerState, int) {
				if c.Name == "dep-a" {
					return "exited", 0
				}
				return "running", 0
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake()
				f.OnStart = tt.onStart
				run := docker.Running
				if tt.cond == docker.ServiceCompletedSuccessfully {
					run = docker.Once
				}
				p := &docker.Project{Name: "dep", Containers: []docker.ContainerSpec{
					{Service: "a", Image: "app:1", Healthcheck: tt.health, Run: run},
					{Service: "b", Image: "app:1", DependsOn: []docker.Dependency{{Service: "a", Condition: tt.cond, Timeout: 5 * time.Second}}},
				}}
				g, err := p.Graph(f)
				require.NoError(t, err)
				rep, err := converge.Apply(t.Context(), g)
				if tt.wantErr == nil {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, tt.wantErr)
				var de *docker.DependencyError
				require.ErrorAs(t, err, &de)
				assert.Equal(t, "dep-b", de.Container)
				assert.Equal(t, "dep-a", de.Dependency)
				r, _ := rep.Item(docker.ContainerID("dep", "b"))
				assert.Equal(t, converge.PhaseApply, r.Phase)
			})
		})
	}
}

func TestDependencyThatExitedFailsTheWaitAtOnce(t *testing.T) {
	for _, cond := range []docker.Condition{docker.ServiceStarted, docker.ServiceHealthy, docker.ServiceCompletedSuccessfully} {
		t.Run(cond.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake()
				p := &docker.Project{Name: "dep", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Run: docker.Stopped,
					Env: map[string]string{"API_TOKEN": "tok-123"}, Healthcheck: &docker.Healthcheck{Test: []string{"CMD", "true"}}}}}
				apply(t, f, p)
				f.Tamper("dep-a", func(c *dockertest.Container) {
					c.Status, c.ExitCode, c.Health = "exited", 2, container.Unhealthy
					c.Log = "starting\ntoken tok-123 refused\n"
				})
				p.Containers = append(p.Containers, docker.ContainerSpec{Service: "b", Image: "app:1",
					DependsOn: []docker.Dependency{{Service: "a", Condition: cond, Timeout: time.Hour}}})
				g, err := p.Graph(f)
				require.NoError(t, err)
				start := time.Now()
				_, err = converge.Apply(t.Context(), g)
				assert.Less(t, time.Since(start), time.Minute, "the wait ended at once, not at the timeout")
				require.ErrorIs(t, err, docker.ErrDependencyFailed)
				var de *docker.DependencyError
				require.ErrorAs(t, err, &de)
				assert.Equal(t, "a", de.Service)
				assert.Equal(t, cond, de.Condition)
				assert.Equal(t, "starting\ntoken "+docker.Redacted+" refused", de.Log)
				assert.NotContains(t, de.Error(), "tok-123")
				c, _ := f.Container("dep-b")
				assert.NotEqual(t, container.ContainerState("running"), c.Status, "b was not started")
			})
		})
	}
}

func TestContainerThatExitsAfterStartFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.OnStart = func(c *dockertest.Container) (container.ContainerState, int) {
			c.Log = "no config file\n"
			return "exited", 1
		}
		p := &docker.Project{Name: "ex", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1"}}}
		g, err := p.Graph(f)
		require.NoError(t, err)
		_, err = converge.Apply(t.Context(), g)
		require.ErrorIs(t, err, docker.ErrContainerFailed)
		var ce *docker.ContainerError
		require.ErrorAs(t, err, &ce)
		got := docker.ContainerError{Container: ce.Container, Service: ce.Service, Status: ce.Status, ExitCode: ce.ExitCode, Health: ce.Health, Log: ce.Log}
		assert.Equal(t, docker.ContainerError{Container: "ex-a", Service: "a", Status: "exited", ExitCode: 1, Log: "no config file"}, got)
	})
}

func TestPreflightKeepsTheKillThenDownloadContainer(t *testing.T) {
	f := newFake()
	p := &docker.Project{Name: "ktd", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Update: docker.KillThenDownload}}}
	apply(t, f, p)
	before, _ := f.Container("ktd-a")
	p.Containers[0].Image = "app:2" // not in the registry
	for _, run := range []func(context.Context, *converge.Graph) (*converge.Report, error){converge.ApplyDry, converge.Apply} {
		g, err := p.Graph(f)
		require.NoError(t, err)
		_, err = run(context.Background(), g)
		var ie *docker.ImageError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, "app:2", ie.Ref)
		assert.Equal(t, []string{"a"}, ie.Services)
		var pe *docker.PullError
		assert.ErrorAs(t, err, &pe)
		after, ok := f.Container("ktd-a")
		require.True(t, ok, "the old container was not removed")
		assert.Equal(t, before.ID, after.ID)
	}
}

// failingCreate is an engine whose container creation fails.
type failingCreate struct{ *dockertest.Engine }

func (f failingCreate) ContainerCreate(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
	return container.CreateResponse{}, errors.New("Error response from daemon: no space left on device")
}

func TestErrorMessagesReadOnceOnTheFake(t *testing.T) {
	foreign := newFake()
	_, err := foreign.ContainerCreate(context.Background(), &container.Config{Image: "app:1"}, nil, nil, nil, "m-a")
	require.NoError(t, err)
	tests := []struct {
		name   string
		eng    docker.Engine
		want   error
		prefix string
	}{
		{"create fails", failingCreate{newFake()}, nil, "docker: container m-a: create: "},
		{"name taken", foreign, docker.ErrNotOwned, "docker: container m-a: create: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &docker.Project{Name: "m", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1"}}}
			rep, err := converge.Apply(context.Background(), mustGraph(t, p, tt.eng))
			require.Error(t, err)
			if tt.want != nil {
				require.ErrorIs(t, err, tt.want)
			}
			r, _ := rep.Item(docker.ContainerID("m", "a"))
			var ie *converge.ItemError
			require.ErrorAs(t, r.Err, &ie)
			assertReadsOnce(t, ie.Err, "m-a")
			assert.True(t, strings.HasPrefix(ie.Err.Error(), tt.prefix), ie.Err.Error())
		})
	}
}

func mustGraph(t *testing.T, p *docker.Project, eng docker.Engine) *converge.Graph {
	t.Helper()
	g, err := p.Graph(eng)
	require.NoError(t, err)
	return g
}

// leakyEngine echoes the create request in its error, as a careless
// engine or proxy might.
type leakyEngine struct{ *dockertest.Engine }

func (l leakyEngine) ContainerCreate(ctx context.Context, cfg *container.Config, h *container.HostConfig, n *network.NetworkingConfig, pl *ocispec.Platform, name string) (container.CreateResponse, error) {
	return container.CreateResponse{}, fmt.Errorf("bad request: env %v: %w", cfg.Env, errors.ErrUnsupported)
}

func TestSecretsNeverLeak(t *testing.T) {
	const secret = "hunter2-secret"
	out := transcript(t, threeServices, 2, newFake(), leakyEngine{newFake()})
	assert.Contains(t, out, docker.Redacted, "the leaky engine's error was redacted")
	assert.Contains(t, out, "unsupported operation", "errors still carried")
	assert.NotContains(t, out, secret)
}

func TestRedactedErrorKeepsIs(t *testing.T) {
	g, err := load(t, threeServices).Graph(leakyEngine{newFake()})
	require.NoError(t, err)
	_, err = converge.Apply(context.Background(), g)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.NotContains(t, err.Error(), "hunter2")
}

func TestFaultInjectionConverges(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			f := newFake()
			p := load(t, threeServices)
			f.FailWrites(0.3, seed)
			converged := false
			for pass := 0; pass < 60 && !converged; pass++ {
				g, err := p.Graph(f)
				require.NoError(t, err)
				rep, err := converge.Apply(context.Background(), g)
				converged = err == nil && len(rep.IDs(converge.OutcomeChanged)) == 0
				if err != nil {
					require.ErrorIs(t, err, dockertest.ErrTransient)
				}
			}
			require.True(t, converged, "converged under faults")
			// Then change a spec under faults: still converges, no temp left.
			p2 := load(t, strings.Replace(threeServices, "MODE: primary", "MODE: replica", 1))
			converged = false
			for pass := 0; pass < 60 && !converged; pass++ {
				g, err := p2.Graph(f)
				require.NoError(t, err)
				rep, err := converge.Apply(context.Background(), g)
				converged = err == nil && len(rep.IDs(converge.OutcomeChanged)) == 0
			}
			require.True(t, converged)
			assert.Equal(t, []string{"shop-db=running", "shop-web=running", "shop-worker=running"}, names(f.Containers()))
		})
	}
}

func TestUpdateStrategies(t *testing.T) {
	tests := []struct {
		strategy docker.UpdateStrategy
		want     []string // order of the key calls
	}{
		{docker.DownloadThenKill, []string{dockertest.ImagePull, dockertest.ContainerCreate, dockertest.ContainerStop, dockertest.ContainerRemove, dockertest.ContainerRename, dockertest.ContainerStart}},
		{docker.KillThenDownload, []string{dockertest.ContainerStop, dockertest.ContainerRemove, dockertest.ImagePull, dockertest.ContainerCreate, dockertest.ContainerStart}},
	}
	for _, tt := range tests {
		t.Run(tt.strategy.String(), func(t *testing.T) {
			f := newFake()
			f.Pullable("app:2", 100, 50)
			p := &docker.Project{Name: "up", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Update: tt.strategy}}}
			apply(t, f, p)
			p.Containers[0].Image = "app:2"
			f.ResetCalls()
			apply(t, f, p)
			var key []string
			for _, c := range f.Log() {
				switch c {
				case dockertest.ImagePull, dockertest.ContainerCreate, dockertest.ContainerStop, dockertest.ContainerRemove, dockertest.ContainerRename, dockertest.ContainerStart:
					key = append(key, c)
				}
			}
			assert.Equal(t, tt.want, key)
			c, _ := f.Container("up-a")
			assert.Equal(t, "app:2", c.Config.Image)
		})
	}
}

func TestImagePullProgressAndRemoval(t *testing.T) {
	f := dockertest.New()
	f.Pullable("busybox:1", 1000, 3000)
	im := docker.NewImage(f, "busybox:1", docker.PullMissing)
	var (
		mu   sync.Mutex
		last converge.Event
	)
	w, err := converge.NewWalker(converge.WalkerConfig{Observer: converge.ObserverFunc(func(e converge.Event) {
		if e.Kind == converge.EventApplying && e.Total > 0 {
			mu.Lock()
			last = e
			mu.Unlock()
		}
	})})
	require.NoError(t, err)
	g := converge.NewGraph()
	g.Add(converge.Wrap[docker.ImageState](im), converge.Present)
	rep, err := w.Apply(context.Background(), g)
	require.NoError(t, err)
	r, _ := rep.Item(im.ID())
	assert.True(t, r.After.(docker.ImageState).Present)
	mu.Lock()
	assert.Equal(t, 4000, last.Done)
	assert.Equal(t, 4000, last.Total)
	mu.Unlock()

	// Absent while a container uses it: refused.
	_, err = f.ContainerCreate(context.Background(), &container.Config{Image: "busybox:1"}, nil, nil, nil, "user")
	require.NoError(t, err)
	_, err = w.Clean(context.Background(), g)
	require.ErrorIs(t, err, docker.ErrImageInUse)
	require.NoError(t, f.ContainerRemove(context.Background(), "user", container.RemoveOptions{}))
	_, err = w.Clean(context.Background(), g)
	require.NoError(t, err)

	// PullNever with a missing image is a typed error.
	g2 := converge.NewGraph()
	g2.Add(converge.Wrap[docker.ImageState](docker.NewImage(f, "nothere:1", docker.PullNever)), converge.Present)
	_, err = converge.Apply(context.Background(), g2)
	require.ErrorIs(t, err, docker.ErrImageMissing)
	// A pull the registry refuses is a *PullError.
	g3 := converge.NewGraph()
	g3.Add(converge.Wrap[docker.ImageState](docker.NewImage(f, "nothere:1", docker.PullMissing)), converge.Present)
	_, err = converge.Apply(context.Background(), g3)
	var pe *docker.PullError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "nothere:1", pe.Ref)
}

func TestStandaloneNetworkAndVolume(t *testing.T) {
	f := dockertest.New()
	n := docker.NewNetwork(f, "solo", docker.NetworkSpec{Name: "solo-net", Labels: map[string]string{"k": "v"}})
	v := docker.NewVolume(f, "solo", docker.VolumeSpec{Name: "solo-vol"})
	g := converge.NewGraph()
	g.Add(converge.Wrap[docker.NetworkState](n), converge.Present)
	g.Add(converge.Wrap[docker.VolumeState](v), converge.Present)
	_, err := converge.Apply(context.Background(), g)
	require.NoError(t, err)
	assert.Contains(t, f.NetworkNames(), "solo-net")
	assert.Contains(t, f.VolumeNames(), "solo-vol")
	f.ResetCalls()
	rep, err := converge.Apply(context.Background(), g)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Count(converge.OutcomeUnchanged))
	assert.Zero(t, f.WriteCalls())
	_, err = converge.Clean(context.Background(), g)
	require.NoError(t, err)
	assert.NotContains(t, f.NetworkNames(), "solo-net")
	assert.Empty(t, f.VolumeNames())
}

func TestGraphRejectsBadSpecs(t *testing.T) {
	f := newFake()
	tests := []struct {
		name  string
		p     docker.Project
		field string
	}{
		{"no name", docker.Project{}, "Name"},
		{"no image", docker.Project{Name: "x", Containers: []docker.ContainerSpec{{Service: "a"}}}, "Image"},
		{"no service", docker.Project{Name: "x", Containers: []docker.ContainerSpec{{Image: "i"}}}, "Service"},
		{"duplicate", docker.Project{Name: "x", Containers: []docker.ContainerSpec{{Service: "a", Image: "i"}, {Service: "a", Image: "i"}}}, "Service"},
		{"unknown dep", docker.Project{Name: "x", Containers: []docker.ContainerSpec{{Service: "a", Image: "i", DependsOn: []docker.Dependency{{Service: "b"}}}}}, "DependsOn"},
		{"bad mount", docker.Project{Name: "x", Containers: []docker.ContainerSpec{{Service: "a", Image: "i", Mounts: []docker.Mount{{Type: "tmpfs", Target: "/t"}}}}}, "Mounts[0].Type"},
		{"bad port", docker.Project{Name: "x", Containers: []docker.ContainerSpec{{Service: "a", Image: "i", Ports: []docker.Port{{}}}}}, "Ports[0].ContainerPort"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.p.Graph(f)
			require.ErrorIs(t, err, docker.ErrInvalidSpec)
			var se *docker.SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tt.field, se.Field)
		})
	}
	_, err := (&docker.Project{Name: "x"}).Graph(nil)
	require.ErrorIs(t, err, docker.ErrInvalidSpec)
	assert.Zero(t, f.TotalCalls())
}

func TestWatchEventsTriggers(t *testing.T) {
	f := newFake()
	p := load(t, threeServices)
	apply(t, f, p)
	got := make(chan docker.Event, 16)
	stop, err := docker.WatchEvents(context.Background(), f, "shop", func(e docker.Event) { got <- e })
	require.NoError(t, err)
	defer stop()
	// Subscribed once WatchEvents returns: the next change is seen.
	f.Kill("shop-web")
	e := <-got
	assert.Equal(t, "die", e.Action)
	assert.Equal(t, "shop-web", e.Container)
	assert.Equal(t, "web", e.Service)
	// The trigger leads to a pass that brings it back.
	apply(t, f, p)
	c, _ := f.Container("shop-web")
	assert.Equal(t, container.ContainerState("running"), c.Status)
	stop()
	stop()
	_, err = docker.WatchEvents(context.Background(), f, "shop", nil)
	require.ErrorIs(t, err, docker.ErrInvalidSpec)
}

func TestLeftoverNextToAStoppedContainerIsRemoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		p := &docker.Project{Name: "lo", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1"}}}
		apply(t, f, p)
		c, _ := f.Container("lo-a")
		_, err := f.ContainerCreate(t.Context(), &c.Config, &c.Host, nil, nil, docker.TempName("lo-a"))
		require.NoError(t, err)
		f.Exit("lo-a", 0)
		assert.Contains(t, docker.Plans(dry(t, f, p)), docker.Plan{Container: "lo-a", Action: docker.ActionStart})
		apply(t, f, p)
		assert.Equal(t, []string{"lo-a=running"}, names(f.Containers()))
		assert.Equal(t, c.ID, idsByName(f)["lo-a"], "started, not recreated")
	})
}
