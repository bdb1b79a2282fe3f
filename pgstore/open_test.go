package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

func TestOpenConcurrentlyMigratesOnce(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	const n = 6
	stores := make([]*pgstore.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = pgstore.Open(ctx, dsn, pgstore.Options{})
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		defer stores[i].Close()
	}
	var versions, applied int
	query(t, dsn, `SELECT count(DISTINCT version), count(*) FROM converge.migrations`, nil, &versions, &applied)
	assert.Equal(t, versions, applied, "every migration applied once")
	assert.Positive(t, versions)
	// They share one schema.
	_, err := stores[0].Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	rec, err := stores[n-1].Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), rec.Version)
	// Opening again is a no-op.
	again := open(t, dsn, pgstore.Options{})
	_, err = again.Get(ctx, "k")
	require.NoError(t, err)
	var applied2 int
	query(t, dsn, `SELECT count(*) FROM converge.migrations`, nil, &applied2)
	assert.Equal(t, applied, applied2)
}

func TestOpenRefusesANewerSchema(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	require.NoError(t, open(t, dsn, pgstore.Options{}).Close())
	query(t, dsn, `INSERT INTO converge.migrations (version) VALUES (9999)`, nil)
	_, err := pgstore.Open(ctxT(t), dsn, pgstore.Options{})
	var ve *pgstore.SchemaVersionError
	require.ErrorAs(t, err, &ve)
	require.ErrorIs(t, err, pgstore.ErrSchemaTooNew)
	assert.Equal(t, 9999, ve.Have)
	assert.Equal(t, "converge", ve.Schema)
	assert.Contains(t, err.Error(), "9999")
}

func TestOpenFailingMigrationWritesNothing(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	// A table in the way makes the first migration fail half-way (after
	// the schema, the migrations table and the table records).
	query(t, dsn, `CREATE SCHEMA converge; CREATE TABLE converge.history (x int)`, nil)
	_, err := pgstore.Open(ctxT(t), dsn, pgstore.Options{})
	require.Error(t, err)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "42P07", pe.Code) // duplicate_table
	assert.Contains(t, err.Error(), "migration 1")
	var tables int
	query(t, dsn, `SELECT count(*) FROM pg_tables WHERE schemaname = 'converge'`, nil, &tables)
	assert.Equal(t, 1, tables, "only the table that was in the way: the migration rolled back")
}

func TestOpenWithoutCreatePermission(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	role := "noperm_" + strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()), "-", "")
	query(t, pgtest.ServerDSN(t), `CREATE ROLE `+role+` LOGIN PASSWORD 'secret-pw'`, nil)
	t.Cleanup(func() {
		query(t, dsn, `DROP OWNED BY `+role, nil) // its grants in the test database
		query(t, pgtest.ServerDSN(t), `DROP ROLE IF EXISTS `+role, nil)
	})
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.UserPassword(role, "secret-pw")
	_, err = pgstore.Open(ctxT(t), u.String(), pgstore.Options{})
	var pe *pgstore.PermissionError
	require.ErrorAs(t, err, &pe)
	require.ErrorIs(t, err, pgstore.ErrPermission)
	assert.Equal(t, "42501", pe.Err.Code)
	assert.Contains(t, pe.Action, `create schema "converge"`)
	assert.NotContains(t, err.Error(), "secret-pw")
	var schemas int
	query(t, dsn, `SELECT count(*) FROM pg_namespace WHERE nspname = 'converge'`, nil, &schemas)
	assert.Zero(t, schemas)

	// Once an administrator made the schema, the role can open it (no DDL
	// when the schema is current) if granted the tables.
	require.NoError(t, open(t, dsn, pgstore.Options{}).Close())
	_, err = pgstore.Open(ctxT(t), u.String(), pgstore.Options{})
	require.ErrorIs(t, err, pgstore.ErrPermission, "no USAGE on the schema yet")
	query(t, dsn, `GRANT USAGE ON SCHEMA converge TO `+role+`; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA converge TO `+role, nil)
	s := open(t, u.String(), pgstore.Options{})
	_, err = s.Put(ctxT(t), converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
}

