package autopilot_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planBig returns a plan of one command over 3 controllers (one at a time)
// and n workers (limit at a time).
func planBig(n, limit int) *plan.Document {
	workers := make([]string, n)
	for i := range workers {
		workers[i] = fmt.Sprintf("w%04d", i)
	}
	return planOf(planCmd("update", planGroup("controllers", 1, "c0", "c1", "c2"), planGroup("workers", limit, workers...)))
}

// BenchmarkPlanRollout steps a rollout over 3 controllers and 1000 workers
// (50 at a time) to completion in memory, nodes answering at once: the cost
// of the machine and the signal handler per plan.
func BenchmarkPlanRollout(b *testing.B) {
	nodes := []autopilot.Host{planCtl("c0"), planCtl("c1"), planCtl("c2")}
	for i := range 1000 {
		nodes = append(nodes, planWrk(fmt.Sprintf("w%04d", i)))
	}
	for b.Loop() {
		bus := autopilot.NewBus(nodes...)
		bus.OnSignal = func(node string, s autopilot.Signal) { _ = bus.Respond(node, plan.TargetCompleted, "") }
		r, err := plan.NewRunner(nil, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{"update": &autopilot.CommandHandler{Sender: bus}}})
		if err != nil {
			b.Fatal(err)
		}
		doc := planBig(1000, 50)
		for {
			step, err := r.Step(context.Background(), doc)
			if err != nil {
				b.Fatal(err)
			}
			if step.Done {
				break
			}
		}
		if doc.Status.State != plan.StateCompleted {
			b.Fatal(doc.Status.State)
		}
	}
}

// BenchmarkDecodePlanAtCap decodes a JSON plan just under the default cap
// (converge.DefaultMaxDocumentBytes) and reports the bytes allocated per
// byte of input (alloc-B/in-B).
func BenchmarkDecodePlanAtCap(b *testing.B) {
	per := len(planOfBytes(2)) - len(planOfBytes(1))
	n := (converge.DefaultMaxDocumentBytes - len(planOfBytes(0))) / per
	doc := planOfBytes(n)
	for len(doc) > converge.DefaultMaxDocumentBytes {
		n--
		doc = planOfBytes(n)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	loops := 0
	for b.Loop() {
		if _, err := autopilot.Decode(doc); err != nil {
			b.Fatal(err)
		}
		loops++
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(loops)/float64(len(doc)), "alloc-B/in-B")
}
