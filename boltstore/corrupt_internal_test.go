package boltstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/convergekit/converge"
)

// TestReadOfDamagedEntry damages each kind of entry of an open store (as a
// disk changing under it would) and checks that the read that meets it
// fails with ErrCorrupt naming the key, never with the changed bytes.
func TestReadOfDamagedEntry(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		bucket []byte
		key    func() []byte
		read   func(s *Store) error
		names  string
	}{
		{"record", bucketRecords, func() []byte { return []byte("obj/a") }, func(s *Store) error {
			_, err := s.Get(ctx, "obj/a")
			return err
		}, `record "obj/a"`},
		{"record in a list", bucketRecords, func() []byte { return []byte("obj/a") }, func(s *Store) error {
			_, err := s.List(ctx, "obj/")
			return err
		}, `record "obj/a"`},
		{"record written over", bucketRecords, func() []byte { return []byte("obj/a") }, func(s *Store) error {
			_, err := s.Put(ctx, converge.StoreRecord{Key: "obj/a", Version: 1, Value: json.RawMessage(`2`)})
			return err
		}, `record "obj/a"`},
		{"history", bucketHistory, func() []byte { return historyKey(historyPrefix("obj/a"), 1) }, func(s *Store) error {
			_, err := s.History(ctx, "obj/a")
			return err
		}, `history of "obj/a"`},
		{"target", bucketTargets, func() []byte { return []byte("agent") }, func(s *Store) error {
			_, _, err := s.Target(ctx, "agent")
			return err
		}, `target "agent"`},
		{"lease", bucketLeases, func() []byte { return []byte("obj/b") }, func(s *Store) error {
			_, err := s.Claim(ctx, "obj/b", "me", time.Hour)
			return err
		}, `lease on "obj/b"`},
		{"due index", bucketDue, nil, func(s *Store) error {
			_, err := s.ClaimDue(ctx, "", "o", time.Minute, 10)
			return err
		}, `obj/a`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{Now: func() time.Time { return now }})
			require.NoError(t, err)
			defer s.Close()
			_, err = s.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`{"n":1}`)}, converge.HistoryEntry{At: now, To: "one"})
			require.NoError(t, err)
			_, err = s.Put(ctx, converge.StoreRecord{Key: "obj/b", Value: json.RawMessage(`{"n":2}`)})
			require.NoError(t, err)
			_, err = s.Claim(ctx, "obj/b", "me", time.Hour)
			require.NoError(t, err)
			_, err = s.PutTarget(ctx, "agent", json.RawMessage(`{"n":3}`))
			require.NoError(t, err)
			require.NoError(t, tc.read(s), "undamaged")

			// Change one bit of the stored bytes, keeping their length:
			// '1' becomes '3' in a value, or a bit of a sum.
			require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(tc.bucket)
				var k []byte
				if tc.key != nil {
					k = tc.key()
				} else {
					k, _ = b.Cursor().First()
				}
				v := append([]byte(nil), b.Get(k)...)
				require.NotEmpty(t, v, "entry %q", k)
				v[len(v)-sumSize/2-1] ^= 0x02
				return b.Put(k, v)
			}))
			err = tc.read(s)
			require.ErrorIs(t, err, ErrCorrupt)
			assert.Contains(t, err.Error(), tc.names)
			assert.Equal(t, 1, countPrefix(err.Error(), "boltstore: "), err.Error())
			require.NoError(t, s.Close())

			// Open refuses the file, naming the file and the entry.
			_, err = Open(s.path, Options{})
			require.ErrorIs(t, err, ErrCorrupt)
			var oe *OpenError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, s.path, oe.Path)
			assert.Contains(t, err.Error(), tc.names)
		})
	}
}

func countPrefix(s, p string) int {
	n := 0
	for i := 0; i+len(p) <= len(s); i++ {
		if s[i:i+len(p)] == p {
			n++
		}
	}
	return n
}

