package converge_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

func testSealKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func newTestSealer(t testing.TB, b byte) converge.Sealer {
	t.Helper()
	s, err := converge.NewAESGCMSealer(testSealKey(b))
	require.NoError(t, err)
	return s
}

func TestAESGCMSealerKeyLength(t *testing.T) {
	for _, n := range []int{0, 1, 15, 17, 31, 33, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			key := bytes.Repeat([]byte{'#'}, n)
			_, err := converge.NewAESGCMSealer(key)
			require.ErrorIs(t, err, converge.ErrInvalidConfig)
			var ce *converge.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "sealer key", ce.Field)
			if n > 0 {
				assert.NotContains(t, err.Error(), string(key), "the key is never printed")
			}
		})
	}
	for _, n := range []int{16, 24, 32} {
		_, err := converge.NewAESGCMSealer(make([]byte, n))
		require.NoError(t, err, "%d bytes", n)
	}
}

func TestAESGCMSealerRoundTrip(t *testing.T) {
	s := newTestSealer(t, 1)
	plain := []byte(`{"env":{"TOKEN":"hunter2"}}`)
	sealed, err := s.Seal("device", plain)
	require.NoError(t, err)
	assert.Equal(t, byte(0), sealed[0], "a sealed value starts with a zero byte")
	assert.Equal(t, byte(2), sealed[1], "format version")
	assert.Equal(t, converge.SealKeyID(testSealKey(1)), hex.EncodeToString(sealed[2:10]), "the key ID")
	assert.Len(t, sealed, 2+8+12+len(plain)+16)
	assert.NotContains(t, string(sealed), "hunter2")

	again, err := s.Seal("device", plain)
	require.NoError(t, err)
	assert.NotEqual(t, sealed, again, "a random nonce per seal")

	got, err := s.Open("device", sealed)
	require.NoError(t, err)
	assert.Equal(t, plain, got)
}

func TestAESGCMSealerOpenRefuses(t *testing.T) {
	s := newTestSealer(t, 1)
	sealed, err := s.Seal("obj/a", []byte(`{"secret":1}`))
	require.NoError(t, err)
	flip := func(i int) []byte {
		b := bytes.Clone(sealed)
		b[i] ^= 0x01
		return b
	}
	tests := []struct {
		name   string
		opener converge.Sealer
		key    string
		value  []byte
	}{
		{"other sealer key", newTestSealer(t, 2), "obj/a", sealed},
		{"other store key", s, "obj/b", sealed},
		{"altered version", s, "obj/a", flip(1)},
		{"altered key ID", s, "obj/a", flip(5)},
		{"altered nonce", s, "obj/a", flip(12)},
		{"altered ciphertext", s, "obj/a", flip(20)},
		{"altered tag", s, "obj/a", flip(len(sealed) - 1)},
		{"truncated", s, "obj/a", sealed[:len(sealed)-1]},
		{"header only", s, "obj/a", sealed[:10]},
		{"format only", s, "obj/a", sealed[:2]},
		{"format 1 header", s, "obj/a", append([]byte{0, 1}, sealed[10:]...)},
		{"unknown format", s, "obj/a", append([]byte{0, 3}, sealed[2:]...)},
		{"zero byte only", s, "obj/a", []byte{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.opener.Open(tt.key, tt.value)
			require.ErrorIs(t, err, converge.ErrSealed)
			assert.Nil(t, got)
		})
	}
}

func TestAESGCMSealerOpenRefusesClearValue(t *testing.T) {
	s := newTestSealer(t, 1)
	for _, v := range []string{`{"v":1}`, `"x"`, `1`, ``} {
		got, err := s.Open("k", []byte(v))
		require.ErrorIs(t, err, converge.ErrNotSealed, "%q", v)
		assert.NotErrorIs(t, err, converge.ErrSealed)
		assert.Nil(t, got)
	}
}

