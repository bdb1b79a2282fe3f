package main

import (
	"sync"
	"time"

	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// cluster simulates the nodes of a cluster on an in-process signal bus:
// every node applies what it is signalled after a short delay and reports
// back; the node named flaky fails its first k0s update.
type cluster struct {
	bus   *countingBus
	names []string

	mu     sync.Mutex
	failed bool
	wg     sync.WaitGroup
}

// countingBus is the autopilot.Bus with a count of deliveries per node.
type countingBus struct {
	*autopilot.Bus
	mu     sync.Mutex
	counts map[string]int
}

func (b *countingBus) count(node string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counts[node]
}

func newCluster(flaky string) *cluster {
	c := &cluster{bus: &countingBus{Bus: autopilot.NewBus(), counts: map[string]int{}}}
	for i := range 3 {
		c.add(nodeName("controller", i), "controller")
	}
	for i := range 6 {
		c.add(nodeName("worker", i), "worker")
	}
	c.bus.OnSignal = func(node string, s autopilot.Signal) {
		c.bus.mu.Lock()
		c.bus.counts[node]++
		c.bus.mu.Unlock()
		fail := false
		if node == flaky && s.Kind == "k0supdate" {
			c.mu.Lock()
			fail, c.failed = !c.failed, true
			c.mu.Unlock()
		}
		// The node works for a moment, then reports.
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			time.Sleep(3 * time.Millisecond)
			if fail {
				_ = c.bus.Respond(node, plan.TargetApplyFailed, "disk full")
				return
			}
			_ = c.bus.Respond(node, plan.TargetCompleted, "")
		}()
	}
	return c
}

func (c *cluster) add(name, kind string) {
	c.names = append(c.names, name)
	c.bus.AddNode(autopilot.Host{Name: name, Kind: kind, Platform: "linux-amd64"})
}

// wait lets every node finish its report.
func (c *cluster) wait() { c.wg.Wait() }

func nodeName(kind string, i int) string {
	return kind + string(rune('0'+i))
}
