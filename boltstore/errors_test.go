package boltstore_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
)

// TestOpenBadFiles checks that a file that is not a store is refused with
// an error naming it, and left as it was.
func TestOpenBadFiles(t *testing.T) {
	dir := t.TempDir()
	random := make([]byte, 64<<10)
	_, _ = rand.Read(random)
	otherBolt := filepath.Join(dir, "other.db")
	db, err := bolt.Open(otherBolt, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("settings"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	}))
	require.NoError(t, db.Close())

	for _, tc := range []struct {
		name    string
		path    string
		content []byte // nil: a directory, or the file above
		want    error
	}{
		{"random bytes", "random.db", random, boltstore.ErrNotStore},
		{"short random bytes", "short.db", random[:100], boltstore.ErrNotStore},
		{"text file", "notes.txt", []byte(strings.Repeat("hello, this is not a database\n", 500)), boltstore.ErrNotStore},
		{"directory", "adir", nil, boltstore.ErrNotStore},
		{"another program's bbolt file", "other.db", nil, boltstore.ErrNotStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.path)
			switch {
			case tc.content != nil:
				require.NoError(t, os.WriteFile(path, tc.content, 0o600))
			case tc.path == "adir":
				require.NoError(t, os.Mkdir(path, 0o700))
			}
			before := snapshot(t, path)
			st, err := boltstore.Open(path, boltstore.Options{})
			require.Error(t, err)
			assert.Nil(t, st)
			require.ErrorIs(t, err, tc.want)
			var oe *boltstore.OpenError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, path, oe.Path)
			assert.Contains(t, err.Error(), path, "the message names the file")
			assert.True(t, strings.HasPrefix(err.Error(), "boltstore: "), err.Error())
			assert.Equal(t, before, snapshot(t, path), "the file was not written to")
		})
	}
}

// snapshot returns the bytes of the file at path ("dir" for a directory).
func snapshot(t *testing.T, path string) []byte {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	if fi.IsDir() {
		return []byte("dir")
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func TestOpenEmptyFileMakesAStore(t *testing.T) {
	path := tempPath(t)
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	st := openStore(t, path, boltstore.Options{})
	_, err := st.Put(context.Background(), converge.StoreRecord{Key: "k", Value: raw(`1`)})
	require.NoError(t, err)
}

func TestOpenMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "state.db")
	_, err := boltstore.Open(path, boltstore.Options{})
	var oe *boltstore.OpenError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, path, oe.Path)
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.NotErrorIs(t, err, boltstore.ErrNotStore)
	assert.Equal(t, 1, strings.Count(err.Error(), path), "the path is named once: %s", err)

	_, err = boltstore.Open("", boltstore.Options{})
	require.ErrorIs(t, err, converge.ErrStoreInvalid)
}

func TestOpenLocked(t *testing.T) {
	path := tempPath(t)
	st := openStore(t, path, boltstore.Options{})
	_, err := st.Put(context.Background(), converge.StoreRecord{Key: "k", Value: raw(`1`)})
	require.NoError(t, err)
	before := snapshot(t, path)

	// A lock is held per open file, so a second Open in this process meets
	// it like another process would (the crash tests open the same file
	// from separate processes one after the other).
	_, err = boltstore.Open(path, boltstore.Options{LockTimeout: -1})
	require.ErrorIs(t, err, boltstore.ErrFileLocked)
	var oe *boltstore.OpenError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, path, oe.Path)
	assert.Contains(t, err.Error(), path)
	_, err = boltstore.Open(path, boltstore.Options{LockTimeout: 60 * time.Millisecond})
	require.ErrorIs(t, err, boltstore.ErrFileLocked)
	assert.Equal(t, before, snapshot(t, path))

	require.NoError(t, st.Close())
	again := openStore(t, path, boltstore.Options{LockTimeout: -1})
	rec, err := again.Get(context.Background(), "k")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), rec.Version)
}

func TestOpenNewerFormat(t *testing.T) {
	path := tempPath(t)
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("format"), []byte("99"))
	}))
	require.NoError(t, db.Close())
	before := snapshot(t, path)

	_, err = boltstore.Open(path, boltstore.Options{})
	require.ErrorIs(t, err, boltstore.ErrNewerFormat)
	var oe *boltstore.OpenError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, path, oe.Path)
	assert.Contains(t, err.Error(), "99")
	assert.Equal(t, before, snapshot(t, path))
}