func TestMemStoreSealsValuesAndTargets(t *testing.T) {
	ctx := context.Background()
	sealer := &recordingSealer{Sealer: newTestSealer(t, 1)}
	s := &converge.MemStore{Sealer: sealer}

	v, err := s.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`{"pw":"hunter2"}`)})
	require.NoError(t, err)
	_, err = s.PutTarget(ctx, "device", json.RawMessage(`{"env":"hunter2"}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"record\x00obj/a", "target\x00device"}, sealer.sealed,
		"values and targets are sealed under their key, records and targets apart")

	rec, err := s.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.Equal(t, converge.StoreRecord{Key: "obj/a", Version: v, Value: json.RawMessage(`{"pw":"hunter2"}`)}, rec)
	recs, err := s.List(ctx, "obj/")
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.JSONEq(t, `{"pw":"hunter2"}`, string(recs[0].Value))
	tg, _, err := s.Target(ctx, "device")
	require.NoError(t, err)
	assert.JSONEq(t, `{"env":"hunter2"}`, string(tg))
	claimed, err := s.ClaimDue(ctx, "obj/", "me", 60e9, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	assert.JSONEq(t, `{"pw":"hunter2"}`, string(claimed[0].Record.Value))

	// The same storage read without the Sealer refuses the sealed values.
	s.Sealer = nil
	_, err = s.Get(ctx, "obj/a")
	require.ErrorIs(t, err, converge.ErrSealed)
	_, err = s.List(ctx, "")
	require.ErrorIs(t, err, converge.ErrSealed)
	_, _, err = s.Target(ctx, "device")
	require.ErrorIs(t, err, converge.ErrSealed)
	assert.NotContains(t, err.Error(), "hunter2")

	// And with another key.
	s.Sealer = newTestSealer(t, 2)
	_, err = s.Get(ctx, "obj/a")
	require.ErrorIs(t, err, converge.ErrSealed)
	assert.Contains(t, err.Error(), `"obj/a"`, "the error names the record")
}

func TestMemStoreSealerErrorsMatchErrSealed(t *testing.T) {
	ctx := context.Background()
	s := &converge.MemStore{Sealer: brokenSealer{}}
	_, err := s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	_, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, converge.ErrSealed, "an Open error that does not say so still matches ErrSealed")
	_, err = s.ClaimDue(ctx, "", "me", 60e9, 10)
	require.ErrorIs(t, err, converge.ErrSealed)
	claimed, err := (&converge.MemStore{}).ClaimDue(ctx, "", "me", 60e9, 10)
	require.NoError(t, err)
	assert.Empty(t, claimed)

	s.Sealer = failingSealer{}
	_, err = s.Put(ctx, converge.StoreRecord{Key: "k2", Value: json.RawMessage(`1`)})
	require.ErrorIs(t, err, errSealFailed)
	_, err = s.PutTarget(ctx, "t", json.RawMessage(`1`))
	require.ErrorIs(t, err, errSealFailed)
	s.Sealer = nil
	_, err = s.Get(ctx, "k2")
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "nothing written when sealing fails")
}

type recordingSealer struct {
	converge.Sealer
	sealed []string
}

func (r *recordingSealer) Seal(key string, plain []byte) ([]byte, error) {
	r.sealed = append(r.sealed, key)
	return r.Sealer.Seal(key, plain)
}

// brokenSealer seals by prefixing a zero byte and cannot open anything.
type brokenSealer struct{}

func (brokenSealer) Seal(_ string, p []byte) ([]byte, error) { return append([]byte{0}, p...), nil }
func (brokenSealer) Open(string, []byte) ([]byte, error)     { return nil, fmt.Errorf("no") }

var errSealFailed = fmt.Errorf("seal failed")

type failingSealer struct{ brokenSealer }

func (failingSealer) Seal(string, []byte) ([]byte, error) { return nil, errSealFailed }

// FuzzAESGCMSealerOpen alters sealed values and opens arbitrary bytes:
// Open never panics, and never returns a plaintext other than the one
// sealed: an altered sealed value fails with ErrSealed, and a value that
// does not start with a zero byte with ErrNotSealed.
func FuzzAESGCMSealerOpen(f *testing.F) {
	f.Add([]byte(`{"a":1}`), "k", uint16(0), byte(0), uint16(0))
	f.Add([]byte(`{"a":1}`), "k", uint16(3), byte(0x80), uint16(0))
	f.Add([]byte(``), "", uint16(0), byte(1), uint16(5))
	f.Add([]byte(`"secret"`), "obj/x", uint16(40), byte(0xff), uint16(1))
	s, err := converge.NewAESGCMSealer(testSealKey(7))
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, plain []byte, key string, pos uint16, mask byte, cut uint16) {
		sealed, err := s.Seal(key, plain)
		require.NoError(t, err)
		v := bytes.Clone(sealed)
		v[int(pos)%len(v)] ^= mask
		v = v[:len(v)-int(cut)%(len(v)+1)]
		altered := !bytes.Equal(v, sealed)

		got, err := s.Open(key, v)
		switch {
		case !altered:
			require.NoError(t, err)
			assert.True(t, bytes.Equal(plain, got), "round trip")
		case len(v) == 0 || v[0] != 0:
			require.ErrorIs(t, err, converge.ErrNotSealed, "a clear value is refused")
			assert.Nil(t, got)
		default:
			require.ErrorIs(t, err, converge.ErrSealed)
			assert.Nil(t, got)
		}

		// The raw input itself, opened as a stored value.
		got, err = s.Open(key, plain)
		if len(plain) == 0 || plain[0] != 0 {
			require.ErrorIs(t, err, converge.ErrNotSealed)
		} else {
			require.ErrorIs(t, err, converge.ErrSealed)
		}
		assert.Nil(t, got)
		if key != "" {
			_, err = s.Open(strings.ToUpper(key)+"x", sealed)
			require.ErrorIs(t, err, converge.ErrSealed, "another store key")
		}
	})
}

func ExampleNewAESGCMSealer() {
	// The key comes from outside the store; 32 bytes select AES-256.
	key := bytes.Repeat([]byte{0x42}, 32)
	sealer, err := converge.NewAESGCMSealer(key)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	store := &converge.MemStore{Sealer: sealer}
	if _, err := store.PutTarget(ctx, "device", json.RawMessage(`{"env":{"API_TOKEN":"s3cret"}}`)); err != nil {
		fmt.Println(err)
		return
	}
	target, _, err := store.Target(ctx, "device")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(target))

	_, err = converge.NewAESGCMSealer([]byte("too short"))
	fmt.Println(err)
	// Output:
	// {"env":{"API_TOKEN":"s3cret"}}
	// converge: config sealer key: must be 16, 24 or 32 bytes long (AES-128, -192 or -256), got 9 bytes
}

func newTestKeyring(t testing.TB, keys ...byte) converge.Sealer {
	t.Helper()
	raw := make([][]byte, len(keys))
	for i, b := range keys {
		raw[i] = testSealKey(b)
	}
	s, err := converge.NewAESGCMKeyring(raw...)
	require.NoError(t, err)
	return s
}

func TestAESGCMKeyringSealsWithNewestOpensWithAny(t *testing.T) {
	plain := []byte(`{"pw":"hunter2"}`)
	old, err := newTestKeyring(t, 1).Seal("k", plain)
	require.NoError(t, err)

	both := newTestKeyring(t, 1, 2)
	got, err := both.Open("k", old)
	require.NoError(t, err, "a value sealed with the older key opens")
	assert.Equal(t, plain, got)
	sealed, err := both.Seal("k", plain)
	require.NoError(t, err)
	assert.Equal(t, converge.SealKeyID(testSealKey(2)), hex.EncodeToString(sealed[2:10]), "sealed with the newest key")

	newOnly := newTestKeyring(t, 2)
	got, err = newOnly.Open("k", sealed)
	require.NoError(t, err)
	assert.Equal(t, plain, got)
	_, err = newOnly.Open("k", old)
	require.ErrorIs(t, err, converge.ErrSealed)
	assert.Contains(t, err.Error(), converge.SealKeyID(testSealKey(1)), "the error names the missing key's ID")
	assert.NotContains(t, err.Error(), hex.EncodeToString(testSealKey(1)), "never the key")
}

func TestAESGCMKeyringConfig(t *testing.T) {
	_, err := converge.NewAESGCMKeyring()
	require.ErrorIs(t, err, converge.ErrInvalidConfig)
	_, err = converge.NewAESGCMKeyring(testSealKey(1), make([]byte, 7))
	var ce *converge.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "sealer key 1", ce.Field)
	_, err = converge.NewAESGCMKeyring(testSealKey(1), testSealKey(2), testSealKey(1))
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "sealer key 2", ce.Field)
	assert.Contains(t, ce.Reason, "repeats sealer key 0")

	assert.Len(t, converge.SealKeyID(testSealKey(1)), 16)
	assert.NotEqual(t, converge.SealKeyID(testSealKey(1)), converge.SealKeyID(testSealKey(2)))
	assert.Equal(t, converge.SealKeyID(testSealKey(1)), converge.SealKeyID(testSealKey(1)))
}

// Values sealed by converge before sealed values named their key (format
// 1), by NewAESGCMSealer(testSealKey(1)) of commit 2c8a87c: the plaintext
// {"pw":"hunter2"} under each associated data.
var sealedFormat1 = map[string]string{
	"obj/a":            "00012af1d006447f33b6849c07f7c15ab9a1ec7d044b592cde9d1b065469943385433b5530f0844e4af9af71d0b0",
	"record\x00obj/a":  "000145507d4d5a7819375d51c4ab48a03d9408632d15546e05e02eeb8ee6b3a2781ea1c1e2cc0dfebcf0bf84dcaa",
	"target\x00device": "000124d6da3f6aff20913537fe68f295329784ea1af000f921511ac35549b089061151cb2c033ff434b3aaa7ee11",
	"target:x":         "00019e68c7b2e08663f0a424f71450d51af3d49a616ad86360c97befe1e6600847b0e8def2bd4c5a11fdbc2818be",
}

func TestAESGCMKeyringOpensFormat1(t *testing.T) {
	for ad, h := range sealedFormat1 {
		v, err := hex.DecodeString(h)
		require.NoError(t, err)
		for _, keys := range [][]byte{{1}, {1, 2}, {2, 1}, {3, 1, 2}} {
			got, err := newTestKeyring(t, keys...).Open(ad, v)
			require.NoError(t, err, "%q with keys %v", ad, keys)
			assert.JSONEq(t, `{"pw":"hunter2"}`, string(got))
		}
		_, err = newTestKeyring(t, 2, 3).Open(ad, v)
		require.ErrorIs(t, err, converge.ErrSealed, "without its key")
		_, err = newTestKeyring(t, 1).Open(ad+"x", v)
		require.ErrorIs(t, err, converge.ErrSealed, "under another store key")
	}
}

// TestMemStoreFailsClosedOnClearValue writes a clear value over a sealed
// one (as someone bypassing the Sealer would): the store refuses it,
// unless AllowClear accepts it for the migration.
func TestMemStoreFailsClosedOnClearValue(t *testing.T) {
	ctx := context.Background()
	sealer := newTestSealer(t, 1)
	s := &converge.MemStore{Sealer: sealer}
	v, err := s.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`{"pw":"hunter2"}`)})
	require.NoError(t, err)
	_, err = s.PutTarget(ctx, "device", json.RawMessage(`{"env":"hunter2"}`))
	require.NoError(t, err)

	s.Sealer = nil // a writer bypassing the Sealer
	_, err = s.Put(ctx, converge.StoreRecord{Key: "obj/a", Version: v, Value: json.RawMessage(`{"pw":"planted"}`)})
	require.NoError(t, err)
	_, err = s.PutTarget(ctx, "device", json.RawMessage(`{"env":"planted"}`))
	require.NoError(t, err)
	s.Sealer = sealer

	reads := map[string]func() error{
		"Get":    func() error { _, err := s.Get(ctx, "obj/a"); return err },
		"List":   func() error { _, err := s.List(ctx, "obj/"); return err },
		"Target": func() error { _, _, err := s.Target(ctx, "device"); return err },
		"ClaimDue": func() error {
			c, err := s.ClaimDue(ctx, "obj/", "me", time.Minute, 10)
			for _, x := range c {
				require.NoError(t, s.Release(ctx, x.Lease))
			}
			return err
		},
	}
	for name, read := range reads {
		t.Run(name, func(t *testing.T) {
			s.AllowClear = false
			err := read()
			require.ErrorIs(t, err, converge.ErrNotSealed)
			assert.NotErrorIs(t, err, converge.ErrSealed)
			assert.NotContains(t, err.Error(), "planted")

			s.AllowClear = true
			require.NoError(t, read(), "the migration option reads clear values")
		})
	}
	s.AllowClear = true
	rec, err := s.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.JSONEq(t, `{"pw":"planted"}`, string(rec.Value))
}

// TestResealRotatesKeys seals a store with one key, rotates to a keyring
// with a second key, reseals, and drops the first key: everything opens.
// Without Reseal, dropping the key loses the values (checked too).
func TestResealRotatesKeys(t *testing.T) {
	ctx := context.Background()
	s := &converge.MemStore{Sealer: newTestKeyring(t, 1)}
	for _, k := range []string{"obj/a", "obj/b", "plan/p"} {
		_, err := s.Put(ctx, converge.StoreRecord{Key: k, Value: json.RawMessage(`{"k":"` + k + `"}`)})
		require.NoError(t, err)
	}
	_, err := s.PutTarget(ctx, "device", json.RawMessage(`{"env":"x"}`))
	require.NoError(t, err)
	_, err = s.PutTarget(ctx, "other", json.RawMessage(`{"env":"y"}`))
	require.NoError(t, err)

	s.Sealer = newTestKeyring(t, 2)
	_, err = s.Get(ctx, "obj/a")
	require.ErrorIs(t, err, converge.ErrSealed, "the old key is needed before Reseal")

	s.Sealer = newTestKeyring(t, 1, 2)
	n, err := converge.Reseal(ctx, s, "device", "missing")
	require.NoError(t, err)
	assert.Equal(t, 4, n, "3 records and 1 target (a missing one is skipped)")

	s.Sealer = newTestKeyring(t, 2)
	recs, err := s.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, recs, 3)
	for _, r := range recs {
		assert.JSONEq(t, `{"k":"`+r.Key+`"}`, string(r.Value))
		assert.Equal(t, uint64(2), r.Version, "Reseal writes with Put")
	}
	tg, _, err := s.Target(ctx, "device")
	require.NoError(t, err)
	assert.JSONEq(t, `{"env":"x"}`, string(tg))
	_, _, err = s.Target(ctx, "other")
	require.ErrorIs(t, err, converge.ErrSealed, "a target not named is not resealed")
}

// TestResealMigratesClearValues turns sealing on over a store of clear
// values: with AllowClear, Reseal seals them all, after which the store
// reads them without it.
func TestResealMigratesClearValues(t *testing.T) {
	ctx := context.Background()
	s := &converge.MemStore{}
	_, err := s.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`{"a":1}`)})
	require.NoError(t, err)
	_, err = s.PutTarget(ctx, "device", json.RawMessage(`{"t":1}`))
	require.NoError(t, err)

	s.Sealer = newTestSealer(t, 1)
	_, err = converge.Reseal(ctx, s, "device")
	require.ErrorIs(t, err, converge.ErrNotSealed, "fails closed without the migration option")

	s.AllowClear = true
	n, err := converge.Reseal(ctx, s, "device")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	s.AllowClear = false
	rec, err := s.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.JSONEq(t, `{"a":1}`, string(rec.Value))
	tg, _, err := s.Target(ctx, "device")
	require.NoError(t, err)
	assert.JSONEq(t, `{"t":1}`, string(tg))
}

// racingStore writes a record itself just before Reseal's first Put of it,
// as a concurrent writer would.
type racingStore struct {
	*converge.MemStore
	raced map[string]bool
}

func (r *racingStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	if !r.raced[rec.Key] {
		r.raced[rec.Key] = true
		if _, err := r.MemStore.Put(ctx, converge.StoreRecord{Key: rec.Key, Version: rec.Version, Value: json.RawMessage(`{"new":1}`)}); err != nil {
			return 0, err
		}
	}
	return r.MemStore.Put(ctx, rec, h...)
}

func TestResealRereadsARecordWrittenMeanwhile(t *testing.T) {
	ctx := context.Background()
	m := &converge.MemStore{Sealer: newTestKeyring(t, 1)}
	_, err := m.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`{"old":1}`)})
	require.NoError(t, err)
	m.Sealer = newTestKeyring(t, 1, 2)
	n, err := converge.Reseal(ctx, &racingStore{MemStore: m, raced: map[string]bool{}})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	m.Sealer = newTestKeyring(t, 2)
	rec, err := m.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.JSONEq(t, `{"new":1}`, string(rec.Value), "the concurrent write is kept, not overwritten")
	assert.Equal(t, uint64(3), rec.Version)
}
