package boltstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
)

// Open a store by naming its file; what is written survives the process.
func Example() {
	dir, err := os.MkdirTemp("", "boltstore-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.db")
	ctx := context.Background()

	st, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	v, err := st.Put(ctx, converge.StoreRecord{Key: "host/web-1", Value: json.RawMessage(`{"state":"ready"}`)},
		converge.HistoryEntry{At: at, To: "ready", Reason: "created"})
	fmt.Println("version", v, err)
	if _, err := st.PutTarget(ctx, "agent", json.RawMessage(`{"image":"web:2"}`)); err != nil {
		fmt.Println(err)
	}
	if err := st.Close(); err != nil {
		fmt.Println(err)
	}

	// A later run of the program opens the same file.
	st, err = boltstore.Open(path, boltstore.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	rec, _ := st.Get(ctx, "host/web-1")
	hist, _ := st.History(ctx, "host/web-1")
	target, _, _ := st.Target(ctx, "agent")
	fmt.Println(rec.Version, string(rec.Value), hist[0].To, string(target))

	// A stale write is refused.
	_, err = st.Put(ctx, converge.StoreRecord{Key: "host/web-1", Version: 0, Value: json.RawMessage(`{}`)})
	fmt.Println(errors.Is(err, converge.ErrStoreStale))
	// Output:
	// version 1 <nil>
	// 1 {"state":"ready"} ready {"image":"web:2"}
	// true
}
