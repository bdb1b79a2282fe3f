package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
)

// Open a store (here on the server named by CONVERGE_PG_DSN), write a
// record with a history entry, and hand due records to a worker. Run it
// with a DSN of your own; it writes under the prefix "example/".
func ExampleOpen() {
	dsn := os.Getenv("CONVERGE_PG_DSN")
	if dsn == "" {
		return
	}
	ctx := context.Background()
	st, err := pgstore.Open(ctx, dsn, pgstore.Options{Schema: "converge_example"})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	v, err := st.Put(ctx, converge.StoreRecord{Key: "example/web", Value: json.RawMessage(`{"state":"new"}`)},
		converge.HistoryEntry{At: time.Now(), To: "new", Reason: "created"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored version", v)

	// A worker (on any replica) claims the due records and finishes them.
	claimed, err := st.ClaimDue(ctx, "example/", "worker-1", 30*time.Second, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range claimed {
		fmt.Println("handling", c.Record.Key)
		if err := st.Finish(ctx, c.Lease, time.Time{}); err != nil {
			log.Fatal(err)
		}
	}
}
