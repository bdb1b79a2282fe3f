package controller_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// An operator's tool releases a quarantined object without a Controller
// of its own: it opens the store the controllers share and calls Release
// with who asks. The release is an entry in the object's history, and the
// object's controller runs it again.
func ExampleRelease() {
	store := converge.NewMemStore()
	watch := haltWatch{halted: make(chan string, 1)}
	c, err := controller.New(controller.Config{
		Kind:            "machine",
		Store:           store,
		Metrics:         watch,
		QuarantineAfter: 1,
		Backoff:         converge.Backoff{Base: time.Millisecond, Max: time.Millisecond},
		Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
			return controller.Result{}, errors.New("write /dev/sda: input/output error")
		}),
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Add(ctx, "m-1", "installing", nil); err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()
	fmt.Println(<-watch.halted)
	cancel()
	<-stopped

	// Later, in another process that opened the same store:
	if err := controller.Release(context.Background(), store, "machine", "m-1", "alice"); err != nil {
		panic(err)
	}
	history, err := store.History(context.Background(), "machine/m-1")
	if err != nil {
		panic(err)
	}
	last := history[len(history)-1]
	fmt.Printf("%s, by %s, in %s\n", last.Reason, last.By, last.To)
	// Output:
	// machine halted in installing: quarantined
	// released, by alice, in installing
}
