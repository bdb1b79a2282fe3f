package controller_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// A fleet controller moves machines through their lifecycle. The handler is
// the only one that changes a machine's state; a transition runs it again
// at once, anything else waits for the periodic pass.
func ExampleController() {
	ready := make(chan struct{})
	var once sync.Once
	c, err := controller.New(controller.Config{
		Kind: "machine",
		Handler: controller.HandlerFunc(func(ctx context.Context, m controller.Object) (controller.Result, error) {
			switch m.State {
			case "new":
				return controller.Transition("provisioning").Because("accepted"), nil
			case "provisioning":
				// Start the machine here; return an error to retry with backoff.
				return controller.Transition("ready"), nil
			default:
				once.Do(func() { close(ready) })
				return controller.NoChange(), nil
			}
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
	fmt.Println("stopped:", <-stopped)

	history, err := c.History(context.Background(), "m-1")
	if err != nil {
		panic(err)
	}
	for _, h := range history {
		fmt.Printf("%q -> %q (%s)\n", h.From, h.To, h.Reason)
	}
	m, _ := c.Get("m-1")
	fmt.Println("now:", m.State)
	// Output:
	// stopped: <nil>
	// "" -> "new" (added)
	// "new" -> "provisioning" (accepted)
	// "provisioning" -> "ready" ()
	// now: ready
}

// Replicas share the objects of one store: with Owner set, each claims due
// objects in batches and handles them under a lease, so no object is
// handled by two replicas at once. Here both replicas run in one process
// on a MemStore; across processes they would share a pgstore.Store (or
// any store that implements converge.Queue).
func ExampleController_replicas() {
	store := converge.NewMemStore()
	var mu sync.Mutex
	handledBy := map[string]string{}
	var done sync.WaitGroup
	done.Add(6)
	replica := func(owner string) *controller.Controller {
		c, err := controller.New(controller.Config{
			Kind: "machine", Store: store, Owner: owner,
			Handler: controller.HandlerFunc(func(ctx context.Context, m controller.Object) (controller.Result, error) {
				if m.State == "ready" {
					return controller.NoChange(), nil
				}
				mu.Lock()
				handledBy[m.Key] = owner
				mu.Unlock()
				done.Done()
				return controller.Transition("ready"), nil
			}),
		})
		if err != nil {
			panic(err)
		}
		return c
	}
	a, b := replica("replica-a"), replica("replica-b")
	ctx, cancel := context.WithCancel(context.Background())
	for i := range 6 {
		if err := a.Add(ctx, fmt.Sprintf("m-%d", i), "new", nil); err != nil {
			panic(err)
		}
	}
	var wg sync.WaitGroup
	for _, c := range []*controller.Controller{a, b} {
		wg.Go(func() { _ = c.Run(ctx) })
	}
	done.Wait() // every machine handled once
	cancel()
	wg.Wait()
	fmt.Println("machines handled:", len(handledBy))
	// Output:
	// machines handled: 6
}
