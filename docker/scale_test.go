package docker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// namesEngine records, in order, the names the walk renamed containers to
// and the containers it removed.
type namesEngine struct {
	*dockertest.Engine
	mu      sync.Mutex
	renamed []string
	removed []string
}

func (e *namesEngine) ContainerRename(ctx context.Context, id, name string) error {
	e.mu.Lock()
	e.renamed = append(e.renamed, name)
	e.mu.Unlock()
	return e.Engine.ContainerRename(ctx, id, name)
}

func (e *namesEngine) ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error {
	name := id
	if c, ok := e.Container(id); ok {
		name = c.Name
	}
	e.mu.Lock()
	e.removed = append(e.removed, name)
	e.mu.Unlock()
	return e.Engine.ContainerRemove(ctx, id, opts)
}

func (e *namesEngine) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.renamed, e.removed = nil, nil
}

func scaled(n int, env string) string {
	return fmt.Sprintf(`
name: shop
services:
  web:
    image: app:1
    command: ["/app", "serve"]
    environment: {GREETING: %s}
    ports: ["18080-18099:8080", "9090"]
    networks: [back]
    deploy: {replicas: %d}
  worker:
    image: app:1
    command: ["/app", "sleep"]
    networks: [back]
    depends_on: [web]
networks:
  back: {}
`, env, n)
}

// replicaNames are the running containers of shop's web service.
func replicaNames(f *dockertest.Engine) []string {
	var out []string
	for _, c := range f.Containers() {
		if c.Config.Labels[docker.LabelService] == "web" {
			out = append(out, c.Name+"="+string(c.Status))
		}
	}
	return out
}

// TestScaleUpAndDown: replicas are named and numbered as compose names
// them; scaling up adds the missing numbers, scaling down removes the
// highest first and leaves the others untouched, a changed spec recreates
// every replica from number 1, and 0 runs none.
func TestScaleUpAndDown(t *testing.T) {
	f := &namesEngine{Engine: newFake()}
	p := load(t, scaled(3, "hello"))
	require.NotNil(t, p.Containers[0].Replicas)
	assert.Equal(t, 3, *p.Containers[0].Replicas)
	assert.Nil(t, p.Containers[1].Replicas, "a service without scale keeps its one container")

	rep := apply(t, f, p)
	assert.Equal(t, []string{"shop-web-1=running", "shop-web-2=running", "shop-web-3=running"}, replicaNames(f.Engine))
	for n := 1; n <= 3; n++ {
		name := fmt.Sprintf("shop-web-%d", n)
		c, ok := f.Container(name)
		require.True(t, ok, name)
		assert.Equal(t, fmt.Sprint(n), c.Config.Labels[docker.LabelComposeContainerNumber], name)
		assert.Equal(t, "web", c.Config.Labels[docker.LabelComposeService], name)
		assert.Equal(t, "shop", c.Config.Labels[docker.LabelComposeProject], name)
		assert.Contains(t, c.Networks["shop_back"].Aliases, "web", "the service name resolves to every replica")
		assert.Contains(t, rep.IDs(converge.OutcomeChanged), docker.ReplicaID("shop", "web", n))
	}
	w, ok := f.Container("shop-worker")
	require.True(t, ok, "an unscaled service keeps its name")
	assert.Equal(t, "1", w.Config.Labels[docker.LabelComposeContainerNumber])

	// Scale up past 9: the missing numbers are added, nothing else moves.
	before := idsByName(f.Engine)
	f.reset()
	apply(t, f, load(t, scaled(12, "hello")))
	assert.Len(t, replicaNames(f.Engine), 12)
	assert.Empty(t, f.removed)
	for n := 1; n <= 3; n++ {
		name := fmt.Sprintf("shop-web-%d", n)
		assert.Equal(t, before[name], idsByName(f.Engine)[name], "%s untouched", name)
	}

	// Scale down: the highest numbers first (12 before 9, by number, not
	// by name), the rest untouched; the dry run says so first.
	before = idsByName(f.Engine)
	f.reset()
	plans := docker.Plans(dry(t, f, load(t, scaled(1, "hello"))))
	assert.Contains(t, plans, docker.Plan{Container: "shop-web-12", Action: docker.ActionRemove})
	assert.Contains(t, plans, docker.Plan{Container: "shop-web-1", Action: docker.ActionNone})
	apply(t, f, load(t, scaled(1, "hello")))
	var want []string
	for n := 12; n >= 2; n-- {
		want = append(want, fmt.Sprintf("shop-web-%d", n))
	}
	assert.Equal(t, want, f.removed)
	assert.Equal(t, []string{"shop-web-1=running"}, replicaNames(f.Engine))
	assert.Equal(t, before["shop-web-1"], idsByName(f.Engine)["shop-web-1"])
	assert.Equal(t, before["shop-worker"], idsByName(f.Engine)["shop-worker"])

	// Up again: number 2 comes back.
	f.reset()
	apply(t, f, load(t, scaled(2, "hello")))
	assert.Equal(t, []string{"shop-web-1=running", "shop-web-2=running"}, replicaNames(f.Engine))
	assert.Equal(t, before["shop-web-1"], idsByName(f.Engine)["shop-web-1"])
	assert.Empty(t, f.removed)

	// A changed spec recreates every replica, one after the other from 1
	// (download-then-kill: each renamed into place after its old one went).
	before = idsByName(f.Engine)
	f.reset()
	apply(t, f, load(t, scaled(2, "bonjour")))
	assert.Equal(t, []string{"shop-web-1", "shop-web-2"}, f.renamed)
	after := idsByName(f.Engine)
	assert.NotEqual(t, before["shop-web-1"], after["shop-web-1"])
	assert.NotEqual(t, before["shop-web-2"], after["shop-web-2"])
	assert.Equal(t, []string{"shop-web-1=running", "shop-web-2=running"}, replicaNames(f.Engine))

	// Zero runs none.
	f.reset()
	apply(t, f, load(t, scaled(0, "bonjour")))
	assert.Empty(t, replicaNames(f.Engine))
	assert.Equal(t, []string{"shop-web-2", "shop-web-1"}, f.removed)
	_, ok = f.Container("shop-worker")
	assert.True(t, ok)

	// Cleaning removes the highest number first too.
	p = load(t, scaled(3, "bonjour"))
	apply(t, f, p)
	f.reset()
	g, err := p.Graph(f)
	require.NoError(t, err)
	_, err = converge.Clean(context.Background(), g)
	require.NoError(t, err)
	assert.Equal(t, []string{"shop-worker", "shop-web-3", "shop-web-2", "shop-web-1"}, f.removed)
}

