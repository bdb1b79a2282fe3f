package docker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// A dry run shows what each container needs, then Apply does it.
func Example() {
	ctx := context.Background()
	eng := dockertest.New() // docker.NewClient() for a real engine
	eng.AddImage("app:1")
	p, err := docker.LoadCompose(ctx, []byte(`
name: demo
services:
  db:
    image: app:1
    environment: {DB_PASSWORD: s3cret}
  web:
    image: app:1
    depends_on: [db]
`), docker.LoadOptions{})
	if err != nil {
		panic(err)
	}
	g, err := p.Graph(eng)
	if err != nil {
		panic(err)
	}
	rep, _ := converge.ApplyDry(ctx, g)
	for _, pl := range docker.Plans(rep) {
		fmt.Println(pl)
	}
	fmt.Println("writes during the dry run:", eng.WriteCalls())

	if _, err := converge.Apply(ctx, g); err != nil {
		panic(err)
	}
	eng.ResetCalls()
	rep, _ = converge.Apply(ctx, g)
	fmt.Println("changed on the second apply:", len(rep.IDs(converge.OutcomeChanged)))
	fmt.Println("engine calls to confirm it:", eng.TotalCalls())
	// Output:
	// demo-db: create
	// demo-web: create
	// writes during the dry run: 0
	// changed on the second apply: 0
	// engine calls to confirm it: 2
}

// Plans explains a recreate field by field.
func ExamplePlanFor() {
	spec := docker.Plan{Container: "demo-web", Action: docker.ActionRecreate, Fields: []string{"env.GREETING", "image"}}
	fmt.Println(spec)
	// Output: demo-web: recreate (env.GREETING, image)
}

// Clean removes containers before the networks and volumes they use, and
// keeps volumes (and their data) unless RemoveVolumes is set.
func Example_clean() {
	ctx := context.Background()
	eng := dockertest.New()
	eng.AddImage("app:1")
	p := &docker.Project{Name: "demo",
		Containers: []docker.ContainerSpec{{Service: "db", Image: "app:1",
			Mounts: []docker.Mount{{Type: "volume", Source: "demo-data", Target: "/data"}}}},
		Volumes: []docker.VolumeSpec{{Name: "demo-data"}},
	}
	for _, removeVolumes := range []bool{false, true} {
		p.RemoveVolumes = removeVolumes
		g, err := p.Graph(eng)
		if err != nil {
			panic(err)
		}
		if _, err := converge.Apply(ctx, g); err != nil {
			panic(err)
		}
		if _, err := converge.Clean(ctx, g); err != nil {
			panic(err)
		}
		fmt.Printf("RemoveVolumes=%t: containers %d, volumes %v\n", removeVolumes, len(eng.Containers()), eng.VolumeNames())
	}
	// Output:
	// RemoveVolumes=false: containers 0, volumes [demo-data]
	// RemoveVolumes=true: containers 0, volumes []
}

// A missing image fails the walk before anything is created, and a dry run
// already reports it.
func ExampleImageError() {
	ctx := context.Background()
	eng := dockertest.New() // no image at all
	p := &docker.Project{Name: "demo",
		Containers: []docker.ContainerSpec{
			{Service: "web", Image: "app:2", Pull: docker.PullNever},
			{Service: "worker", Image: "app:2", Pull: docker.PullNever},
		},
		Networks: []docker.NetworkSpec{{Name: "demo-net"}},
	}
	g, err := p.Graph(eng)
	if err != nil {
		panic(err)
	}
	_, err = converge.ApplyDry(ctx, g)
	var ie *docker.ImageError
	if errors.As(err, &ie) {
		fmt.Println(ie)
		fmt.Println("missing:", errors.Is(err, docker.ErrImageMissing))
	}
	_, err = converge.Apply(ctx, g)
	fmt.Println("apply failed:", err != nil, "- networks:", eng.NetworkNames(), "containers:", len(eng.Containers()))
	// Output:
	// docker: image app:2 (services web, worker): not present locally, and the pull policy is never
	// missing: true
	// apply failed: true - networks: [bridge] containers: 0
}

