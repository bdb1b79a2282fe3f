package boltstore_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
)

// damagedStore writes a store of a few records at path and cuts the file
// to half its size, as a medium losing power might.
func damagedStore(t *testing.T, path string) []byte {
	t.Helper()
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	for i := range 200 {
		_, err := st.Put(context.Background(), converge.StoreRecord{Key: "obj/" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Value: raw(`{"pad":"0123456789012345678901234567890123456789"}`)})
		require.NoError(t, err)
	}
	require.NoError(t, st.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b = b[:len(b)/2]
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return b
}

// TestOpenDamagedFile: a truncated store file fails Open with ErrCorrupt
// in an *OpenError naming it, and is left as it is.
func TestOpenDamagedFile(t *testing.T) {
	path := tempPath(t)
	damaged := damagedStore(t, path)
	_, err := boltstore.Open(path, boltstore.Options{})
	require.ErrorIs(t, err, boltstore.ErrCorrupt)
	assert.NotErrorIs(t, err, boltstore.ErrNotStore)
	var oe *boltstore.OpenError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, path, oe.Path)
	assert.Equal(t, boltstore.ErrCorrupt, oe.Reason)
	assert.Contains(t, err.Error(), "truncated")
	assert.Equal(t, damaged, snapshot(t, path), "the file was not written to")
}

// TestOnCorruptStartsOver: with Options.OnCorrupt, Open moves a damaged
// file aside under a timestamped name, starts an empty store and reports
// what it did; a second recovery in the same second gets its own name.
func TestOnCorruptStartsOver(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.db")
	now := time.Date(2026, 11, 25, 12, 30, 5, 0, time.FixedZone("CET", 3600))
	var got []boltstore.Recovery
	opts := boltstore.Options{Now: func() time.Time { return now }, OnCorrupt: func(r boltstore.Recovery) { got = append(got, r) }}

	damaged := damagedStore(t, path)
	st, err := boltstore.Open(path, opts)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, path, got[0].Path)
	assert.Equal(t, path+".corrupt-20261125T113005Z", got[0].MovedTo, "named by the UTC time")
	require.ErrorIs(t, got[0].Err, boltstore.ErrCorrupt)
	var oe *boltstore.OpenError
	require.ErrorAs(t, got[0].Err, &oe)
	assert.Equal(t, path, oe.Path)
	assert.Equal(t, damaged, snapshot(t, got[0].MovedTo), "the damaged file is kept, unchanged")
	list, err := st.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, list, "the new store is empty")
	_, err = st.Put(ctx, converge.StoreRecord{Key: "k", Value: raw(`1`)})
	require.NoError(t, err)
	require.NoError(t, st.Close())

	// A good file is opened as it is, and OnCorrupt is not called.
	st, err = boltstore.Open(path, opts)
	require.NoError(t, err)
	_, err = st.Get(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	require.Len(t, got, 1)

	damagedStore(t, path)
	st, err = boltstore.Open(path, opts)
	require.NoError(t, err)
	require.NoError(t, st.Close())
	require.Len(t, got, 2)
	assert.Equal(t, path+".corrupt-20261125T113005Z-2", got[1].MovedTo)
}

// TestOnCorruptLeavesOtherFiles: OnCorrupt never moves a file that is not
// a damaged store (someone else's data, a file another process holds).
func TestOnCorruptLeavesOtherFiles(t *testing.T) {
	called := false
	opts := boltstore.Options{LockTimeout: -1, OnCorrupt: func(boltstore.Recovery) { called = true }}
	dir := t.TempDir()

	random := filepath.Join(dir, "random.db")
	b := make([]byte, 64<<10)
	_, _ = rand.Read(b)
	require.NoError(t, os.WriteFile(random, b, 0o600))
	_, err := boltstore.Open(random, opts)
	require.ErrorIs(t, err, boltstore.ErrNotStore)
	assert.Equal(t, b, snapshot(t, random))

	held := filepath.Join(dir, "held.db")
	st := openStore(t, held, boltstore.Options{})
	before := snapshot(t, held)
	_, err = boltstore.Open(held, opts)
	require.ErrorIs(t, err, boltstore.ErrFileLocked)
	assert.Equal(t, before, snapshot(t, held))

	assert.False(t, called)
	left, err := filepath.Glob(filepath.Join(dir, "*.corrupt-*"))
	require.NoError(t, err)
	assert.Empty(t, left)
	require.NoError(t, st.Close())
}

// A device agent starts over when its state file is damaged: the file is
// moved aside and reported, and the agent gets an empty store.
func ExampleOptions_onCorrupt() {
	dir, err := os.MkdirTemp("", "boltstore-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "agent.db")
	// A state file cut short, as a power cut may leave it on an SD card.
	st, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _ = st.PutTarget(context.Background(), "agent", json.RawMessage(`{"image":"web:2"}`))
	_ = st.Close()
	_ = os.Truncate(path, 4096)

	st, err = boltstore.Open(path, boltstore.Options{
		OnCorrupt: func(r boltstore.Recovery) {
			// A real agent logs r.Err and r.MovedTo.
			fmt.Println("damaged:", errors.Is(r.Err, boltstore.ErrCorrupt))
			fmt.Println("kept as:", strings.TrimPrefix(r.MovedTo, path)[:9]+"...")
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	_, _, err = st.Target(context.Background(), "agent")
	fmt.Println("target:", errors.Is(err, converge.ErrStoreNotFound))
	// Output:
	// damaged: true
	// kept as: .corrupt-...
	// target: true
}
