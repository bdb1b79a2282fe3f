package converge_test

import (
	"context"
	"fmt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// A device agent keeps the host converged to the last target it was given.
// The target is plain data (it is stored as JSON so a restart resumes it);
// Build turns it into ordered stages of items that read the real system.
func ExampleTargetReconciler() {
	type deviceSpec struct {
		Hostname string `json:"hostname"`
		App      string `json:"app"`
	}
	// The "real system": in a real agent these are hostcfg and docker items.
	hostname := &convergetest.Item{Key: "hostname"}
	app := &convergetest.Item{Key: "container:web"}

	r, err := converge.NewTargetReconciler(converge.TargetConfig[deviceSpec]{
		Name: "device",
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
	done := make(chan struct{})
	r.Subscribe(func(e converge.TargetEvent) {
		switch e.Kind {
		case converge.TargetStateChanged:
			fmt.Printf("pass %d (revision %d), stage %s: changed %v\n", e.Pass, e.Revision, e.Stage, e.Report.IDs(converge.OutcomeChanged))
		case converge.TargetPassFinished:
			fmt.Printf("pass %d finished\n", e.Pass)
			close(done)
		case converge.TargetPassFailed:
			fmt.Printf("pass %d failed: %v\n", e.Pass, e.Err)
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	if err := r.SetTarget(ctx, deviceSpec{Hostname: "edge-1", App: "web:1.2"}); err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- r.Run(ctx) }()
	<-done
	cancel()
	fmt.Println("stopped:", <-stopped)
	fmt.Println("hostname:", hostname.Current(), "app:", app.Current())
	// Output:
	// pass 1 (revision 1), stage host: changed [hostname]
	// pass 1 (revision 1), stage apps: changed [container:web]
	// pass 1 finished
	// stopped: <nil>
	// hostname: edge-1 app: web:1.2
}