func ExampleWatchEvents() {
	ctx := context.Background()
	eng := dockertest.New()
	eng.AddImage("app:1")
	p := &docker.Project{Name: "demo", Containers: []docker.ContainerSpec{{Service: "web", Image: "app:1"}}}
	g, err := p.Graph(eng)
	if err != nil {
		panic(err)
	}
	if _, err := converge.Apply(ctx, g); err != nil {
		panic(err)
	}
	events := make(chan docker.Event, 1)
	stop, err := docker.WatchEvents(ctx, eng, "demo", func(e docker.Event) { events <- e })
	if err != nil {
		panic(err)
	}
	defer stop()
	eng.Kill("demo-web")
	e := <-events
	fmt.Println(e.Action, e.Container, e.Service)
	// Output: die demo-web web
}

func ExampleSpecError() {
	p := &docker.Project{Name: "demo", Containers: []docker.ContainerSpec{{
		Service: "web", Image: "app:1",
		Ports: []docker.Port{{HostPort: "70000", ContainerPort: 80}},
	}}}
	_, err := p.Graph(dockertest.New())
	var se *docker.SpecError
	if errors.As(err, &se) {
		fmt.Println(se.Service, se.Field)
	}
	_, err = docker.LoadCompose(context.Background(), []byte(`
name: demo
services:
  web:
    image: app:1
    healthcheck: {test: ["CMD", "/app", "health"], interval: 5 parsecs}
`), docker.LoadOptions{})
	fmt.Println(err)
	// Output:
	// web Ports[0].HostPort
	// docker: service web: healthcheck.interval: "5 parsecs" is not a duration (such as 5s or 1m30s)
}

func ExampleProject_hashKey() {
	p, err := docker.LoadCompose(context.Background(), []byte(`
name: demo
services:
  db:
    image: app:1
    environment: {DATABASE_URL: "postgres://app:s3cret@db/app"}
`), docker.LoadOptions{HashKey: []byte("from the agent's secret store")})
	if err != nil {
		panic(err)
	}
	eng := dockertest.New()
	eng.AddImage("app:1")
	g, _ := p.Graph(eng)
	if _, err := converge.Apply(context.Background(), g); err != nil {
		panic(err)
	}
	c, _ := eng.Container("demo-db")
	fmt.Println(strings.HasPrefix(c.Config.Labels[docker.LabelSpecHash], "hmac-sha256:"))
	fmt.Println(strings.Contains(c.Config.Labels[docker.LabelSpecFields], "s3cret"))
	// Output:
	// true
	// false
}

// An application declares an update lock; while its lock file exists the
// container is not recreated, stopped or removed, and a forced walk goes
// past it.
func ExampleLockError() {
	ctx := context.Background()
	eng := dockertest.New()
	eng.AddImage("app:1")
	p, err := docker.LoadCompose(ctx, []byte(`
name: demo
services:
  player:
    image: app:1
    environment: {TRACK: "1"}
    volumes: ["/var/lib/agent/locks/player:/run/lock"]
    labels:
      io.convergekit.update-lock: /run/lock/updates.lock
`), docker.LoadOptions{})
	if err != nil {
		panic(err)
	}
	walk := func(ctx context.Context) error {
		g, err := p.Graph(eng)
		if err != nil {
			panic(err)
		}
		_, err = converge.Apply(ctx, g)
		return err
	}
	if err := walk(ctx); err != nil {
		panic(err)
	}
	eng.SetFile("demo-player", "/run/lock/updates.lock", true) // the application takes its lock
	p.Containers[0].Env["TRACK"] = "2"

	err = walk(ctx)
	var le *docker.LockError
	fmt.Println(errors.Is(err, converge.ErrLocked), errors.As(err, &le))
	fmt.Println(le)
	fmt.Println("forced:", walk(converge.WithForce(ctx)))
	// Output:
	// true true
	// docker: container demo-player: update lock /run/lock/updates.lock is held, so it is not recreated (a forced pass goes past it)
	// forced: <nil>
}

