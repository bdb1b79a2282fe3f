package docker_test

import (
	"context"
	"fmt"

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
