package converge_test

import (
	"context"
	"fmt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// A device agent keeps the host converged to the last target it was given.
// The target is plain data, stored as JSON with its revision, so that a
// restarted agent resumes it: LoadOrSet resumes the stored target, or sets
// a default on the first boot. Build turns the target into ordered stages
// of items that read the real system.
func ExampleTargetReconciler() {
	type deviceSpec struct {
		Hostname string `json:"hostname"`
		App      string `json:"app"`
	}
	// The "real system": in a real agent these are hostcfg and docker items.
	hostname := &convergetest.Item{Key: "hostname"}
	app := &convergetest.Item{Key: "container:web"}
	// A real agent keeps its target on disk (boltstore.Open); a MemStore
	// shared by the two boots below stands in for the file.
	store := converge.NewMemStore()

	boot := func() *converge.TargetReconciler[deviceSpec] {
		r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[deviceSpec]{
			Name:  "device",
			Store: store,
			Build: func(_ context.Context, s deviceSpec) ([]converge.TargetStage, error) {
				hostname.Goal, app.Goal = s.Hostname, s.App
				host := converge.NewGraph()
				host.Add(hostname.Node(), converge.Present)
				apps := converge.NewGraph()
				apps.Add(app.Node(), converge.Present)
				return []converge.TargetStage{{Name: "host", Graph: host}, {Name: "apps", Graph: apps}}, nil
			},
		})
		if err != nil {
			panic(err)
		}
		return r
	}
	// runOnce runs r until its first pass finished.
	runOnce := func(r *converge.TargetReconciler[deviceSpec]) {
		done := make(chan struct{})
		r.Subscribe(func(e converge.TargetEvent) {
			switch e.Kind {
			case converge.TargetStateChanged:
				fmt.Printf("pass %d (revision %d), stage %s: changed %v\n", e.Pass, e.Revision, e.Stage, e.Report.IDs(converge.OutcomeChanged))
			case converge.TargetPassFinished:
				fmt.Printf("pass %d (revision %d) finished\n", e.Pass, e.Revision)
				close(done)
			case converge.TargetPassFailed:
				fmt.Printf("pass %d failed: %v\n", e.Pass, e.Err)
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error)
		go func() { stopped <- r.Run(ctx) }()
		<-done
		cancel()
		if err := <-stopped; err != nil {
			panic(err)
		}
	}
	ctx := context.Background()
	def := deviceSpec{Hostname: "edge-1", App: "web:1.2"}

	// First boot: nothing is stored, so the default is set and stored.
	r := boot()
	found, err := r.LoadOrSet(ctx, def)
	if err != nil {
		panic(err)
	}
	fmt.Println("first boot: stored target found:", found, "revision:", r.Revision())
	runOnce(r)
	// Later, the agent is given a new target.
	if err := r.SetTarget(ctx, deviceSpec{Hostname: "edge-1", App: "web:1.3"}); err != nil {
		panic(err)
	}

	// After a restart the stored target and its revision come back.
	r = boot()
	if found, err = r.LoadOrSet(ctx, def); err != nil {
		panic(err)
	}
	t, _ := r.Target()
	fmt.Println("second boot: stored target found:", found, "revision:", r.Revision(), "app:", t.App)
	runOnce(r)
	fmt.Println("hostname:", hostname.Current(), "app:", app.Current())
	// Output:
	// first boot: stored target found: false revision: 1
	// pass 1 (revision 1), stage host: changed [hostname]
	// pass 1 (revision 1), stage apps: changed [container:web]
	// pass 1 (revision 1) finished
	// second boot: stored target found: true revision: 2 app: web:1.3
	// pass 1 (revision 2), stage apps: changed [container:web]
	// pass 1 (revision 2) finished
	// hostname: edge-1 app: web:1.3
}
