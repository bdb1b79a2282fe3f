package boltstore_test

import (
	"context"
	"encoding/binary"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
)

// goodStoreBytes writes a store of a few records at path and returns the
// file's bytes and its page size (bbolt's: the OS page size).
func goodStoreBytes(t *testing.T, path string) ([]byte, int) {
	t.Helper()
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	for i := range 50 {
		_, err := st.Put(context.Background(), converge.StoreRecord{Key: "obj/" + strings.Repeat("k", i%7+1) + string(rune('a'+i%26)) + string(rune('a'+i/26)), Value: raw(`{"pad":"0123456789"}`)})
		require.NoError(t, err)
	}
	require.NoError(t, st.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b, os.Getpagesize()
}

// TestMetaPagesDestroyed: a store file whose two meta pages are destroyed
// is a damaged store (ErrCorrupt), which OnCorrupt moves aside, and not
// another program's file; files that never were stores stay ErrNotStore
// and are left alone.
func TestMetaPagesDestroyed(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(4, 12))
	fill := func(b []byte, from, to int, random bool) {
		for i := from; i < to; i++ {
			if random {
				b[i] = byte(rng.IntN(256))
			} else {
				b[i] = 0
			}
		}
	}
	good, ps := goodStoreBytes(t, filepath.Join(t.TempDir(), "good.db"))
	require.Zero(t, len(good)%ps)
	for _, tc := range []struct {
		name    string
		file    func() []byte
		corrupt bool
	}{
		{name: "meta pages zeroed", corrupt: true, file: func() []byte {
			b := append([]byte(nil), good...)
			fill(b, 0, 2*ps, false)
			return b
		}},
		{name: "meta pages overwritten", corrupt: true, file: func() []byte {
			b := append([]byte(nil), good...)
			fill(b, 0, 2*ps, true)
			return b
		}},
		{name: "meta pages and the free list zeroed", corrupt: true, file: func() []byte {
			b := append([]byte(nil), good...)
			fill(b, 0, 3*ps, false)
			return b
		}},
		{name: "random bytes", file: func() []byte {
			b := make([]byte, 16*ps)
			fill(b, 0, len(b), true)
			return b
		}},
		{name: "zeros", file: func() []byte { return make([]byte, 16*ps) }},
		{name: "text", file: func() []byte { return []byte(strings.Repeat("gpu_mem=128\narm_boost=1\n", 4*ps/8)) }},
		{name: "page numbers without a bbolt kind", file: func() []byte {
			b := make([]byte, 8*ps)
			for id := 2; id < 8; id++ {
				binary.NativeEndian.PutUint64(b[id*ps:], uint64(id))
				binary.NativeEndian.PutUint16(b[id*ps+8:], 0x40)
			}
			return b
		}},
		{name: "store pages in a file of another size", file: func() []byte {
			b := append([]byte(nil), good...)
			fill(b, 0, 2*ps, false)
			return append(b, 'x')
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "agent.db")
			content := tc.file()
			require.NoError(t, os.WriteFile(path, content, 0o600))
			_, err := boltstore.Open(path, boltstore.Options{LockTimeout: -1})
			var oe *boltstore.OpenError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, path, oe.Path)
			assert.Equal(t, content, snapshot(t, path), "Open wrote nothing")
			var got []boltstore.Recovery
			st, rerr := boltstore.Open(path, boltstore.Options{LockTimeout: -1, OnCorrupt: func(r boltstore.Recovery) { got = append(got, r) }})
			if !tc.corrupt {
				require.ErrorIs(t, err, boltstore.ErrNotStore)
				require.ErrorIs(t, rerr, boltstore.ErrNotStore)
				assert.Empty(t, got)
				assert.Equal(t, content, snapshot(t, path), "another program's file is left alone")
				return
			}
			require.ErrorIs(t, err, boltstore.ErrCorrupt)
			assert.NotErrorIs(t, err, boltstore.ErrNotStore)
			assert.Contains(t, err.Error(), "both meta pages are damaged")
			require.NoError(t, rerr)
			require.Len(t, got, 1)
			assert.Equal(t, content, snapshot(t, got[0].MovedTo), "moved aside as it was")
			list, err := st.List(context.Background(), "")
			require.NoError(t, err)
			assert.Empty(t, list, "a new store took its place")
			require.NoError(t, st.Close())
		})
	}
}
