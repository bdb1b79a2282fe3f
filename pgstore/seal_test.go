package pgstore_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestSealedFailsClosed writes clear values over sealed ones in the
// tables: every read refuses them with ErrNotSealed, AllowClear reads
// them, and converge.Reseal seals them, after which they read without it.
func TestSealedFailsClosed(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	sealer, err := converge.NewAESGCMSealer(bytes.Repeat([]byte{1}, 32))
	require.NoError(t, err)
	s := open(t, dsn, pgstore.Options{Sealer: sealer})
	_, err = s.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`{"pw":"hunter2"}`)})
	require.NoError(t, err)
	_, err = s.PutTarget(ctx, "device", json.RawMessage(`{"t":"hunter2"}`))
	require.NoError(t, err)
	query(t, dsn, `UPDATE converge.records SET value = $1 WHERE key = 'obj/a'`, []any{[]byte(`{"pw":"planted"}`)})
	query(t, dsn, `UPDATE converge.targets SET value = $1 WHERE name = 'device'`, []any{[]byte(`{"t":"planted"}`)})

	reads := map[string]func() error{
		"Get":    func() error { _, err := s.Get(ctx, "obj/a"); return err },
		"List":   func() error { _, err := s.List(ctx, ""); return err },
		"Target": func() error { _, _, err := s.Target(ctx, "device"); return err },
		"ClaimDue": func() error {
			_, err := s.ClaimDue(ctx, "", "o", time.Minute, 10)
			return err
		},
	}
	for name, read := range reads {
		err := read()
		require.ErrorIs(t, err, converge.ErrNotSealed, name)
		assert.NotErrorIs(t, err, converge.ErrSealed, name)
		assert.NotContains(t, err.Error(), "planted", name)
	}

	migrating := open(t, dsn, pgstore.Options{Sealer: sealer, AllowClear: true})
	n, err := converge.Reseal(ctx, migrating, "device")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	rec, err := s.Get(ctx, "obj/a")
	require.NoError(t, err, "sealed by Reseal")
	assert.JSONEq(t, `{"pw":"planted"}`, string(rec.Value))
	tg, _, err := s.Target(ctx, "device")
	require.NoError(t, err)
	assert.JSONEq(t, `{"t":"planted"}`, string(tg))
}

// TestSealedRecordAndTargetBoundApart moves the sealed value of target
// "x" to record "target:x" and the other way: neither opens (they once
// shared their associated data).
func TestSealedRecordAndTargetBoundApart(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	sealer, err := converge.NewAESGCMSealer(bytes.Repeat([]byte{1}, 32))
	require.NoError(t, err)
	s := open(t, dsn, pgstore.Options{Sealer: sealer})
	_, err = s.PutTarget(ctx, "x", json.RawMessage(`{"target":true}`))
	require.NoError(t, err)
	_, err = s.Put(ctx, converge.StoreRecord{Key: "target:x", Value: json.RawMessage(`{"record":true}`)})
	require.NoError(t, err)
	var target, record []byte
	query(t, dsn, `SELECT value FROM converge.targets WHERE name = 'x'`, nil, &target)
	query(t, dsn, `SELECT value FROM converge.records WHERE key = 'target:x'`, nil, &record)

	query(t, dsn, `UPDATE converge.records SET value = $1 WHERE key = 'target:x'`, []any{target})
	_, err = s.Get(ctx, "target:x")
	require.ErrorIs(t, err, converge.ErrSealed, "a target's value read as a record")
	query(t, dsn, `UPDATE converge.targets SET value = $1 WHERE name = 'x'`, []any{record})
	_, _, err = s.Target(ctx, "x")
	require.ErrorIs(t, err, converge.ErrSealed, "a record's value read as a target")
}

// Values sealed by converge's AES-GCM Sealer before sealed values named
// their key (format 1), at commit 2c8a87c, with the key of 32 bytes 0x01:
// {"pw":"hunter2"} under the associated data pgstore then used for record
// "obj/a" (its key) and target "x" ("target:x").
const (
	format1RecordObjA = "00012af1d006447f33b6849c07f7c15ab9a1ec7d044b592cde9d1b065469943385433b5530f0844e4af9af71d0b0"
	format1TargetX    = "00019e68c7b2e08663f0a424f71450d51af3d49a616ad86360c97befe1e6600847b0e8def2bd4c5a11fdbc2818be"
)

// TestSealedFormat1Opens stores values as an earlier pgstore sealed them:
// a keyring holding their key opens them, Reseal rewrites them under the
// newest key, and then the old key can go.
func TestSealedFormat1Opens(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	both, err := converge.NewAESGCMKeyring(oldKey, newKey)
	require.NoError(t, err)
	s := open(t, dsn, pgstore.Options{Sealer: both})
	_, err = s.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	_, err = s.PutTarget(ctx, "x", json.RawMessage(`1`))
	require.NoError(t, err)
	rec, err := hex.DecodeString(format1RecordObjA)
	require.NoError(t, err)
	tgt, err := hex.DecodeString(format1TargetX)
	require.NoError(t, err)
	query(t, dsn, `UPDATE converge.records SET value = $1 WHERE key = 'obj/a'`, []any{rec})
	query(t, dsn, `UPDATE converge.targets SET value = $1 WHERE name = 'x'`, []any{tgt})

	got, err := s.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.JSONEq(t, `{"pw":"hunter2"}`, string(got.Value))
	tg, _, err := s.Target(ctx, "x")
	require.NoError(t, err)
	assert.JSONEq(t, `{"pw":"hunter2"}`, string(tg))

	newOnly, err := converge.NewAESGCMKeyring(newKey)
	require.NoError(t, err)
	after := open(t, dsn, pgstore.Options{Sealer: newOnly})
	_, err = after.Get(ctx, "obj/a")
	require.ErrorIs(t, err, converge.ErrSealed, "the old key is needed before Reseal")

	n, err := converge.Reseal(ctx, s, "x")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	got, err = after.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.JSONEq(t, `{"pw":"hunter2"}`, string(got.Value))
	tg, _, err = after.Target(ctx, "x")
	require.NoError(t, err)
	assert.JSONEq(t, `{"pw":"hunter2"}`, string(tg))
}