func TestOpenBadDSN(t *testing.T) {
	t.Parallel()
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	const pw = "Sup3rSecretPw"
	for _, tc := range []struct {
		name    string
		dsn     string
		want    error
		mention []string
	}{
		{"no server", fmt.Sprintf("postgres://alice:%s@127.0.0.1:%d/appdb?sslmode=disable&connect_timeout=5", pw, port), pgstore.ErrConnect,
			[]string{"127.0.0.1", fmt.Sprint(port), "appdb", "alice"}},
		{"no server, key=value", fmt.Sprintf("host=127.0.0.1 port=%d dbname=appdb user=alice password=%s sslmode=disable connect_timeout=5", port, pw), pgstore.ErrConnect,
			[]string{"127.0.0.1", fmt.Sprint(port), "appdb"}},
		{"bad port", fmt.Sprintf("postgres://alice:%s@127.0.0.1:notaport/appdb", pw), pgstore.ErrDSN, nil},
		{"bad URL escape", fmt.Sprintf("postgres://alice:%s%%zz@127.0.0.1/appdb", pw), pgstore.ErrDSN, nil},
		{"unknown sslmode", fmt.Sprintf("postgres://alice:%s@127.0.0.1/appdb?sslmode=sometimes", pw), pgstore.ErrDSN, nil},
		{"quoted password, bad key=value", fmt.Sprintf("host=127.0.0.1 password='%s' port=abc", pw), pgstore.ErrDSN, nil},
		{"unterminated quote", fmt.Sprintf("host=127.0.0.1 password='%s", pw), pgstore.ErrDSN, nil},
		{"garbage", fmt.Sprintf("%s nonsense", pw), pgstore.ErrDSN, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := pgstore.Open(ctx, tc.dsn, pgstore.Options{})
			if s != nil {
				s.Close()
			}
			require.ErrorIs(t, err, tc.want)
			assert.NotContains(t, err.Error(), pw, "the message must not show the password")
			assert.True(t, strings.HasPrefix(err.Error(), "pgstore: "), err.Error())
			for _, m := range tc.mention {
				assert.Contains(t, err.Error(), m)
			}
			t.Log(err)
		})
	}
}

func TestOpenMissingDatabase(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.DSN(t))
	require.NoError(t, err)
	u.Path = "/no_such_database"
	u.User = url.UserPassword(u.User.Username(), "pw-not-shown")
	_, err = pgstore.Open(ctxT(t), u.String(), pgstore.Options{})
	var ce *pgstore.ConnectError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "no_such_database", ce.Database)
	assert.Contains(t, err.Error(), "no_such_database")
	assert.NotContains(t, err.Error(), "pw-not-shown")
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "3D000", pe.Code) // invalid_catalog_name
}

func TestOptionsAreChecked(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	for _, tc := range []struct {
		opts  pgstore.Options
		field string
	}{
		{pgstore.Options{Schema: strings.Repeat("s", 64)}, "Schema"},
		{pgstore.Options{Channel: "a\x00b"}, "Channel"},
		{pgstore.Options{Retention: converge.Retention{Age: -time.Second}}, "Retention.Age"},
	} {
		_, err := pgstore.Open(ctxT(t), dsn, tc.opts)
		var oe *pgstore.OptionsError
		require.ErrorAs(t, err, &oe)
		require.ErrorIs(t, err, pgstore.ErrOptions)
		assert.Equal(t, tc.field, oe.Field)
	}
	_, err := pgstore.New(ctxT(t), nil, pgstore.Options{})
	require.ErrorIs(t, err, pgstore.ErrOptions)
}

