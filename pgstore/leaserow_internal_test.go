package pgstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

// TestLeasesAreReadByKeyAfterABulkLoad stores records in bulk, as a
// fleet's first start does, and has the database analyze them before
// any is claimed (as autovacuum does after a bulk load): the plans
// PostgreSQL keeps for Finish and the fenced Put (generic plans, made
// once per connection) and for ClaimDue must read the lease by its
// key, through the primary key. A leases table that was empty when it was analyzed made
// them scan the whole table on every call, until it was analyzed again;
// and statistics that say every lease is released (as they mostly are)
// made ClaimDue scan it on every claim.
// (FinishMany joins the leases with its arrays, and PostgreSQL rightly
// scans a table this small for that.)
func TestLeasesAreReadByKeyAfterABulkLoad(t *testing.T) {
	ctx, s, dsn := openInternal(t)
	const n = 2000
	for i := range n {
		_, err := s.Put(ctx, converge.StoreRecord{Key: fmt.Sprintf("obj/%05d", i), Value: json.RawMessage(`0`)})
		require.NoError(t, err)
	}
	var leases int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM converge.leases WHERE owner = ''`).Scan(&leases))
	assert.Equal(t, n, leases, "every new record has a lease row with no owner")

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `ANALYZE`)
	require.NoError(t, err)
	h, err := s.history("obj/00001", []converge.HistoryEntry{{At: time.Now(), From: "a", To: "b"}})
	require.NoError(t, err)
	now := time.Now()
	for name, st := range map[string]struct {
		sql  string
		args []any
	}{
		"Finish":     {s.sql.finish, []any{"obj/00001", "me", int64(2), &now, s.channel, "obj/00001"}},
		"fenced Put": {s.sql.put[putVariant(false, true)], append([]any{"obj/00001", int64(1), []byte(`1`), int64(2)}, h.args()...)},
		"ClaimDue":   {s.sql.claimDue, []any{"obj/", int64(16), "me", int64(60e6)}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := conn.Exec(ctx, `DEALLOCATE ALL`)
			require.NoError(t, err)
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
			// pgx prepares the statement and says its parameters' types;
			// its type map writes each argument as PostgreSQL's text
			// form, which EXPLAIN EXECUTE takes as a quoted literal.
			desc, err := tx.Prepare(ctx, "stmt", st.sql)
			require.NoError(t, err)
			require.Len(t, desc.ParamOIDs, len(st.args))
			params := make([]string, len(st.args))
			for i, a := range st.args {
				params[i] = literal(t, conn.TypeMap(), desc.ParamOIDs[i], a)
			}
			_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`)
			require.NoError(t, err)
			rows, err := tx.Query(ctx, `EXPLAIN EXECUTE stmt(`+strings.Join(params, ", ")+`)`, pgx.QueryExecModeSimpleProtocol)
			require.NoError(t, err)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			plan := strings.Join(lines, "\n")
			assert.NotContains(t, plan, "Seq Scan on leases", plan)
			assert.Contains(t, plan, "leases_pkey", plan)
		})
	}
}

// literal returns v, an argument of a parameter of type oid, as a quoted
// SQL literal in PostgreSQL's text form, written by pgx's type map m
// (NULL for nil).
func literal(t *testing.T, m *pgtype.Map, oid uint32, v any) string {
	t.Helper()
	text, err := m.Encode(oid, pgtype.TextFormatCode, v, nil)
	require.NoError(t, err)
	if text == nil {
		return "NULL"
	}
	return "'" + strings.ReplaceAll(string(text), "'", "''") + "'"
}
