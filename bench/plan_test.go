package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planHosts returns n worker hosts named w0000, w0001, ...
func planHosts(n int) []autopilot.Host {
	hosts := make([]autopilot.Host, n)
	for i := range hosts {
		hosts[i] = autopilot.Host{Name: fmt.Sprintf("w%04d", i), Kind: "worker", Platform: "linux-amd64"}
	}
	return hosts
}

// planDoc returns a plan of one k0s-style update command over the hosts,
// limit of them at a time.
func planDoc(id string, hosts []autopilot.Host, limit int) *plan.Document {
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Name
	}
	return &plan.Document{Spec: plan.Plan{ID: id, Commands: []plan.Command{{
		Kind: "k0supdate",
		Spec: map[string]json.RawMessage{
			"version":   json.RawMessage(`"v1.31.2+k0s.0"`),
			"platforms": json.RawMessage(`{"linux-amd64":{"url":"https://example.invalid/k0s"}}`),
		},
		Targets: []plan.CommandTargets{{Group: "workers", Concurrent: limit, Discovery: plan.CommandDiscovery{Static: names}}},
	}}}}
}

// benchPlanStep runs, per op, a whole rollout over n hosts (one at a time,
// each answering at once) through plan.Runner.Run on a MemStore, and
// reports the cost of one stored step: the machine's transition plus
// persisting it. A step of a 1,000-host plan should cost about what a step
// of a 1-host plan costs: the size of the plan must not set it.
func benchPlanStep(b *testing.B, n int) {
	hosts := planHosts(n)
	bus := autopilot.NewBus(hosts...)
	bus.OnSignal = func(node string, _ autopilot.Signal) { _ = bus.Respond(node, plan.TargetCompleted, "") }
	var steps int
	r, err := plan.NewRunner(converge.NewMemStore(), plan.RunnerConfig{
		Handlers:     map[string]plan.CommandHandler{"k0supdate": &autopilot.CommandHandler{Sender: bus}},
		PollInterval: time.Microsecond,
		Owner:        "bench",
		OnStep:       func(string, plan.Step, *plan.Status) { steps++ },
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var run time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := fmt.Sprintf("plan-%d", i)
		i++
		if err := r.Create(ctx, planDoc(id, hosts, 1)); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		st, err := r.Run(ctx, id)
		run += time.Since(start)
		if err != nil || st.State != plan.StateCompleted {
			b.Fatalf("plan: %v", err)
		}
	}
	b.ReportMetric(float64(run.Nanoseconds())/float64(steps), "ns/step")
	b.ReportMetric(float64(steps)/float64(b.N), "steps/op")
}

// BenchmarkPlanStep1 is the cost of one stored step of a 1-host plan.
func BenchmarkPlanStep1(b *testing.B) { benchPlanStep(b, 1) }

// BenchmarkPlanStep1000 is the cost of one stored step of a 1,000-host
// plan; compare ns/step with BenchmarkPlanStep1.
func BenchmarkPlanStep1000(b *testing.B) { benchPlanStep(b, 1000) }

// BenchmarkPlanDecode decodes, with autopilot.Decode, the YAML document of
// a stored 1,000-host plan with its status, as written by autopilot.Encode.
func BenchmarkPlanDecode(b *testing.B) {
	data, _ := planDecodeDoc(b)
	benchDecode(b, data, func(d []byte) error { _, err := autopilot.Decode(d); return err })
}
