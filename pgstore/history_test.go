package pgstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// utc makes the times of h comparable with assert.Equal.
func utc(h []converge.HistoryEntry) []converge.HistoryEntry {
	for i := range h {
		h[i].At = h[i].At.UTC()
	}
	return h
}

// Every statement that appends history (create, update, fenced update,
// delete) keeps each entry's subject: nil, command 0 and a host apart.
func TestHistorySubjects(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := open(t, pgtest.DSN(t), pgstore.Options{})
	at := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	entry := func(i int, sub *converge.HistorySubject) converge.HistoryEntry {
		return converge.HistoryEntry{At: at.Add(time.Duration(i) * time.Microsecond), From: "a", To: "b", Reason: "r", Subject: sub}
	}
	plan := entry(0, nil)
	cmd0 := entry(1, &converge.HistorySubject{Command: 0})
	host := entry(2, &converge.HistorySubject{Command: 2, Group: "workers", Host: "w1"})
	group := entry(3, &converge.HistorySubject{Command: 1, Group: "ctrl"})

	const key = "plans/p"
	v, err := s.Put(ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`1`)}, plan, cmd0, host)
	require.NoError(t, err)
	v, err = s.Put(ctx, converge.StoreRecord{Key: key, Version: v, Value: json.RawMessage(`2`)}, host, plan)
	require.NoError(t, err)
	lease, err := s.Claim(ctx, key, "owner", time.Minute)
	require.NoError(t, err)
	v, err = s.Put(ctx, converge.StoreRecord{Key: key, Version: v, Value: json.RawMessage(`3`), Token: lease.Token}, cmd0, group)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, lease))
	require.NoError(t, s.Delete(ctx, key, v, cmd0, plan))

	got, err := s.History(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []converge.HistoryEntry{plan, cmd0, host, host, plan, cmd0, group, cmd0, plan}, utc(got))
	assert.Nil(t, got[0].Subject, "nil stays nil")
	assert.NotNil(t, got[1].Subject, "command 0 is not the plan itself")
}

// A subject that would not come back as written is refused before
// anything is written.
func TestHistorySubjectInvalid(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := open(t, pgtest.DSN(t), pgstore.Options{})
	for _, tc := range []struct {
		name, field string
		sub         converge.HistorySubject
	}{
		{"NUL in the host", "history[0].Subject.Host", converge.HistorySubject{Command: 1, Group: "g", Host: "a\x00b"}},
		{"bad UTF-8 in the group", "history[0].Subject.Group", converge.HistorySubject{Command: 1, Group: "\xff", Host: "h"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := converge.HistoryEntry{At: time.Now(), To: "x", Subject: &tc.sub}
			_, err := s.Put(ctx, converge.StoreRecord{Key: "bad", Value: json.RawMessage(`1`)}, e)
			var re *converge.StoreRequestError
			require.ErrorAs(t, err, &re)
			require.ErrorIs(t, err, converge.ErrStoreInvalid)
			assert.Equal(t, tc.field, re.Field)
			_, err = s.Get(ctx, "bad")
			require.ErrorIs(t, err, converge.ErrStoreNotFound, "nothing written")
		})
	}
}

// History written before migration 4 reads with a nil subject, and the
// migrated schema keeps subjects.
func TestHistorySubjectMigration(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	dsn := pgtest.DSN(t)
	old := open(t, dsn, pgstore.Options{Schema: "before4"})
	at := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	before := converge.HistoryEntry{At: at, To: "a"}
	v, err := old.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)}, before)
	require.NoError(t, err)
	// Make the schema what version 3 left.
	query(t, dsn, `ALTER TABLE before4.history DROP COLUMN subject, DROP COLUMN made_by`, nil)
	undoMigration6(t, dsn, "before4")
	query(t, dsn, `DELETE FROM before4.migrations WHERE version >= 4`, nil)

	s := open(t, dsn, pgstore.Options{Schema: "before4"})
	after := converge.HistoryEntry{At: at.Add(time.Second), From: "a", To: "b", Subject: &converge.HistorySubject{Command: 0}}
	_, err = s.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: json.RawMessage(`2`)}, after)
	require.NoError(t, err)
	got, err := s.History(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []converge.HistoryEntry{before, after}, utc(got))
	var versions int
	query(t, dsn, `SELECT max(version) FROM before4.migrations`, nil, &versions)
	assert.Equal(t, 9, versions)
}

// Every statement that appends history (create, update, fenced update,
// delete) keeps who made each entry, empty staying empty.
func TestHistoryBy(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := open(t, pgtest.DSN(t), pgstore.Options{})
	at := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	entry := func(i int, by string) converge.HistoryEntry {
		return converge.HistoryEntry{At: at.Add(time.Duration(i) * time.Microsecond), From: "a", To: "b", Reason: "r", By: by}
	}
	program, alice, bob, carol := entry(0, ""), entry(1, "alice"), entry(2, "ops: bob"), entry(3, "carol@example.com")

	const key = "ctl/o"
	v, err := s.Put(ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`1`)}, program, alice)
	require.NoError(t, err)
	v, err = s.Put(ctx, converge.StoreRecord{Key: key, Version: v, Value: json.RawMessage(`2`)}, bob)
	require.NoError(t, err)
	lease, err := s.Claim(ctx, key, "owner", time.Minute)
	require.NoError(t, err)
	v, err = s.Put(ctx, converge.StoreRecord{Key: key, Version: v, Value: json.RawMessage(`3`), Token: lease.Token}, program, carol)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, lease))
	require.NoError(t, s.Delete(ctx, key, v, alice))

	got, err := s.History(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []converge.HistoryEntry{program, alice, bob, program, carol, alice}, utc(got))

	// Who would not come back as written is refused before anything is
	// written.
	_, err = s.Put(ctx, converge.StoreRecord{Key: "bad", Value: json.RawMessage(`1`)}, entry(4, "a\x00b"))
	var re *converge.StoreRequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "history[0].By", re.Field)
	_, err = s.Get(ctx, "bad")
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "nothing written")
}

// History written before migration 5 reads with nobody in By, and the
// migrated schema keeps who.
func TestHistoryByMigration(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	dsn := pgtest.DSN(t)
	old := open(t, dsn, pgstore.Options{Schema: "before5"})
	at := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	before := converge.HistoryEntry{At: at, To: "a"}
	v, err := old.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)}, before)
	require.NoError(t, err)
	// Make the schema what version 4 left.
	query(t, dsn, `ALTER TABLE before5.history DROP COLUMN made_by`, nil)
	undoMigration6(t, dsn, "before5")
	query(t, dsn, `DELETE FROM before5.migrations WHERE version = 5`, nil)

	s := open(t, dsn, pgstore.Options{Schema: "before5"})
	after := converge.HistoryEntry{At: at.Add(time.Second), From: "a", To: "a", Reason: "released", By: "alice"}
	_, err = s.Put(ctx, converge.StoreRecord{Key: "k", Version: v, Value: json.RawMessage(`2`)}, after)
	require.NoError(t, err)
	got, err := s.History(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []converge.HistoryEntry{before, after}, utc(got))
	var versions int
	query(t, dsn, `SELECT max(version) FROM before5.migrations`, nil, &versions)
	assert.Equal(t, 9, versions)
}
