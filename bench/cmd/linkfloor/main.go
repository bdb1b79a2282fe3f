// Command linkfloor is enginefloor (the same modes, the same work) linked
// with the packages examples/deviceagent links. bench/cmd/agentcost runs
// it beside the agent and the floor, to tell what linking costs from what
// the agent does.
//
// It measures what a program that only watches the engine costs once it
// carries the agent's code, whose package initialisers run and whose pages
// the process touches.
package main

import (
	_ "github.com/docker/docker/client"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "golang.org/x/sync/errgroup"

	_ "github.com/convergekit/converge"
	_ "github.com/convergekit/converge/boltstore"
	_ "github.com/convergekit/converge/docker"
	_ "github.com/convergekit/converge/hostcfg"
	_ "github.com/convergekit/converge/prometheus"
	_ "github.com/convergekit/converge/statuspage"

	"github.com/convergekit/converge/bench/internal/floor"
)

func main() { floor.Main() }
