package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
	"github.com/convergekit/converge/plan"
)

// TestPostgres runs the commands against a pgstore database a controller
// and a plan runner wrote: reads through read-only sessions, and the
// release, abort and retry written with who did them. It skips without
// PostgreSQL unless CONVERGE_REQUIRE_PG=1.
func TestPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	st, err := pgstore.Open(ctx, dsn, pgstore.Options{})
	require.NoError(t, err)
	defer st.Close()
	fill(t, st)

	var objs objectsJSON
	ctlJSON(t, &objs, "objects", "host", "--pg", dsn)
	assert.Equal(t, []string{"bad", "good", "slow", "term"}, keys(objs.Objects))
	ctlJSON(t, &objs, "objects", "host", "--pg", dsn, "--quarantined")
	assert.Equal(t, []string{"bad"}, keys(objs.Objects))
	ctlJSON(t, &objs, "objects", "host", "--pg", dsn, "--above-sla")
	assert.Equal(t, []string{"slow"}, keys(objs.Objects))

	var good objectView
	ctlJSON(t, &good, "object", "host", "good", "--pg", dsn)
	assert.Equal(t, controller.State("ready"), good.State)
	assert.JSONEq(t, `{"ip":"10.0.0.1"}`, string(good.Data))
	assert.Len(t, good.History, 2)

	var tv targetView
	ctlJSON(t, &tv, "target", "agent", "--pg", dsn)
	assert.Equal(t, uint64(2), tv.Revision)

	var plans struct {
		Plans []planView `json:"plans"`
	}
	ctlJSON(t, &plans, "plans", "--pg", dsn, "--state", "ApplyFailed")
	require.Len(t, plans.Plans, 1)
	assert.Equal(t, "rollout", plans.Plans[0].ID)

	// Release: the store has it released, with who did it; and the object
	// is due again, for the replicas sharing the store.
	var rel struct {
		Released bool       `json:"released"`
		Object   objectView `json:"object"`
	}
	ctlJSON(t, &rel, "release", "host", "bad", "--pg", dsn, "--as", "alice")
	assert.True(t, rel.Released)
	rec, err := st.Get(ctx, "host/bad")
	require.NoError(t, err)
	var o controller.Object
	require.NoError(t, json.Unmarshal(rec.Value, &o))
	assert.Empty(t, o.Halted)
	hist, err := st.History(ctx, "host/bad")
	require.NoError(t, err)
	assert.Equal(t, "alice", hist[len(hist)-1].By)
	assert.Equal(t, controller.ReasonReleased, hist[len(hist)-1].Reason)
	due, err := st.ClaimDue(ctx, "host/", "test", 60e9, 10)
	require.NoError(t, err)
	var dueKeys []string
	for _, d := range due {
		dueKeys = append(dueKeys, d.Record.Key)
	}
	assert.Contains(t, dueKeys, "host/bad", "a released object is due at once")

	// Abort and retry.
	var p planView
	ctlJSON(t, &p, "abort", "next", "--pg", dsn, "--as", "bob")
	assert.Equal(t, "aborted with convergectl", p.Abort)
	ctlJSON(t, &p, "retry", "rollout", "--pg", dsn, "--as", "carol")
	assert.False(t, p.State.IsError())
	ph, err := st.History(ctx, plan.KeyPrefix+"next")
	require.NoError(t, err)
	assert.Equal(t, "bob", ph[len(ph)-1].By)

	r := ctl(t, "object", "host", "nope", "--pg", dsn)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.err, `host "nope" is not in the store`)
}

// TestPostgresReadOnly: a read opens read-only sessions, so it creates
// nothing, not even the store's schema in an empty database; and a
// database that cannot be reached is an error naming it, without the
// password.
func TestPostgresReadOnly(t *testing.T) {
	dsn := pgtest.DSN(t)
	r := ctl(t, "objects", "host", "--pg", dsn, "--schema", "untouched")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.err, `schema "untouched" holds no store of this version`)

	st, err := pgstore.Open(context.Background(), dsn, pgstore.Options{})
	require.NoError(t, err)
	defer st.Close()
	var exists bool
	require.NoError(t, st.Pool().QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'untouched')`).Scan(&exists))
	assert.False(t, exists, "a read created the schema")

	r = ctl(t, "objects", "host", "--pg", "postgres://me:hunter2@127.0.0.1:1/nowhere?connect_timeout=5", "-o", "json")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.err, `"kind":"store"`)
	assert.NotContains(t, r.err, "hunter2")
}

// TestPostgresWatch: objects --watch over a database is woken by the
// store's notifications: with an interval of an hour, an object another
// process adds is printed at once. targets lists the database's targets.
func TestPostgresWatch(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	st, err := pgstore.Open(ctx, dsn, pgstore.Options{})
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, controller.AddObject(ctx, st, "host", "first", "provisioning", nil))
	_, err = st.PutTarget(ctx, "agent", json.RawMessage(`{"image":"app:1"}`))
	require.NoError(t, err)

	var targets struct {
		Targets []targetView `json:"targets"`
	}
	ctlJSON(t, &targets, "targets", "--pg", dsn)
	require.Len(t, targets.Targets, 1)
	assert.Equal(t, "agent", targets.Targets[0].Name)

	w := startWatch(t, "objects", "host", "--pg", dsn, "--watch-interval", "1h")
	w.waitFor(t, "first")
	require.NoError(t, controller.AddObject(ctx, st, "host", "second", "provisioning", nil))
	w.waitFor(t, "second")
	w.interrupt(t)
}