// writeFormat1 writes a store file of format version 1, as this package
// wrote it before entries had checksums: one record with a due time, its
// due entry and history, a lease and a target. value is the record's.
func writeFormat1(t *testing.T, path string, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		require.NoError(t, tx.Bucket(bucketMeta).Put(keyFormat, []byte("1")))
		rec := make([]byte, recordHead)
		rec[0], rec[1] = legacyRecordTag, flagDue|flagIndexed
		binary.BigEndian.PutUint64(rec[2:], 4)   // version
		binary.BigEndian.PutUint64(rec[10:], 77) // due
		binary.BigEndian.PutUint64(rec[18:], 77) // index
		require.NoError(t, tx.Bucket(bucketRecords).Put([]byte("obj/a"), append(rec, value...)))
		require.NoError(t, tx.Bucket(bucketDue).Put(dueKey(77, "obj/a"), nil))
		require.NoError(t, tx.Bucket(bucketHistory).Put(historyKey(historyPrefix("obj/a"), 1), []byte(`{"at":"2026-11-25T12:00:00Z","to":"ready"}`)))
		l := make([]byte, leaseHead)
		l[0] = legacyLeaseTag
		binary.BigEndian.PutUint64(l[2:], 9)              // token
		binary.BigEndian.PutUint64(l[10:], uint64(1)<<62) // expires, far ahead
		require.NoError(t, tx.Bucket(bucketLeases).Put([]byte("obj/b"), append(l, "old-owner"...)))
		return tx.Bucket(bucketTargets).Put([]byte("agent"), []byte(`{"t":1}`))
	}))
}

// TestFormat1IsUpgraded opens a file written before checksums: every
// entry reads as it was, and the file is now of the current format with a
// checksum on every entry, so a damaged one is found.
func TestFormat1IsUpgraded(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	writeFormat1(t, path, []byte(`{"old":true}`))

	s, err := Open(path, Options{})
	require.NoError(t, err)
	rec, err := s.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.Equal(t, uint64(4), rec.Version)
	assert.JSONEq(t, `{"old":true}`, string(rec.Value))
	hist, err := s.History(ctx, "obj/a")
	require.NoError(t, err)
	require.Len(t, hist, 1)
	assert.Equal(t, "ready", hist[0].To)
	target, _, err := s.Target(ctx, "agent")
	require.NoError(t, err)
	assert.JSONEq(t, `{"t":1}`, string(target))
	var ce *converge.ClaimError
	_, err = s.Claim(ctx, "obj/b", "me", time.Minute)
	require.ErrorAs(t, err, &ce, "the old lease is kept")
	assert.Equal(t, "old-owner", ce.Holder)
	due, err := s.ClaimDue(ctx, "", "me", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, due, 1, "the old due entry is kept")
	assert.Equal(t, "obj/a", due[0].Record.Key)
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		assert.Equal(t, "2", string(tx.Bucket(bucketMeta).Get(keyFormat)))
		return verify(tx, FormatVersion)
	}))
	require.NoError(t, s.Close())

	// Opened again, it is a current file.
	s, err = Open(path, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// TestFormat1Damaged: a format 1 entry that cannot be what this package
// wrote fails Open with ErrCorrupt, and the file is not upgraded.
func TestFormat1Damaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	writeFormat1(t, path, []byte(`{"old":tru`))
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	_, err = Open(path, Options{})
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), `record "obj/a" (format 1)`)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a damaged file is not written to")
}

// TestFormat1ReadOnly: opened read-only, a file of format 1 is refused
// with ErrReadOnly (it needs the upgrade an Open for writing makes) and
// left as it is.
func TestFormat1ReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	writeFormat1(t, path, []byte(`{"old":true}`))
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	_, err = Open(path, Options{ReadOnly: true})
	require.ErrorIs(t, err, ErrReadOnly)
	assert.Contains(t, err.Error(), "format version 1")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after)
}
