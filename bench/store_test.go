package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
)

// The durable-store benchmarks write the same thing everywhere: a record of
// about 100 bytes under one of storeKeys keys per writer, with a version
// check, plus one history entry, in one durable (fsynced) transaction.
// They report acknowledged writes per second as "ops/s".

const storeKeys = 1000

var storeValue = []byte(`{"state":"ready","since":"2026-11-23T12:00:00Z","data":{"image":"web:2","replicas":3}}`)

// putter is one writer's durable versioned put of key with one history
// entry; it returns the new version.
type putter func(ctx context.Context, key string, version uint64, h converge.HistoryEntry) (uint64, error)

// runPuts runs b.N puts split over writers goroutines, each on its own keys,
// and reports ops/s.
func runPuts(b *testing.B, writers int, put func() putter) {
	ctx := context.Background()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	puts := make([]putter, writers)
	for w := range puts {
		puts[w] = put()
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			versions := make([]uint64, storeKeys)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				k := int(i/int64(writers)) % storeKeys
				key := fmt.Sprintf("obj/w%d/%04d", w, k)
				v, err := puts[w](ctx, key, versions[k], converge.HistoryEntry{At: time.Now(), From: "new", To: "ready", Reason: "bench"})
				if err != nil {
					failed.Store(&err)
					return
				}
				versions[k] = v
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
}

func boltPutter(b *testing.B) func() putter {
	st, err := boltstore.Open(filepath.Join(b.TempDir(), "state.db"), boltstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return func() putter {
		return func(ctx context.Context, key string, version uint64, h converge.HistoryEntry) (uint64, error) {
			return st.Put(ctx, converge.StoreRecord{Key: key, Version: version, Value: storeValue}, h)
		}
	}
}

// BenchmarkStorePut: boltstore, one writer.
func BenchmarkStorePut(b *testing.B) { runPuts(b, 1, boltPutter(b)) }

// BenchmarkStorePut8: boltstore, 8 concurrent writers (grouped commits).
func BenchmarkStorePut8(b *testing.B) { runPuts(b, 8, boltPutter(b)) }

// sqlitePutter opens a SQLite database in WAL mode with synchronous=FULL
// (every commit is fsynced) and writes the record and its history row in
// one transaction, the version checked by the UPDATE.
func sqlitePutter(b *testing.B) func() putter {
	path := filepath.Join(b.TempDir(), "state.sqlite")
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(60000)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	for _, q := range []string{
		`CREATE TABLE records (key TEXT PRIMARY KEY, version INTEGER NOT NULL, value BLOB NOT NULL)`,
		`CREATE TABLE history (id INTEGER PRIMARY KEY, key TEXT NOT NULL, at INTEGER NOT NULL, from_state TEXT, to_state TEXT, reason TEXT)`,
		`CREATE INDEX history_key ON history (key, id)`,
	} {
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		b.Fatalf("journal_mode %q, %v", mode, err)
	}
	var syncMode int
	if err := db.QueryRow(`PRAGMA synchronous`).Scan(&syncMode); err != nil || syncMode != 2 {
		b.Fatalf("synchronous %d (want 2, FULL), %v", syncMode, err)
	}
	return func() putter {
		return func(ctx context.Context, key string, version uint64, h converge.HistoryEntry) (uint64, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return 0, err
			}
			defer func() { _ = tx.Rollback() }()
			// The versioned upsert: create when version is 0, else update
			// only the version read.
			res, err := tx.ExecContext(ctx, `INSERT INTO records (key, version, value) VALUES (?1, 1, ?3)
				ON CONFLICT (key) DO UPDATE SET version = version + 1, value = excluded.value WHERE version = ?2`,
				key, version, storeValue)
			if err != nil {
				return 0, err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				return 0, fmt.Errorf("sqlite: stale version %d of %q (%d rows, %v)", version, key, n, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO history (key, at, from_state, to_state, reason) VALUES (?, ?, ?, ?, ?)`,
				key, h.At.UnixNano(), h.From, h.To, h.Reason); err != nil {
				return 0, err
			}
			return version + 1, tx.Commit()
		}
	}
}

// BenchmarkSQLitePut: modernc.org/sqlite (WAL, synchronous=FULL), one
// writer, the same writes as BenchmarkStorePut.
func BenchmarkSQLitePut(b *testing.B) { runPuts(b, 1, sqlitePutter(b)) }

// BenchmarkSQLitePut8: the same with 8 concurrent writers.
func BenchmarkSQLitePut8(b *testing.B) { runPuts(b, 8, sqlitePutter(b)) }

// BenchmarkFsyncFloor: append one small record to a file and fsync it, in
// the same kind of temporary directory: the most durable writes per second
// one writer can get from this disk.
func BenchmarkFsyncFloor(b *testing.B) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "floor.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rec := append(append([]byte{}, storeValue...), '\n')
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := f.Write(rec); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
}

// durableFleet is how many objects BenchmarkControllerIdleMemoryDurable
// holds: as many as BenchmarkControllerIdleMemory.
const durableFleet = fleetSize

// BenchmarkControllerIdleMemoryDurable measures the heap held per idle
// object, as BenchmarkControllerIdleMemory does, with the objects kept in
// a boltstore file (added by 64 goroutines, so their writes share commits).
func BenchmarkControllerIdleMemoryDurable(b *testing.B) {
	ctx := context.Background()
	durableKeys := fleetKeys()[:durableFleet]
	var perObject, filePerObject float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), fmt.Sprintf("fleet-%d.db", i))
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()

		st, err := boltstore.Open(path, boltstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		cnt := newBatchCounter()
		cnt.expect(durableFleet)
		c, err := controller.New(controller.Config{
			Kind: "obj", Workers: 8, Store: st,
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				cnt.reconcile()
				return controller.NoChange(), nil
			}),
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := addAll(ctx, c, durableKeys); err != nil {
			b.Fatal(err)
		}
		perObject = idleHeapPerObject(ctx, b, c, cnt, &before, durableFleet)
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		if fi, err := os.Stat(path); err == nil {
			filePerObject = float64(fi.Size()) / durableFleet
		}
		b.StartTimer()
	}
	b.ReportMetric(perObject, "B/object")
	// The file is mapped, not on the heap: its size is reported apart.
	b.ReportMetric(filePerObject, "file-B/object")
}
