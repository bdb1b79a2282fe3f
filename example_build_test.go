package converge_test

import (
	"context"
	"fmt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// ExampleJoinBuilds builds the stages of a device agent's target from two
// adapters' builds, each over its part of the target: the host stage
// first, then the applications'.
func ExampleJoinBuilds() {
	type Device struct {
		Hostname string
		Apps     []string
	}
	// An adapter's build over its own target type (a docker.Project, a
	// list of hostcfg items...).
	hostBuild := func(_ context.Context, hostname string) ([]converge.TargetStage, error) {
		g := converge.NewGraph()
		g.Add((&convergetest.Item{Key: "hostname", Goal: hostname}).Node(), converge.Present)
		return []converge.TargetStage{{Name: "host", Graph: g}}, nil
	}
	appsBuild := func(_ context.Context, apps []string) ([]converge.TargetStage, error) {
		g := converge.NewGraph()
		for _, a := range apps {
			g.Add((&convergetest.Item{Key: converge.ID("container:" + a), Goal: "running"}).Node(), converge.Present)
		}
		return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
	}

	build := converge.JoinBuilds(
		converge.BuildPart(func(d Device) string { return d.Hostname }, hostBuild),
		converge.BuildPart(func(d Device) []string { return d.Apps }, appsBuild),
	)
	stages, err := build(context.Background(), Device{Hostname: "pi-7", Apps: []string{"web", "db"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, st := range stages {
		ids, _ := st.Graph.Order()
		fmt.Println(st.Name, ids)
	}
	// Output:
	// host [hostname]
	// apps [container:web container:db]
}
