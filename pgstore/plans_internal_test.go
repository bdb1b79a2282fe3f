package pgstore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// openUnplanned opens a store with opts on a pool of one connection to
// dsn (so that every statement it prepares is on the connection that
// pg_prepared_statements shows), in the schema opts names, whose tables
// hold a bulk load that no ANALYZE (nor autovacuum) has seen: 5,000
// records not due and 20,000 history entries. The pool and store are
// closed when t ends. Tests of the plans PostgreSQL keeps use it.
func openUnplanned(t testing.TB, dsn string, opts Options) (*pgxpool.Pool, *Store) {
	t.Helper()
	ctx := context.Background()
	pool, s := storeOnPool(t, ctx, dsn, opts, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	q := pgx.Identifier{s.schema}.Sanitize()
	for _, tbl := range []string{"records", "history", "leases"} {
		_, err := pool.Exec(ctx, "ALTER TABLE "+q+"."+tbl+" SET (autovacuum_enabled = false)")
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO `+q+`.records (key, version, value, due_at)
		SELECT 'bulk-' || i, 1, '{}'::bytea, now() + interval '1 day' FROM generate_series(1, 5000) i`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+q+`.history (key, at, from_state, to_state, reason)
		SELECT 'bulk-' || (i % 5000), now(), 'a', 'b', '' FROM generate_series(1, 20000) i`)
	require.NoError(t, err)
	return pool, s
}

// OpenUnplanned is openUnplanned for the tests of package pgstore_test.
var OpenUnplanned = openUnplanned
