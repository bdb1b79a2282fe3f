package pgtest_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/convergekit/converge/pgstore/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

func scalar[T any](t *testing.T, dsn, sql string, args ...any) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v T
	require.NoError(t, conn.QueryRow(ctx, sql, args...).Scan(&v))
	return v
}

func TestDSNGivesFreshEmptyDatabases(t *testing.T) {
	a, b := pgtest.DSN(t), pgtest.DSN(t)
	require.NotEqual(t, a, b)
	dbA := scalar[string](t, a, `SELECT current_database()`)
	dbB := scalar[string](t, b, `SELECT current_database()`)
	assert.NotEqual(t, dbA, dbB)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, a)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE x (n int)`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	assert.Zero(t, scalar[int](t, b, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`), "b is empty")
	// The server runs with fsync on, so crash tests on it mean something.
	assert.Equal(t, "on", scalar[string](t, a, `SHOW fsync`))
}

func TestDSNDropsItsDatabaseAtCleanup(t *testing.T) {
	var name string
	t.Run("user", func(t *testing.T) {
		name = scalar[string](t, pgtest.DSN(t), `SELECT current_database()`)
	})
	n := scalar[int](t, pgtest.ServerDSN(t), `SELECT count(*) FROM pg_database WHERE datname = $1`, name)
	assert.Zero(t, n, "database %s dropped", name)
}

func TestDSNOnAGivenServer(t *testing.T) {
	server := pgtest.ServerDSN(t)
	u, err := url.Parse(server)
	require.NoError(t, err)
	for _, given := range []string{
		server,
		"host=" + u.Hostname() + " port=" + u.Port() + " user=postgres dbname=postgres sslmode=disable",
	} {
		t.Run(strings.Fields(given)[0], func(t *testing.T) {
			t.Setenv(pgtest.EnvDSN, given)
			dsn := pgtest.DSN(t)
			assert.True(t, strings.HasPrefix(scalar[string](t, dsn, `SELECT current_database()`), "t_"))
			assert.Equal(t, u.Port(), scalar[string](t, dsn, `SELECT setting FROM pg_settings WHERE name = 'port'`))
		})
	}
}

func TestStopRemovesTheClusterAndDSNStartsAnother(t *testing.T) {
	before := pgtest.ServerDSN(t)
	dataDir := scalar[string](t, before, `SHOW data_directory`)
	require.NoError(t, pgtest.Stop())
	assert.NoDirExists(t, dataDir)
	after := pgtest.ServerDSN(t)
	assert.NotEqual(t, dataDir, scalar[string](t, after, `SHOW data_directory`))
}
