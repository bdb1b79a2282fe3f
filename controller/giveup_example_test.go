package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// haltWatch is a converge.Metrics that reports every object the
// controller halts, from controller.MetricHalted (labels: controller,
// state, cause), and ignores the other metrics.
type haltWatch struct {
	converge.MetricsNop
	halted chan string
}

func (w haltWatch) Add(m *converge.Metric, delta float64, labels ...string) {
	if m == controller.MetricHalted && delta > 0 {
		w.halted <- fmt.Sprintf("%s halted in %s: %s", labels[0], labels[1], labels[2])
	}
}

// A handler returns a terminal error when retrying will not help: the
// machine is not retried, its stored object says why, and an Enqueue, once
// the cause is fixed, runs it again.
func ExampleTerminal() {
	errNoImage := errors.New("no such image")
	var imagePushed atomic.Bool
	ready := make(chan struct{})
	isReady := sync.OnceFunc(func() { close(ready) })
	watch := haltWatch{halted: make(chan string, 1)}
	c, err := controller.New(controller.Config{
		Kind:    "machine",
		Metrics: watch,
		Handler: controller.HandlerFunc(func(ctx context.Context, m controller.Object) (controller.Result, error) {
			switch m.State {
			case "provisioning":
				if !imagePushed.Load() {
					return controller.Result{}, controller.Terminal(fmt.Errorf("image %q: %w", "web:1", errNoImage))
				}
				return controller.Transition("ready"), nil
			default:
				isReady()
				return controller.NoChange(), nil
			}
		}),
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Add(ctx, "m-1", "provisioning", nil); err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()

	fmt.Println(<-watch.halted)
	m, _ := c.Get("m-1")
	fmt.Printf("%s: %s after %d failure\n", m.Halted, m.LastError.Error, m.Failures)

	imagePushed.Store(true)
	if err := c.Enqueue(ctx, "m-1"); err != nil { // wakes it
		panic(err)
	}
	<-ready
	cancel()
	<-stopped
	m, _ = c.Get("m-1")
	fmt.Println("now:", m.State)
	// Output:
	// machine halted in provisioning: terminal
	// terminal: image "web:1": no such image after 1 failure
	// now: ready
}

// An object that fails QuarantineAfter times in a row in one state is
// quarantined: it is not run again, Quarantined lists it (from the store,
// so after a restart too), until Release.
func ExampleController_Quarantined() {
	var diskReplaced atomic.Bool
	ready := make(chan struct{})
	isReady := sync.OnceFunc(func() { close(ready) })
	watch := haltWatch{halted: make(chan string, 1)}
	c, err := controller.New(controller.Config{
		Kind:            "machine",
		Metrics:         watch,
		QuarantineAfter: 3,
		Backoff:         converge.Backoff{Base: time.Millisecond, Max: time.Millisecond},
		Handler: controller.HandlerFunc(func(ctx context.Context, m controller.Object) (controller.Result, error) {
			switch m.State {
			case "installing":
				if !diskReplaced.Load() {
					return controller.Result{}, errors.New("write /dev/sda: input/output error")
				}
				return controller.Transition("ready"), nil
			default:
				isReady()
				return controller.NoChange(), nil
			}
		}),
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Add(ctx, "m-2", "installing", nil); err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()

	fmt.Println(<-watch.halted)
	quarantined, err := c.Quarantined(ctx)
	if err != nil {
		panic(err)
	}
	for _, m := range quarantined {
		fmt.Printf("%s in %s, %d failures in a row: %s\n", m.Key, m.State, m.Retries, m.LastError.Error)
	}

	diskReplaced.Store(true)
	if err := c.Release(ctx, "m-2"); err != nil {
		panic(err)
	}
	<-ready
	cancel()
	<-stopped
	m, _ := c.Get("m-2")
	fmt.Println("now:", m.State)
	// Output:
	// machine halted in installing: quarantined
	// m-2 in installing, 3 failures in a row: write /dev/sda: input/output error
	// now: ready
}

// A handler looks at the object's failures in a row (Retries) and its
// recent transitions (History) to take another path: after two failures
// in one zone, it provisions the machine in another.
func ExampleObject_retries() {
	ready := make(chan struct{})
	isReady := sync.OnceFunc(func() { close(ready) })
	c, err := controller.New(controller.Config{
		Kind:    "machine",
		Backoff: converge.Backoff{Base: time.Millisecond, Max: time.Millisecond},
		Handler: controller.HandlerFunc(func(ctx context.Context, m controller.Object) (controller.Result, error) {
			switch m.State {
			case "provisioning-zone-a":
				if m.Retries >= 2 {
					fmt.Printf("zone a failed %d times in a row: %s\n", m.Retries, m.LastError.Error)
					return controller.Transition("provisioning-zone-b").Because("zone a keeps failing"), nil
				}
				return controller.Result{}, errors.New("zone a: no capacity")
			case "provisioning-zone-b":
				return controller.Transition("ready"), nil
			default:
				for _, h := range m.History {
					fmt.Printf("  %q -> %q %s\n", h.From, h.To, h.Reason)
				}
				isReady()
				return controller.NoChange(), nil
			}
		}),
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Add(ctx, "m-3", "provisioning-zone-a", nil); err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()
	<-ready
	cancel()
	<-stopped
	// Output:
	// zone a failed 2 times in a row: zone a: no capacity
	//   "" -> "provisioning-zone-a" added
	//   "provisioning-zone-a" -> "provisioning-zone-b" zone a keeps failing
	//   "provisioning-zone-b" -> "ready"
}

// OnSLA reports a machine that stays in a state longer than the state's
// SLA once, when the SLA runs out, and once more when it leaves the state.
func ExampleSLAEvent() {
	var installed atomic.Bool
	events := make(chan controller.SLAEvent, 2)
	c, err := controller.New(controller.Config{
		Kind:  "machine",
		SLA:   map[controller.State]time.Duration{"installing": 20 * time.Millisecond},
		OnSLA: func(ev controller.SLAEvent) { events <- ev },
		Handler: controller.HandlerFunc(func(ctx context.Context, m controller.Object) (controller.Result, error) {
			if m.State == "installing" {
				if !installed.Load() {
					return controller.Wait("install running"), nil
				}
				return controller.Transition("ready"), nil
			}
			return controller.NoChange(), nil
		}),
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Add(ctx, "m-4", "installing", nil); err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()

	ev := <-events
	fmt.Printf("%s %s: above its %s SLA in %s: %v\n", ev.Kind, ev.Key, ev.SLA, ev.State, ev.Breached)
	installed.Store(true)
	if err := c.Enqueue(ctx, "m-4"); err != nil {
		panic(err)
	}
	ev = <-events
	fmt.Printf("%s %s: left %s: breached %v\n", ev.Kind, ev.Key, ev.State, ev.Breached)
	cancel()
	<-stopped
	// Output:
	// machine m-4: above its 20ms SLA in installing: true
	// machine m-4: left installing: breached false
}