// TestScaledDependencies: a service that depends on a scaled one comes
// after, and waits for, every replica; one that shares a namespace or
// volumes uses replica 1.
func TestScaledDependencies(t *testing.T) {
	three := 3
	p := &docker.Project{Name: "d", Containers: []docker.ContainerSpec{
		{Service: "db", Image: "app:1", Replicas: &three},
		{Service: "api", Image: "app:1", DependsOn: []docker.Dependency{{Service: "db"}}, Links: []string{"db:database"}},
		{Service: "side", Image: "app:1", IPC: "service:db", VolumesFrom: []string{"db:ro"}},
	}}
	f := newFake()
	g := mustGraph(t, p, f)
	deps := g.Dependencies(docker.ContainerID("d", "api"))
	for n := 1; n <= 3; n++ {
		assert.Contains(t, deps, docker.ReplicaID("d", "db", n))
	}
	assert.Contains(t, g.Dependencies(docker.ReplicaID("d", "db", 3)), docker.ReplicaID("d", "db", 2), "replicas one after the other")
	side := g.Dependencies(docker.ContainerID("d", "side"))
	assert.Contains(t, side, docker.ReplicaID("d", "db", 1))
	assert.NotContains(t, side, docker.ReplicaID("d", "db", 2))

	apply(t, f, p)
	api, ok := f.Container("d-api")
	require.True(t, ok)
	assert.ElementsMatch(t, []string{"d-db-1:database", "d-db-2:database", "d-db-3:database"}, api.Host.Links)
	side2, ok := f.Container("d-side")
	require.True(t, ok)
	assert.Equal(t, "container:d-db-1", string(side2.Host.IpcMode))
	assert.Equal(t, []string{"d-db-1:ro"}, side2.Host.VolumesFrom)
}

