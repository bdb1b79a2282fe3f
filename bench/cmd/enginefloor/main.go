// Command enginefloor is the floor that bench/cmd/agentcost measures a device
// agent against: the least a Go program must do to watch a Docker project,
// with the same engine client library the agent uses.
//
//	enginefloor -mode events -project P   # hold the engine's event stream until killed
//	enginefloor -mode start -project P    # list and inspect the project's containers, then exit
//
// In events mode it prints "ready" once subscribed and then only reads
// events; in start mode it prints how many containers it inspected.
package main

import "github.com/convergekit/converge/bench/internal/floor"

func main() { floor.Main() }
