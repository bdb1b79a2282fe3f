package converge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

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
	assert.Equal(t, byte(1), sealed[1], "format version")
	assert.Len(t, sealed, 2+12+len(plain)+16)
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
		{"altered nonce", s, "obj/a", flip(5)},
		{"altered ciphertext", s, "obj/a", flip(20)},
		{"altered tag", s, "obj/a", flip(len(sealed) - 1)},
		{"truncated", s, "obj/a", sealed[:len(sealed)-1]},
		{"header only", s, "obj/a", sealed[:2]},
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

func TestAESGCMSealerOpenClearValue(t *testing.T) {
	s := newTestSealer(t, 1)
	for _, v := range []string{`{"v":1}`, `"x"`, `1`, ``} {
		got, err := s.Open("k", []byte(v))
		require.NoError(t, err)
		assert.Equal(t, v, string(got), "a value stored before sealing was on is returned as is")
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
	assert.Equal(t, []string{"obj/a", "device"}, sealer.sealed, "values and targets are sealed under their key")

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
// does not start with a zero byte comes back unchanged.
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
			require.NoError(t, err)
			assert.Equal(t, v, got, "a clear value comes back unchanged")
		default:
			require.ErrorIs(t, err, converge.ErrSealed)
			assert.Nil(t, got)
		}

		// The raw input itself, opened as a stored value.
		got, err = s.Open(key, plain)
		if len(plain) > 0 && plain[0] != 0 {
			require.NoError(t, err)
			assert.Equal(t, plain, got)
		} else if len(plain) > 0 {
			require.ErrorIs(t, err, converge.ErrSealed)
		}
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