func TestSealedAtRest(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	sealer := newTestSealer(t)
	s := open(t, dsn, pgstore.Options{Sealer: sealer})
	ctx := ctxT(t)
	const secret = "hunter2-very-secret"
	_, err := s.Put(ctx, converge.StoreRecord{Key: "obj/a", Value: json.RawMessage(`{"password":"` + secret + `"}`)})
	require.NoError(t, err)
	_, err = s.PutTarget(ctx, "device", json.RawMessage(`{"env":{"TOKEN":"`+secret+`"}}`))
	require.NoError(t, err)

	// In the database: a leading zero byte and no secret in clear.
	for _, sql := range []string{`SELECT value FROM converge.records WHERE key = 'obj/a'`, `SELECT value FROM converge.targets WHERE name = 'device'`} {
		var raw []byte
		query(t, dsn, sql, nil, &raw)
		require.NotEmpty(t, raw)
		assert.Zero(t, raw[0])
		assert.NotContains(t, string(raw), secret)
		assert.NotContains(t, string(raw), "password")
	}
	// Read back in clear, through Get, List, Target and ClaimDue.
	rec, err := s.Get(ctx, "obj/a")
	require.NoError(t, err)
	assert.JSONEq(t, `{"password":"`+secret+`"}`, string(rec.Value))
	recs, err := s.List(ctx, "obj/")
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.JSONEq(t, string(rec.Value), string(recs[0].Value))
	tgt, _, err := s.Target(ctx, "device")
	require.NoError(t, err)
	assert.Contains(t, string(tgt), secret)
	claimed, err := s.ClaimDue(ctx, "obj/", "o", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	assert.JSONEq(t, string(rec.Value), string(claimed[0].Record.Value))

	// A store without the Sealer refuses the sealed values.
	clear := open(t, dsn, pgstore.Options{})
	_, err = clear.Get(ctx, "obj/a")
	require.ErrorIs(t, err, converge.ErrSealed)
	_, _, err = clear.Target(ctx, "device")
	require.ErrorIs(t, err, converge.ErrSealed)
	_, err = clear.List(ctx, "")
	require.ErrorIs(t, err, converge.ErrSealed)

	// A value moved to another key does not open.
	_, err = s.Put(ctx, converge.StoreRecord{Key: "obj/b", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	query(t, dsn, `UPDATE converge.records SET value = (SELECT value FROM converge.records WHERE key = 'obj/a') WHERE key = 'obj/b'`, nil)
	_, err = s.Get(ctx, "obj/b")
	require.ErrorIs(t, err, converge.ErrSealed)
	assert.Contains(t, err.Error(), "obj/b")

	// A value written in clear (before sealing was turned on, or by a
	// writer bypassing the Sealer) is refused, unless AllowClear.
	_, err = clear.Put(ctx, converge.StoreRecord{Key: "old", Value: json.RawMessage(`"plain"`)})
	require.NoError(t, err)
	_, err = s.Get(ctx, "old")
	require.ErrorIs(t, err, converge.ErrNotSealed)
	migrating := open(t, dsn, pgstore.Options{Sealer: sealer, AllowClear: true})
	rec, err = migrating.Get(ctx, "old")
	require.NoError(t, err)
	assert.JSONEq(t, `"plain"`, string(rec.Value))
	err = s.Delete(ctx, "old", rec.Version)
	require.NoError(t, err)

	// ClaimDue with a record it cannot open fails, and gives the good
	// records of the batch back.
	require.NoError(t, s.Schedule(ctx, "obj/b", time.Now()))
	_, err = s.Put(ctx, converge.StoreRecord{Key: "obj/c", Value: json.RawMessage(`3`)})
	require.NoError(t, err)
	_, err = s.ClaimDue(ctx, "obj/", "o", time.Minute, 10)
	require.ErrorIs(t, err, converge.ErrSealed)
	claimed, err = s.ClaimDue(ctx, "obj/", "o", time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"obj/c"}, keysOf(claimed))
}

// TestLeasesLeaveRoomForHeapOnlyUpdates: the schema leaves room in the
// pages of the leases, so that a claim and a finish, which change no
// indexed column of a lease, can update it in its page without a new
// index entry.
func TestLeasesLeaveRoomForHeapOnlyUpdates(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	open(t, dsn, pgstore.Options{})
	var leases, records []string
	query(t, dsn, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'converge.leases'::regclass`, nil, &leases)
	query(t, dsn, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'converge.records'::regclass`, nil, &records)
	assert.Equal(t, []string{"fillfactor=70"}, leases)
	assert.Empty(t, records, "the records keep PostgreSQL's default")
}
