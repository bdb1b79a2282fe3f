package controller_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// entries is a converge.Metrics that prints each count of
// controller.MetricStateEntered; a real program passes the prometheus
// module's adapter instead.
type entries struct{ converge.MetricsNop }

func (entries) Add(m *converge.Metric, delta float64, labels ...string) {
	if m == controller.MetricStateEntered {
		fmt.Printf("%s %s=%s %s=%s +%g\n", m.Name, m.Labels[0], labels[0], m.Labels[1], labels[1], delta)
	}
}

// A controller reports its metrics through Config.Metrics, labelled with
// its kind and the objects' states (never their keys), and logs every
// handler run to Config.Logger.
func ExampleConfig_metricsAndLogger() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a stable output for the example
			}
			return a
		},
	}))
	ready := make(chan struct{})
	var once sync.Once
	c, err := controller.New(controller.Config{
		Kind:    "machine",
		Metrics: entries{},
		Logger:  logger,
		Handler: controller.HandlerFunc(func(ctx context.Context, m controller.Object) (controller.Result, error) {
			if m.State == "new" {
				return controller.Transition("ready"), nil
			}
			once.Do(func() { close(ready) })
			return controller.NoChange(), nil
		}),
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Add(ctx, "m-1", "new", nil); err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()
	<-ready
	cancel()
	<-stopped
	var names []string
	for _, m := range controller.AllMetrics() {
		names = append(names, m.Name)
	}
	fmt.Println(len(names), "metrics, such as", strings.Join(names[:2], ", "))
	// Output:
	// converge_controller_state_entered_total controller=machine state=new +1
	// converge_controller_state_entered_total controller=machine state=ready +1
	// level=INFO msg="controller: handled" controller=machine key=m-1 state=new outcome=transition next=ready
	// 21 metrics, such as converge_controller_objects, converge_controller_objects_above_sla
}
