package docker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// writesOnly is a converge.Metrics that prints the engine calls that change
// something; a real program passes the prometheus module's adapter.
type writesOnly struct{ converge.MetricsNop }

func (writesOnly) Add(m *converge.Metric, delta float64, labels ...string) {
	switch op := labels[0]; {
	case m == docker.MetricEngineCalls && (op == "ContainerCreate" || op == "ContainerStart"):
		fmt.Printf("%s{operation=%q} +%g\n", m.Name, op, delta)
	}
}

// A project counts its engine calls by operation through Project.Metrics
// and logs what it changes through Project.Logger, never a secret value.
func ExampleProject_metricsAndLogger() {
	ctx := context.Background()
	eng := dockertest.New()
	eng.AddImage("app:1")
	p, err := docker.LoadCompose(ctx, []byte(`
name: demo
services:
  db:
    image: app:1
    environment: {DB_PASSWORD: s3cret}
`), docker.LoadOptions{})
	if err != nil {
		panic(err)
	}
	p.Metrics = writesOnly{}
	p.Logger = slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a stable output for the example
			}
			return a
		},
	}))
	g, err := p.Graph(eng)
	if err != nil {
		panic(err)
	}
	if _, err := converge.Apply(ctx, g); err != nil {
		panic(err)
	}
	// Output:
	// level=INFO msg="docker: create network" project=demo action="create network" network=demo_default
	// converge_docker_engine_calls_total{operation="ContainerCreate"} +1
	// level=INFO msg="docker: create" project=demo action=create service=db container=demo-db image=app:1
	// converge_docker_engine_calls_total{operation="ContainerStart"} +1
	// level=INFO msg="docker: start" project=demo action=start service=db container=demo-db
}