// Under PullAlways each walk asks the registry, once per image, which
// image the tag names; a new push is pulled and the containers on the old
// image are recreated.
func ExamplePullAlways() {
	ctx := context.Background()
	eng := dockertest.New()
	eng.Pullable("registry.example/player:stable", 1000) // published
	p := &docker.Project{Name: "demo", Containers: []docker.ContainerSpec{
		{Service: "player", Image: "registry.example/player:stable", Pull: docker.PullAlways},
	}}
	g, err := p.Graph(eng)
	if err != nil {
		panic(err)
	}
	if _, err := converge.Apply(ctx, g); err != nil {
		panic(err)
	}
	eng.Pullable("registry.example/player:stable", 2000) // a new version pushed under the same tag
	rep, _ := converge.ApplyDry(ctx, g)
	for _, pl := range docker.Plans(rep) {
		fmt.Println(pl)
	}
	if _, err := converge.Apply(ctx, g); err != nil {
		panic(err)
	}
	eng.ResetCalls()
	rep, _ = converge.Apply(ctx, g)
	fmt.Println("changed:", len(rep.IDs(converge.OutcomeChanged)), "registry questions:", eng.Calls()[dockertest.DistributionInspect])
	// Output:
	// demo-player: recreate (image-id)
	// changed: 0 registry questions: 1
}

// A device agent's target holds its applications (a docker project)
// beside its other parts. TargetBuild is given the runtime dependencies
// once, here the label key kept apart in the store, and BuildPart builds
// the docker stage from the target's part. The stored target holds
// neither the key nor Go field names.
func ExampleTargetBuild() {
	ctx := context.Background()
	eng := dockertest.New() // docker.NewClient() for a real engine
	eng.AddImage("app:1")
	store := converge.NewMemStore() // boltstore.Open(path, ...) on a device
	key, err := docker.LoadHashKey(ctx, store, "demo")
	if err != nil {
		panic(err)
	}
	type agentTarget struct {
		Apps docker.Project `json:"apps"`
	}
	build := converge.BuildPart(func(t agentTarget) docker.Project { return t.Apps },
		docker.TargetBuild(eng, docker.Runtime{HashKey: key}))
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[agentTarget]{Build: build, Store: store})
	if err != nil {
		panic(err)
	}
	p, err := docker.LoadCompose(ctx, []byte("name: demo\nservices:\n  web: {image: app:1, restart: always}\n"), docker.LoadOptions{})
	if err != nil {
		panic(err)
	}
	if err := r.SetTarget(ctx, agentTarget{Apps: *p}); err != nil {
		panic(err)
	}
	stored, _, err := store.Target(ctx, converge.TargetDefaultName)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(stored))
	stages, err := build(ctx, agentTarget{Apps: *p})
	if err != nil {
		panic(err)
	}
	fmt.Println(stages[0].Name)
	// Output:
	// {"apps":{"format":2,"name":"demo","services":[{"service":"web","image":"app:1","networks":[{"name":"demo_default"}],"restart":"always","compose_hash":"86afd6513c9732982afa3a4da228ff2fdde9d58a34b78098c8213e1367cf1808"}],"networks":[{"name":"demo_default"}]}}
	// docker:demo
}

// A service with Replicas runs that many containers, named and numbered
// as compose names them; scaling down removes the highest numbers first.
func ExampleReplicaID() {
	ctx := context.Background()
	eng := dockertest.New() // docker.NewClient() for a real engine
	eng.AddImage("app:1")
	scale := func(n int) {
		p := &docker.Project{Name: "demo", Containers: []docker.ContainerSpec{{Service: "web", Image: "app:1", Replicas: &n}}}
		g, err := p.Graph(eng)
		if err != nil {
			panic(err)
		}
		rep, err := converge.Apply(ctx, g)
		if err != nil {
			panic(err)
		}
		fmt.Printf("scale %d: changed %v\n", n, rep.IDs(converge.OutcomeChanged))
		for _, c := range eng.Containers() {
			fmt.Printf("  %s number %s\n", c.Name, c.Config.Labels[docker.LabelComposeContainerNumber])
		}
	}
	scale(3)
	scale(1)
	fmt.Println(docker.ReplicaID("demo", "web", 1))
	// Output:
	// scale 3: changed [container:demo/web#1 container:demo/web#2 container:demo/web#3]
	//   demo-web-1 number 1
	//   demo-web-2 number 2
	//   demo-web-3 number 3
	// scale 1: changed [docker-orphans:demo]
	//   demo-web-1 number 1
	// container:demo/web#1
}
