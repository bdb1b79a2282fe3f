package boltstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/convergetest"
)

// clock is a settable clock for leases and due times.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// xorSealer is a test Sealer: it binds the value to the key with a SHA-256
// tag and hides it by XOR with a key stream. Not cryptography; it only
// proves the store seals, binds and refuses.
type xorSealer struct{ secret string }

func (x xorSealer) stream(key string, n int) []byte {
	var out []byte
	for i := 0; len(out) < n; i++ {
		h := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%d", x.secret, key, i))
		out = append(out, h[:]...)
	}
	return out[:n]
}

func (x xorSealer) tag(key string, plain []byte) []byte {
	h := sha256.Sum256(append([]byte(x.secret+"|tag|"+key+"|"), plain...))
	return h[:8]
}

func (x xorSealer) Seal(key string, plain []byte) ([]byte, error) {
	ks := x.stream(key, len(plain))
	out := append([]byte{0}, x.tag(key, plain)...)
	for i, b := range plain {
		out = append(out, b^ks[i])
	}
	return out, nil
}

func (x xorSealer) Open(key string, sealed []byte) ([]byte, error) {
	if len(sealed) < 9 || sealed[0] != 0 {
		return nil, converge.ErrSealed
	}
	body := sealed[9:]
	ks := x.stream(key, len(body))
	plain := make([]byte, len(body))
	for i, b := range body {
		plain[i] = b ^ ks[i]
	}
	if string(x.tag(key, plain)) != string(sealed[1:9]) {
		return nil, fmt.Errorf("tag mismatch: %w", converge.ErrSealed)
	}
	return plain, nil
}

