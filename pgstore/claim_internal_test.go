package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestClaimDueReadsNoMoreThanItTakes checks the plan of ClaimDue on many
// records due at the same time (made in one transaction, or taken over
// from a dead owner, which makes them all due at -infinity): it must walk
// an index in the order it takes records (due time, key) and stop at its
// limit, not read and sort every due record on each claim, which made a
// claim cost as much as the whole backlog. It must do so before the
// table's statistics know of the records (as right after a bulk load) and
// after. Both
// plans PostgreSQL may use for the prepared statement are checked: the
// one for these arguments and the generic one.
func TestClaimDueReadsNoMoreThanItTakes(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.pool.Exec(ctx, `INSERT INTO converge.records (key, version, value, due_at)
		SELECT 'obj/' || lpad(i::text, 6, '0'), 1, '{}', now() FROM generate_series(1, 5000) i`)
	require.NoError(t, err)
	for _, stats := range []string{"stale", "analyzed"} {
		if stats == "analyzed" {
			_, err = s.pool.Exec(ctx, `ANALYZE converge.records`)
			require.NoError(t, err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(stats+"/"+mode, func(t *testing.T) {
				tx, err := s.pool.Begin(ctx)
				require.NoError(t, err)
				defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
				_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, "PREPARE claim_due_"+stats+mode+" AS "+s.sql.claimDue)
				require.NoError(t, err)
				rows, err := tx.Query(ctx, "EXPLAIN EXECUTE claim_due_"+stats+mode+"('obj/', 8, 'o', 60000000)")
				require.NoError(t, err)
				lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				plan := strings.Join(lines, "\n")
				assert.NotContains(t, plan, "Seq Scan on records", plan)
				assert.NotContains(t, plan, "Sort Key: (LEAST", plan)
			})
		}
	}
}