// TestScaleRefusals: what compose refuses with more than one replica is
// refused by name before any engine call, from a Project or a file.
func TestScaleRefusals(t *testing.T) {
	two, zero, neg := 2, 0, -1
	tests := []struct {
		name  string
		spec  docker.ContainerSpec
		field string
	}{
		{"container name", docker.ContainerSpec{Service: "a", Image: "i", Name: "fixed", Replicas: &two}, "Name"},
		{"fixed host port", docker.ContainerSpec{Service: "a", Image: "i", Replicas: &two,
			Ports: []docker.Port{{HostPort: "8080-8081", ContainerPort: 80}, {HostPort: "8080", ContainerPort: 81}}}, "Ports[1].HostPort"},
		{"negative", docker.ContainerSpec{Service: "a", Image: "i", Replicas: &neg}, "Replicas"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			p := docker.Project{Name: "x", Containers: []docker.ContainerSpec{tt.spec}}
			_, err := p.Graph(f)
			var se *docker.SpecError
			require.ErrorAs(t, err, &se)
			require.ErrorIs(t, err, docker.ErrInvalidSpec)
			assert.Equal(t, tt.field, se.Field)
			assert.Equal(t, "a", se.Service)
			assert.Zero(t, f.TotalCalls())
		})
	}
	t.Run("reference to a service with none", func(t *testing.T) {
		p := docker.Project{Name: "x", Containers: []docker.ContainerSpec{{Service: "a", Image: "i", Replicas: &zero},
			{Service: "b", Image: "i", IPC: "service:a"}}}
		_, err := p.Graph(newFake())
		var se *docker.SpecError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, "IPC", se.Field)
		assert.Contains(t, se.Reason, `"a" runs no container`)
	})
	t.Run("one replica with a name, or a published range", func(t *testing.T) {
		one := 1
		p := docker.Project{Name: "x", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Name: "fixed", Replicas: &one},
			{Service: "b", Image: "app:1", Replicas: &two, Ports: []docker.Port{{HostPort: "0", ContainerPort: 80}, {ContainerPort: 81}}}}}
		f := newFake()
		apply(t, f, &p)
		assert.Equal(t, []string{"fixed=running", "x-b-1=running", "x-b-2=running"}, names(f.Containers()))
	})

	files := []struct {
		name, yaml, field string
	}{
		{"container_name", "    container_name: webc\n    scale: 2\n", "container_name"},
		{"container_name with replicas", "    container_name: webc\n    deploy: {replicas: 3}\n", "container_name"},
		{"distinct counts", "    scale: 2\n    deploy: {replicas: 3}\n", "deploy.replicas"},
		{"negative", "    scale: -1\n", "scale"},
		{"fixed port", "    scale: 2\n    ports: [\"8080:80\"]\n", "Ports[0].HostPort"},
	}
	for _, tt := range files {
		t.Run("file "+tt.name, func(t *testing.T) {
			_, err := docker.LoadCompose(context.Background(), []byte("name: s\nservices:\n  web:\n    image: app:1\n"+tt.yaml),
				docker.LoadOptions{WorkingDir: t.TempDir()})
			var se *docker.SpecError
			require.ErrorAs(t, err, &se, "%v", err)
			assert.Equal(t, tt.field, se.Field)
			assert.Equal(t, "web", se.Service)
		})
	}
}

// TestOrphansHighestNumberFirst: orphans are removed by replica number,
// highest first, whatever the order of their names.
func TestOrphansHighestNumberFirst(t *testing.T) {
	current := docker.ProjectState{Project: "p", Containers: []string{"p-db", "p-web-1", "p-web-10", "p-web-2", "p-web-9", "p-x-3"}}
	target := docker.ProjectState{Project: "p", Containers: []string{"p-web-1"}}
	assert.Equal(t, []string{"p-web-10", "p-web-9", "p-x-3", "p-web-2", "p-db"}, current.Orphans(target))
}

func TestReplicaID(t *testing.T) {
	assert.Equal(t, converge.ID("container:p/web#2"), docker.ReplicaID("p", "web", 2))
	assert.True(t, strings.HasPrefix(string(docker.ReplicaID("p", "web", 2)), string(docker.ContainerID("p", "web"))))
}

// TestScaleRecreatesByStrategy: a new image recreates every replica, one
// after the other from number 1, each by the service's update strategy
// (the order of engine calls balena's app.spec.ts asserts, per replica).
func TestScaleRecreatesByStrategy(t *testing.T) {
	tests := []struct {
		strategy docker.UpdateStrategy
		want     []string
		renamed  []string
		images   []string
	}{
		{docker.DownloadThenKill, []string{pull, create, stop, remove, rename, start, create, stop, remove, rename, start},
			[]string{"up-a-1", "up-a-2"}, []string{oldRef, newRef}},
		{docker.KillThenDownload, []string{stop, remove, pull, create, start, stop, remove, create, start}, nil, []string{oldRef, newRef}},
		{docker.DeleteThenDownload, []string{stop, remove, rmi, pull, create, start, stop, remove, rmi, create, start}, nil, []string{newRef}},
		{docker.HandOver, []string{pull, create, start, stop, remove, rename, create, start, stop, remove, rename},
			[]string{"up-a-1", "up-a-2"}, []string{oldRef, newRef}},
	}
	for _, tt := range tests {
		t.Run(tt.strategy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &namesEngine{Engine: newFake()}
				f.Pullable(newRef, 100, 50)
				two := 2
				p := &docker.Project{Name: "up", Containers: []docker.ContainerSpec{{Service: "a", Image: oldRef, Update: tt.strategy,
					Replicas: &two, Healthcheck: &docker.Healthcheck{Test: []string{"CMD", "true"}}, HandoverTimeout: 5 * time.Second}}}
				apply(t, f, p)
				p.Containers[0].Image = newRef
				f.ResetCalls()
				f.reset()
				apply(t, f, p)
				assert.Equal(t, tt.want, keyLog(f.Engine))
				assert.Equal(t, []string{"up-a-1", "up-a-2"}, f.removed, "replica 1 first")
				assert.Equal(t, tt.renamed, f.renamed)
				assert.Equal(t, []string{"up-a-1=running", "up-a-2=running"}, names(f.Containers()))
				for _, c := range f.Containers() {
					assert.Equal(t, newRef, c.Config.Image, c.Name)
				}
				assert.Equal(t, tt.images, f.Images())
			})
		})
	}
}