func openStore(t *testing.T, path string, opts boltstore.Options) *boltstore.Store {
	t.Helper()
	st, err := boltstore.Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func tempPath(t *testing.T) string { return filepath.Join(t.TempDir(), "state.db") }

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// Store is an io.Closer, as pgstore.Store is, so a program can keep
// either behind one interface.
var _ io.Closer = (*boltstore.Store)(nil)

func TestConformStore(t *testing.T) {
	sealer, err := converge.NewAESGCMSealer(make([]byte, 32))
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		opts boltstore.Options
	}{
		{"plain", boltstore.Options{}},
		{"retention", boltstore.Options{Retention: converge.Retention{Entries: 10, Age: time.Hour}}},
		{"keep all", boltstore.Options{Retention: converge.Retention{Entries: -1}}},
		{"sealed", boltstore.Options{Sealer: sealer}},
		{"test sealer", boltstore.Options{Sealer: xorSealer{"k1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tempPath(t)
			// In a bubble, Wait is time.Sleep on the fake clock that the
			// store and the suite both read.
			synctest.Test(t, func(t *testing.T) {
				st, err := boltstore.Open(path, tc.opts)
				require.NoError(t, err)
				defer st.Close()
				for _, prefix := range []string{"", "again/"} {
					require.NoError(t, convergetest.ConformStore(context.Background(), st, convergetest.StoreConformOptions{
						Prefix: prefix, Wait: time.Sleep, Retention: tc.opts.Retention,
					}))
				}
			})
		})
	}
}

func TestSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	clk := newClock()
	opts := boltstore.Options{Now: clk.Now, Sealer: xorSealer{"k"}}
	st, err := boltstore.Open(path, opts)
	require.NoError(t, err)
	at := clk.Now()
	v, err := st.Put(ctx, converge.StoreRecord{Key: "a", Value: raw(`{"n":1}`)}, converge.HistoryEntry{At: at, To: "one"})
	require.NoError(t, err)
	_, err = st.Put(ctx, converge.StoreRecord{Key: "a", Version: v, Value: raw(`{"n":2}`)}, converge.HistoryEntry{At: at, From: "one", To: "two"})
	require.NoError(t, err)
	_, err = st.PutTarget(ctx, "agent", raw(`{"t":1}`))
	require.NoError(t, err)
	l, err := st.Claim(ctx, "lock", "me", time.Hour)
	require.NoError(t, err)
	require.NoError(t, st.Close())

	st = openStore(t, path, opts)
	rec, err := st.Get(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, converge.StoreRecord{Key: "a", Version: 2, Value: raw(`{"n":2}`)}, rec)
	hist, err := st.History(ctx, "a")
	require.NoError(t, err)
	require.Len(t, hist, 2)
	assert.True(t, hist[1].At.Equal(at))
	assert.Equal(t, "two", hist[1].To)
	tg, rev, err := st.Target(ctx, "agent")
	require.NoError(t, err)
	assert.JSONEq(t, `{"t":1}`, string(tg))
	assert.Equal(t, uint64(1), rev)
	rev, err = st.PutTarget(ctx, "agent", raw(`{"t":2}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), rev, "the revision goes on after a reopen")
	_, err = st.Claim(ctx, "lock", "other", time.Hour)
	require.ErrorIs(t, err, converge.ErrClaimHeld, "a lease survives a restart")
	require.NoError(t, st.Release(ctx, l))
	l2, err := st.Claim(ctx, "lock", "other", time.Hour)
	require.NoError(t, err)
	assert.Greater(t, l2.Token, l.Token, "tokens keep increasing after release and reopen")
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	st := openStore(t, tempPath(t), boltstore.Options{Now: clk.Now, Retention: converge.Retention{Entries: 3, Age: time.Hour}})
	h := func(i int) converge.HistoryEntry {
		return converge.HistoryEntry{At: clk.Now(), To: fmt.Sprint(i)}
	}
	var v uint64
	var err error
	for i := range 5 {
		v, err = st.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: raw(`1`)}, h(i))
		require.NoError(t, err)
	}
	hist, err := st.History(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []string{"2", "3", "4"}, tos(hist), "the newest Entries are kept")

	// Two hours later, one more entry: the old ones are past their age.
	clk.Advance(2 * time.Hour)
	v, err = st.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: raw(`1`)}, h(5))
	require.NoError(t, err)
	hist, err = st.History(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []string{"5"}, tos(hist))

	// The newest entry stays whatever its age; several entries in one
	// write are trimmed to Entries.
	clk.Advance(2 * time.Hour)
	require.NoError(t, st.Delete(ctx, "k", v, h(6), h(7), h(8), h(9)))
	hist, err = st.History(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []string{"7", "8", "9"}, tos(hist))

	// Negative Entries keep everything.
	all := openStore(t, tempPath(t), boltstore.Options{Retention: converge.Retention{Entries: -1}})
	v = 0
	for i := range converge.DefaultHistoryEntries + 5 {
		v, err = all.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: raw(`1`)}, h(i))
		require.NoError(t, err)
	}
	hist, err = all.History(ctx, "k")
	require.NoError(t, err)
	assert.Len(t, hist, converge.DefaultHistoryEntries+5)

	// The default keeps DefaultHistoryEntries: the newest ones.
	def := openStore(t, tempPath(t), boltstore.Options{})
	var many []converge.HistoryEntry
	for i := range converge.DefaultHistoryEntries + 7 {
		many = append(many, h(i))
	}
	_, err = def.Put(ctx, converge.StoreRecord{Key: "k", Value: raw(`1`)}, many...)
	require.NoError(t, err)
	hist, err = def.History(ctx, "k")
	require.NoError(t, err)
	require.Len(t, hist, converge.DefaultHistoryEntries)
	assert.Equal(t, "7", hist[0].To)
}

func tos(hist []converge.HistoryEntry) []string {
	out := []string{}
	for _, h := range hist {
		out = append(out, h.To)
	}
	return out
}

// TestConcurrentWriters has many writers race on one key, so their writes
// share commits: exactly one wins each version, the others get a
// *StoreVersionError, and history holds exactly the winners' entries.
func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, tempPath(t), boltstore.Options{Retention: converge.Retention{Entries: -1}})
	const writers, rounds = 8, 20
	var mu sync.Mutex
	wins := map[uint64]int{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for range rounds {
				rec, err := st.Get(ctx, "k")
				if err != nil && !assert.ErrorIs(t, err, converge.ErrStoreNotFound) {
					return
				}
				v, err := st.Put(ctx, converge.StoreRecord{Key: "k", Version: rec.Version, Value: fmt.Appendf(nil, "%d", w)},
					converge.HistoryEntry{To: fmt.Sprint(rec.Version + 1)})
				var ve *converge.StoreVersionError
				if errors.As(err, &ve) {
					assert.Greater(t, ve.Have, rec.Version)
					continue
				}
				if assert.NoError(t, err) {
					mu.Lock()
					wins[v]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	rec, err := st.Get(ctx, "k")
	require.NoError(t, err)
	require.Len(t, wins, int(rec.Version))
	for v, n := range wins {
		assert.Equal(t, 1, n, "version %d written %d times", v, n)
	}
	hist, err := st.History(ctx, "k")
	require.NoError(t, err)
	require.Len(t, hist, int(rec.Version))
	for i, h := range hist {
		assert.Equal(t, fmt.Sprint(i+1), h.To)
	}
}