// TestBadRequests checks the typed errors of invalid calls, and that they
// write nothing.
func TestBadRequests(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, tempPath(t), boltstore.Options{})
	v, err := st.Put(ctx, converge.StoreRecord{Key: "k", Value: raw(`{"ok":true}`)}, converge.HistoryEntry{To: "one"})
	require.NoError(t, err)
	long := strings.Repeat("x", bolt.MaxKeySize)
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"invalid JSON", func() error {
			_, err := st.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: raw(`{"ok":`)}, converge.HistoryEntry{To: "bad"})
			return err
		}, "Value"},
		{"empty value", func() error {
			_, err := st.Put(ctx, converge.StoreRecord{Key: "k", Version: v}, converge.HistoryEntry{To: "bad"})
			return err
		}, "Value"},
		{"empty key", func() error {
			_, err := st.Put(ctx, converge.StoreRecord{Value: raw(`1`)})
			return err
		}, "Key"},
		{"key too long", func() error {
			_, err := st.Put(ctx, converge.StoreRecord{Key: long, Value: raw(`1`)})
			return err
		}, "Key"},
		{"invalid target", func() error { _, err := st.PutTarget(ctx, "t", raw(`nope`)); return err }, "target"},
		{"empty target name", func() error { _, err := st.PutTarget(ctx, "", raw(`1`)); return err }, "name"},
		{"empty owner", func() error { _, err := st.Claim(ctx, "k", "", time.Minute); return err }, "owner"},
		{"zero ttl", func() error { _, err := st.Claim(ctx, "k", "o", 0); return err }, "ttl"},
		{"empty claim key", func() error { _, err := st.Claim(ctx, "", "o", time.Minute); return err }, "key"},
		{"zero limit", func() error { _, err := st.ClaimDue(ctx, "", "o", time.Minute, 0); return err }, "limit"},
		{"ClaimDue without owner", func() error { _, err := st.ClaimDue(ctx, "", "", time.Minute, 1); return err }, "owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, converge.ErrStoreInvalid)
			var re *converge.StoreRequestError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.field, re.Field)
		})
	}
	rec, err := st.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, v, rec.Version)
	assert.JSONEq(t, `{"ok":true}`, string(rec.Value))
	hist, err := st.History(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []string{"one"}, tos(hist))
	_, _, err = st.Target(ctx, "t")
	require.ErrorIs(t, err, converge.ErrStoreNotFound)
	got, err := st.ClaimDue(ctx, "", "o", time.Minute, 10)
	require.NoError(t, err)
	assert.Len(t, got, 1, "no refused claim took the record")
}

func TestCancelledContext(t *testing.T) {
	st := openStore(t, tempPath(t), boltstore.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := st.Put(ctx, converge.StoreRecord{Key: "k", Value: raw(`1`)})
	require.ErrorIs(t, err, context.Canceled)
	_, err = st.Get(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	_, err = st.List(ctx, "")
	require.ErrorIs(t, err, context.Canceled)
	_, err = st.PutTarget(ctx, "t", raw(`1`))
	require.ErrorIs(t, err, context.Canceled)
	_, err = st.ClaimDue(ctx, "", "o", time.Minute, 1)
	require.ErrorIs(t, err, context.Canceled)
	_, err = st.Get(context.Background(), "k")
	require.ErrorIs(t, err, converge.ErrStoreNotFound)
}

func TestClosedStore(t *testing.T) {
	st, err := boltstore.Open(tempPath(t), boltstore.Options{})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	_, err = st.Put(context.Background(), converge.StoreRecord{Key: "k", Value: raw(`1`)})
	require.ErrorIs(t, err, boltstore.ErrClosed)
	_, err = st.Get(context.Background(), "k")
	require.ErrorIs(t, err, boltstore.ErrClosed)
}

// TestSealedAtRest reads the raw file: the secret is not there in clear,
// and a store without the Sealer (or with another one) refuses the value.
func TestSealedAtRest(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	const secret = "hunter2-very-secret-token"
	sealer := xorSealer{"key-one"}
	st, err := boltstore.Open(path, boltstore.Options{Sealer: sealer})
	require.NoError(t, err)
	val, _ := json.Marshal(map[string]string{"password": secret})
	_, err = st.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: val}, converge.HistoryEntry{To: "ready"})
	require.NoError(t, err)
	_, err = st.PutTarget(ctx, "agent", val)
	require.NoError(t, err)
	rec, err := st.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.JSONEq(t, string(val), string(rec.Value))
	list, err := st.List(ctx, "obj/")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.JSONEq(t, string(val), string(list[0].Value))
	require.NoError(t, st.Close())

	file, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.False(t, bytes.Contains(file, []byte(secret)), "the secret is in the file in clear")
	assert.True(t, bytes.Contains(file, []byte("obj/a")), "keys stay in clear")

	for _, tc := range []struct {
		name   string
		sealer converge.Sealer
	}{{"no sealer", nil}, {"another key", xorSealer{"key-two"}}} {
		t.Run(tc.name, func(t *testing.T) {
			other := openStore(t, path, boltstore.Options{Sealer: tc.sealer})
			_, err := other.Get(ctx, "obj/a")
			require.ErrorIs(t, err, converge.ErrSealed)
			assert.NotContains(t, err.Error(), secret)
			_, _, err = other.Target(ctx, "agent")
			require.ErrorIs(t, err, converge.ErrSealed)
			_, err = other.List(ctx, "")
			require.ErrorIs(t, err, converge.ErrSealed)
			_, err = other.ClaimDue(ctx, "", "o", time.Minute, 10)
			require.ErrorIs(t, err, converge.ErrSealed)
			// A refused ClaimDue claimed nothing.
			l, err := other.Claim(ctx, "obj/a", "x", time.Minute)
			require.NoError(t, err)
			require.NoError(t, other.Release(ctx, l))
			hist, err := other.History(ctx, "obj/a")
			require.NoError(t, err, "history is in clear")
			assert.Equal(t, []string{"ready"}, tos(hist))
			require.NoError(t, other.Close())
		})
	}

}

