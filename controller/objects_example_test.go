package controller_test

import (
	"context"
	"fmt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// A program that only feeds objects (an API server, a seeding step) stores
// them with AddObject, in one line and without a handler; the controllers
// of the kind, here or in other processes sharing the store, handle them.
func ExampleAddObject() {
	ctx := context.Background()
	store := converge.NewMemStore() // a boltstore or pgstore Store in a real program
	for _, key := range []string{"m-1", "m-2"} {
		if err := controller.AddObject(ctx, store, "machine", key, "new", nil); err != nil {
			fmt.Println(err)
		}
	}
	err := controller.AddObject(ctx, store, "machine", "m-1", "new", nil)
	fmt.Println(err)

	// Later, a controller of the kind on the same store.
	c, err := controller.New(controller.Config{Kind: "machine", Store: store,
		Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
			return controller.Transition("ready"), nil
		}),
	})
	if err != nil {
		panic(err)
	}
	stored, err := c.StoredObjects(ctx)
	if err != nil {
		panic(err)
	}
	for _, o := range stored {
		fmt.Println(o.Key, o.State)
	}
	// Output:
	// controller: machine "m-1": object exists
	// m-1 new
	// m-2 new
}
