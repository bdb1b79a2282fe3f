package boltstore_test

import (
	"context"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
)

// TestReadOnly opens a store file for reading only: it reads what a
// writer left, refuses every write with ErrReadOnly naming the call, shares
// the file with another reader, and leaves the file's bytes as they were.
func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	w := openStore(t, path, boltstore.Options{})
	_, err := w.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: raw(`{"n":1}`)}, converge.HistoryEntry{At: time.Unix(1, 0), To: "ready"})
	require.NoError(t, err)
	_, err = w.PutTarget(ctx, "agent", raw(`{"t":1}`))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	before := snapshot(t, path)

	r1, err := boltstore.Open(path, boltstore.Options{ReadOnly: true, LockTimeout: -1})
	require.NoError(t, err)
	defer r1.Close()
	r2, err := boltstore.Open(path, boltstore.Options{ReadOnly: true, LockTimeout: -1})
	require.NoError(t, err, "readers share the file")
	defer r2.Close()

	rec, err := r1.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.JSONEq(t, `{"n":1}`, string(rec.Value))
	hist, err := r2.History(ctx, "obj/a")
	require.NoError(t, err)
	require.Len(t, hist, 1)
	target, rev, err := r1.Target(ctx, "agent")
	require.NoError(t, err)
	assert.JSONEq(t, `{"t":1}`, string(target))
	assert.Equal(t, uint64(1), rev)

	for _, tc := range []struct {
		name  string // the culprit the error names
		write func() error
	}{
		{`"obj/a"`, func() error {
			_, err := r1.Put(ctx, converge.StoreRecord{Key: "obj/a", Version: rec.Version, Value: raw(`{"n":2}`)})
			return err
		}},
		{`"obj/a"`, func() error { return r1.Delete(ctx, "obj/a", rec.Version) }},
		{`"agent"`, func() error { _, err := r1.PutTarget(ctx, "agent", raw(`{}`)); return err }},
		{`"obj/a"`, func() error { _, err := r1.Claim(ctx, "obj/a", "me", time.Minute); return err }},
		{`"obj/a"`, func() error { return r1.Schedule(ctx, "obj/a", time.Now()) }},
		{`"obj/"`, func() error { _, err := r1.ClaimDue(ctx, "obj/", "me", time.Minute, 1); return err }},
	} {
		err := tc.write()
		require.ErrorIs(t, err, boltstore.ErrReadOnly)
		assert.Contains(t, err.Error(), tc.name)
	}

	// A writer cannot open the file while a reader has it, and neither can
	// a reader while a writer has it.
	_, err = boltstore.Open(path, boltstore.Options{LockTimeout: -1})
	require.ErrorIs(t, err, boltstore.ErrFileLocked)
	require.NoError(t, r1.Close())
	require.NoError(t, r2.Close())
	assert.Equal(t, before, snapshot(t, path), "nothing was written")

	w = openStore(t, path, boltstore.Options{LockTimeout: -1})
	_, err = boltstore.Open(path, boltstore.Options{ReadOnly: true, LockTimeout: 30 * time.Millisecond})
	require.ErrorIs(t, err, boltstore.ErrFileLocked)
	require.NoError(t, w.Close())
}

// TestReadOnlyNeedsAStore: opened read-only, a file that would need a
// write first is refused and left as it was: a missing file is not
// created, an empty file or a bbolt file with no store yet is refused with
// ErrReadOnly.
func TestReadOnlyNeedsAStore(t *testing.T) {
	dir := t.TempDir()
	missing := dir + "/missing.db"
	_, err := boltstore.Open(missing, boltstore.Options{ReadOnly: true})
	require.ErrorIs(t, err, fs.ErrNotExist)
	var oe *boltstore.OpenError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, missing, oe.Path)
	_, err = os.Stat(missing)
	require.ErrorIs(t, err, fs.ErrNotExist, "not created")

	empty := dir + "/empty.db"
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = boltstore.Open(empty, boltstore.Options{ReadOnly: true})
	require.ErrorIs(t, err, boltstore.ErrReadOnly)
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, empty, oe.Path)
	assert.Empty(t, snapshot(t, empty))

	bare := dir + "/bare.db"
	db, err := bolt.Open(bare, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before := snapshot(t, bare)
	_, err = boltstore.Open(bare, boltstore.Options{ReadOnly: true})
	require.ErrorIs(t, err, boltstore.ErrReadOnly)
	assert.Contains(t, err.Error(), "no store yet")
	assert.Equal(t, before, snapshot(t, bare))
}
