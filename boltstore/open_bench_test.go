package boltstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
)

// BenchmarkOpen opens a store of 10,000 records (one history entry each)
// and closes it again: what the checks Open makes of every page and entry
// cost a restarting agent or controller.
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "state.db")
	st, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	value := []byte(`{"state":"ready","since":"2026-11-23T12:00:00Z","data":{"image":"web:2","replicas":3}}`)
	// 100 writers, so that their writes share commits.
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := range 100 {
		wg.Go(func() {
			for i := w; i < 10000; i += 100 {
				if _, err := st.Put(ctx, converge.StoreRecord{Key: fmt.Sprintf("obj/%05d", i), Value: value}, converge.HistoryEntry{To: "ready"}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		st, err := boltstore.Open(path, boltstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
