package controller_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// At most two machines update their firmware at once, across every
// replica sharing the store, however many workers they have: the others
// wait for a slot, without counting as failures.
func ExampleLimit() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := converge.NewMemStore() // a pgstore Store shared by replicas in a real program
	var mu sync.Mutex
	running, most, updated := 0, 0, 0
	c, err := controller.New(controller.Config{
		Kind: "machine", Store: store, Owner: "replica-1", Workers: 8, Poll: 10 * time.Millisecond,
		Limits: map[controller.State]controller.Limit{"updating": {Concurrent: 2}},
		Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
			if o.State != "updating" {
				return controller.NoChange(), nil
			}
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond) // the update
			mu.Lock()
			running--
			updated++
			if updated == 6 {
				cancel()
			}
			mu.Unlock()
			return controller.Transition("ready"), nil
		}),
	})
	if err != nil {
		panic(err)
	}
	for i := range 6 {
		if err := c.Add(ctx, fmt.Sprintf("m-%d", i), "updating", nil); err != nil {
			panic(err)
		}
	}
	if err := c.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Printf("%d machines updated, at most 2 at once: %v\n", updated, most <= 2)
	// Output:
	// 6 machines updated, at most 2 at once: true
}