// TestSealedFailsClosed writes clear values (as before sealing was turned
// on, or by a writer bypassing the Sealer, over a sealed value): a store
// with a Sealer refuses them with ErrNotSealed, unless AllowClear accepts
// them for the migration, which converge.Reseal then completes.
func TestSealedFailsClosed(t *testing.T) {
	ctx := context.Background()
	sealer, err := converge.NewAESGCMSealer(bytes.Repeat([]byte{1}, 32))
	require.NoError(t, err)
	path := tempPath(t)
	sealed := openStore(t, path, boltstore.Options{Sealer: sealer})
	v, err := sealed.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: raw(`{"pw":"hunter2"}`)})
	require.NoError(t, err)
	_, err = sealed.PutTarget(ctx, "device", raw(`{"t":"hunter2"}`))
	require.NoError(t, err)
	require.NoError(t, sealed.Close())

	clear := openStore(t, path, boltstore.Options{})
	_, err = clear.Put(ctx, converge.StoreRecord{Key: "obj/a", Version: v, Value: raw(`{"pw":"planted"}`)})
	require.NoError(t, err)
	_, err = clear.Put(ctx, converge.StoreRecord{Key: "obj/b", Value: raw(`{"b":1}`)})
	require.NoError(t, err)
	_, err = clear.PutTarget(ctx, "device", raw(`{"t":"planted"}`))
	require.NoError(t, err)
	require.NoError(t, clear.Close())

	strict := openStore(t, path, boltstore.Options{Sealer: sealer})
	reads := map[string]func() error{
		"Get":    func() error { _, err := strict.Get(ctx, "obj/a"); return err },
		"List":   func() error { _, err := strict.List(ctx, ""); return err },
		"Target": func() error { _, _, err := strict.Target(ctx, "device"); return err },
		"ClaimDue": func() error {
			_, err := strict.ClaimDue(ctx, "", "o", time.Minute, 10)
			return err
		},
	}
	for name, read := range reads {
		err := read()
		require.ErrorIs(t, err, converge.ErrNotSealed, name)
		assert.NotErrorIs(t, err, converge.ErrSealed, name)
		assert.NotContains(t, err.Error(), "planted", name)
	}
	require.NoError(t, strict.Close())

	migrate := openStore(t, path, boltstore.Options{Sealer: sealer, AllowClear: true})
	rec, err := migrate.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.JSONEq(t, `{"pw":"planted"}`, string(rec.Value))
	n, err := converge.Reseal(ctx, migrate, "device")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	require.NoError(t, migrate.Close())

	after := openStore(t, path, boltstore.Options{Sealer: sealer})
	recs, err := after.List(ctx, "")
	require.NoError(t, err, "every value is sealed now")
	assert.Len(t, recs, 2)
	tg, _, err := after.Target(ctx, "device")
	require.NoError(t, err)
	assert.JSONEq(t, `{"t":"planted"}`, string(tg))
}