// TestScaleFromAndToOneUnscaledContainer: giving a service Replicas
// renames its one container to replica 1 (the same container, as compose
// would name it) and adds the others; taking Replicas away renames
// replica 1 back and removes the others, highest first. Nothing that
// matches is recreated.
func TestScaleFromAndToOneUnscaledContainer(t *testing.T) {
	f := &namesEngine{Engine: newFake()}
	unscaled := strings.Replace(scaled(1, "hello"), "    deploy: {replicas: 1}\n", "", 1)
	apply(t, f, load(t, unscaled))
	before := idsByName(f.Engine)
	require.Contains(t, before, "shop-web")

	f.reset()
	plans := docker.Plans(dry(t, f, load(t, scaled(3, "hello"))))
	assert.Contains(t, plans, docker.Plan{Container: "shop-web-1", Action: docker.ActionRename})
	assert.NotContains(t, plans, docker.Plan{Container: "shop-web", Action: docker.ActionRemove})
	apply(t, f, load(t, scaled(3, "hello")))
	assert.Equal(t, []string{"shop-web-1=running", "shop-web-2=running", "shop-web-3=running"}, replicaNames(f.Engine))
	assert.Equal(t, before["shop-web"], idsByName(f.Engine)["shop-web-1"], "renamed, not recreated")
	assert.Equal(t, []string{"shop-web-1"}, f.renamed)
	assert.Empty(t, f.removed)
	one, _ := f.Container("shop-web-1")
	assert.Equal(t, "1", one.Config.Labels[docker.LabelComposeContainerNumber])

	// Converged: a second walk writes nothing.
	f.ResetCalls()
	apply(t, f, load(t, scaled(3, "hello")))
	assert.Zero(t, f.WriteCalls(), "calls: %v", f.Calls())

	f.reset()
	apply(t, f, load(t, unscaled))
	assert.Equal(t, []string{"shop-web=running"}, replicaNames(f.Engine))
	assert.Equal(t, before["shop-web"], idsByName(f.Engine)["shop-web"], "renamed back, not recreated")
	assert.Equal(t, []string{"shop-web-3", "shop-web-2"}, f.removed)
	assert.Equal(t, []string{"shop-web"}, f.renamed)
	f.ResetCalls()
	apply(t, f, load(t, unscaled))
	assert.Zero(t, f.WriteCalls(), "calls: %v", f.Calls())
}

// TestDependsOnWaitsForEveryReplica: a service that depends on a scaled
// one waits for each replica's condition: one replica still starting
// holds it back, naming that replica.
func TestDependsOnWaitsForEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.OnStart = func(c *dockertest.Container) (container.ContainerState, int) {
			if c.Name == "w-web-2" {
				c.Health = container.Starting
			}
			return container.StateRunning, 0
		}
		two := 2
		p := &docker.Project{Name: "w", Containers: []docker.ContainerSpec{
			{Service: "web", Image: "app:1", Replicas: &two, Healthcheck: &docker.Healthcheck{Test: []string{"CMD", "true"}}},
			{Service: "worker", Image: "app:1", DependsOn: []docker.Dependency{{Service: "web", Condition: docker.ServiceHealthy, Timeout: 10 * time.Second}}},
		}}
		_, err := converge.Apply(t.Context(), mustGraph(t, p, f))
		require.ErrorIs(t, err, docker.ErrDependencyTimeout)
		var de *docker.DependencyError
		require.ErrorAs(t, err, &de)
		assert.Equal(t, "w-web-2", de.Dependency)
		assert.Equal(t, "web", de.Service)
		if w, ok := f.Container("w-worker"); ok {
			assert.NotEqual(t, container.StateRunning, w.Status, "the worker is not started")
		}
		f.SetHealth("w-web-2", container.Healthy)
		apply(t, f, p)
		w, ok := f.Container("w-worker")
		require.True(t, ok)
		assert.Equal(t, container.StateRunning, w.Status)
	})
}
