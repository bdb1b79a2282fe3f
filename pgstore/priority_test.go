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

// Records stored before migration 7 read with priority 0 and are claimed
// in their due order; the migrated schema keeps and orders by
// priorities.
func TestPriorityMigration(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	dsn := pgtest.DSN(t)
	old := open(t, dsn, pgstore.Options{Schema: "before7"})
	base := time.Now()
	for i, k := range []string{"p/b", "p/a"} {
		_, err := old.Put(ctx, converge.StoreRecord{Key: k, Value: json.RawMessage(`1`)})
		require.NoError(t, err)
		require.NoError(t, old.Schedule(ctx, k, base.Add(-time.Duration(2-i)*time.Hour)))
	}
	// Make the schema what version 6 left.
	query(t, dsn, `DROP INDEX before7.records_due`, nil)
	query(t, dsn, `ALTER TABLE before7.records DROP COLUMN priority`, nil)
	query(t, dsn, `CREATE INDEX records_due ON before7.records (due_at, key) WHERE due_at IS NOT NULL`, nil)
	query(t, dsn, `DELETE FROM before7.migrations WHERE version >= 7`, nil)

	s := open(t, dsn, pgstore.Options{Schema: "before7"})
	var version int
	query(t, dsn, `SELECT max(version) FROM before7.migrations`, nil, &version)
	require.Equal(t, 9, version)
	for _, k := range []string{"p/a", "p/b"} {
		p, err := s.Priority(ctx, k)
		require.NoError(t, err)
		assert.Zero(t, p, k)
	}
	_, err := s.PutPriority(ctx, converge.StoreRecord{Key: "p/c", Value: json.RawMessage(`1`)}, 10)
	require.NoError(t, err)
	require.NoError(t, s.Schedule(ctx, "p/c", base.Add(-time.Hour)))
	got, err := s.ClaimDue(ctx, "p/", "o", time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"p/b", "p/c", "p/a"}, keysOf(got), "p/b due an hour earlier than the others; p/c before p/a, due with it, by priority")
}
