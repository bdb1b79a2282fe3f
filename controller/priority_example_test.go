package controller_test

import (
	"context"
	"fmt"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// Objects added with a priority are claimed by the replicas highest
// first among the due ones; SetPriority changes it later, here for a
// machine an operator wants handled before the rest.
func ExampleSetPriority() {
	ctx := context.Background()
	store := converge.NewMemStore() // a boltstore or pgstore Store in a real program
	err := controller.AddObjects(ctx, store, "machine", []controller.NewObject{
		{Key: "m-1", State: "new"},
		{Key: "m-2", State: "new", Priority: 10},
		{Key: "m-3", State: "new"},
	})
	if err != nil {
		panic(err)
	}
	if err := controller.SetPriority(ctx, store, "machine", "m-3", 20); err != nil {
		panic(err)
	}
	// What a replica claims first (controller.Config.Owner set).
	claimed, err := store.ClaimDue(ctx, "machine/", "replica-1", time.Minute, 3)
	if err != nil {
		panic(err)
	}
	for _, c := range claimed {
		fmt.Println(c.Record.Key)
	}
	// Output:
	// machine/m-3
	// machine/m-2
	// machine/m-1
}

// A machine watches its rack: a transition of the rack makes the machine
// due at once, in the same write, for whichever replica holds it.
func ExampleSetWatches() {
	ctx := context.Background()
	store := converge.NewMemStore() // a pgstore Store in a real program
	for _, add := range []struct{ kind, key, state string }{{"rack", "r-1", "new"}, {"machine", "m-1", "up"}} {
		if err := controller.AddObject(ctx, store, add.kind, add.key, controller.State(add.state), nil); err != nil {
			panic(err)
		}
	}
	if err := controller.SetWatches(ctx, store, "machine", "m-1", []controller.Ref{{Kind: "rack", Key: "r-1"}}); err != nil {
		panic(err)
	}
	// The machine is handled, and not due again until its periodic pass.
	cl, err := store.ClaimDue(ctx, "machine/", "replica-1", time.Minute, 1)
	if err != nil {
		panic(err)
	}
	if err := store.Finish(ctx, cl[0].Lease, time.Time{}); err != nil {
		panic(err)
	}
	// The rack's handler moves it to "ready" (here, by hand).
	rec, err := store.Get(ctx, "rack/r-1")
	if err != nil {
		panic(err)
	}
	_, err = store.Put(ctx, converge.StoreRecord{Key: rec.Key, Version: rec.Version, Value: []byte(`{"state":"ready","since":"2026-12-04T12:00:00Z"}`)},
		converge.HistoryEntry{At: time.Now(), From: "new", To: "ready"})
	if err != nil {
		panic(err)
	}
	cl, err = store.ClaimDue(ctx, "machine/", "replica-1", time.Minute, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(cl), cl[0].Record.Key)
	// Output:
	// 1 machine/m-1
}