// TestSealedFormat1FileOpens opens a file written by converge before
// sealed values named their key (testdata/sealed-format1.db.gz: written by
// boltstore at commit 2c8a87c with NewAESGCMSealer and the key of 32 bytes
// 0x01; record "obj/a" = {"pw":"hunter2"} with one history entry, target
// "device" = {"env":{"TOKEN":"hunter2"}}). A keyring holding the key opens
// it, Reseal rewrites it under the keyring's newest key, and then the old
// key can go. A keyring without the key refuses it with ErrSealed.
func TestSealedFormat1FileOpens(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	gz, err := os.Open(filepath.Join("testdata", "sealed-format1.db.gz"))
	require.NoError(t, err)
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	require.NoError(t, err)
	b, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))

	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	without, err := converge.NewAESGCMKeyring(newKey)
	require.NoError(t, err)
	st := openStore(t, path, boltstore.Options{Sealer: without})
	_, err = st.Get(ctx, "obj/a")
	require.ErrorIs(t, err, converge.ErrSealed)
	require.NoError(t, st.Close())

	both, err := converge.NewAESGCMKeyring(oldKey, newKey)
	require.NoError(t, err)
	st = openStore(t, path, boltstore.Options{Sealer: both})
	rec, err := st.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.JSONEq(t, `{"pw":"hunter2"}`, string(rec.Value))
	n, err := converge.Reseal(ctx, st, "device")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	require.NoError(t, st.Close())

	st = openStore(t, path, boltstore.Options{Sealer: without})
	rec, err = st.Get(ctx, "obj/a")
	require.NoError(t, err, "resealed under the new key")
	assert.JSONEq(t, `{"pw":"hunter2"}`, string(rec.Value))
	tg, _, err := st.Target(ctx, "device")
	require.NoError(t, err)
	assert.JSONEq(t, `{"env":{"TOKEN":"hunter2"}}`, string(tg))
	hist, err := st.History(ctx, "obj/a")
	require.NoError(t, err)
	assert.Equal(t, []string{"ready"}, tos(hist), "history kept")
}

// TestTargetEntries checks the target entries the file may hold: a bare
// value written before revisions were kept reads as revision 1 and the
// next target is revision 2; a damaged entry is ErrCorrupt naming the
// target, for reads and writes alike, and changes nothing.
func TestTargetEntries(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		entry   []byte
		corrupt bool
	}{
		{"bare JSON value", []byte(`{"image":"web:1"}`), false},
		{"empty entry", []byte{}, true},
		{"short head", []byte{1, 1, 0, 0}, true},
		{"value without its flag", append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}, `{}`...), true},
		{"revision above the last", []byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, '1'}, true},
		{"no revision taken", []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tempPath(t)
			st, err := boltstore.Open(path, boltstore.Options{})
			require.NoError(t, err)
			require.NoError(t, st.Close())
			db, err := bolt.Open(path, 0o600, nil)
			require.NoError(t, err)
			require.NoError(t, db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket([]byte("targets")).Put([]byte("agent"), withTargetSum("agent", tc.entry))
			}))
			require.NoError(t, db.Close())

			if tc.corrupt {
				// The entry's sum is right but its content is not: Open
				// checks every entry and refuses the file, naming the target.
				_, err := boltstore.Open(path, boltstore.Options{})
				require.ErrorIs(t, err, boltstore.ErrCorrupt)
				assert.Equal(t, 1, strings.Count(err.Error(), `"agent"`), "the target named once: %v", err)
				return
			}
			st = openStore(t, path, boltstore.Options{})
			got, rev, err := st.Target(ctx, "agent")
			require.NoError(t, err)
			assert.JSONEq(t, string(tc.entry), string(got))
			assert.Equal(t, uint64(1), rev)
			rev, err = st.PutTarget(ctx, "agent", raw(`{"image":"web:2"}`))
			require.NoError(t, err)
			assert.Equal(t, uint64(2), rev)
		})
	}
}

// withTargetSum appends to entry the checksum that format 2 keeps after
// every target entry: CRC-32C (Castagnoli) over the kind 't', the key's
// length as a uvarint, the key and the entry.
func withTargetSum(key string, entry []byte) []byte {
	pre := binary.AppendUvarint([]byte{'t'}, uint64(len(key)))
	tab := crc32.MakeTable(crc32.Castagnoli)
	c := crc32.Update(0, tab, pre)
	c = crc32.Update(c, tab, []byte(key))
	c = crc32.Update(c, tab, entry)
	return binary.BigEndian.AppendUint32(append([]byte(nil), entry...), c)
}
