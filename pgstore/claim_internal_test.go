package pgstore

import (
	"context"
	"fmt"
	"regexp"
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
// from a dead owner, which makes them all due at their lease's expiry): it must walk
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
				assert.NotRegexp(t, `Sort Key: r`, plan, "records sorted, not read in an index's order")
				assert.Contains(t, plan, "Index Scan using records_takeover on records", plan)
				assert.Contains(t, plan, "Index Scan using records_waiting on records", plan)
			})
		}
	}
}

// TestClaimDueWalksNoRecordInFlight claims half of many due records (in
// flight then, with leases that run) and checks, with EXPLAIN ANALYZE of
// the next claims under both plans, that ClaimDue reads no index entry
// of a record in flight: each index scan returns no more rows than the
// limit, and no record walked is filtered out (by its lease) in
// the parts that take records. One index
// on least(due_at, claimed_due), with the records in flight first, made
// every claim walk all of them and read each one's lease (500 rows
// removed by the filter here).
func TestClaimDueWalksNoRecordInFlight(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, dsn, Options{})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.pool.Exec(ctx, `INSERT INTO converge.records (key, version, value, due_at)
		SELECT 'obj/' || lpad(i::text, 6, '0'), 1, '{}', now() FROM generate_series(1, 1000) i`)
	require.NoError(t, err)
	for range 5 {
		got, err := s.ClaimDue(ctx, "obj/", "a", time.Hour, 100)
		require.NoError(t, err)
		require.Len(t, got, 100)
	}
	_, err = s.pool.Exec(ctx, `ANALYZE converge.records, converge.leases`)
	require.NoError(t, err)
	scanned := regexp.MustCompile(`Index Scan using (records_\w+) on records .*actual time=\S+ rows=(\d+) loops`)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			tx, err := s.pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
			_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "PREPARE walk_"+mode+" AS "+s.sql.claimDue)
			require.NoError(t, err)
			rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF) EXECUTE walk_"+mode+"('obj/', 8, 'b', 60000000)")
			require.NoError(t, err)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			plan := strings.Join(lines, "\n")
			from, to := strings.Index(plan, "CTE takeover"), strings.Index(plan, "CTE c\n")
			require.True(t, from >= 0 && to > from, plan)
			assert.NotContains(t, plan[from:to], "Rows Removed by Filter", plan)
			scans := scanned.FindAllStringSubmatch(plan, -1)
			require.NotEmpty(t, scans, plan)
			for _, m := range scans {
				var n int
				_, err := fmt.Sscan(m[2], &n)
				require.NoError(t, err)
				assert.LessOrEqual(t, n, 8, "%s read %d rows\n%s", m[1], n, plan)
			}
			claimed := regexp.MustCompile(`Insert on leases .*actual time=\S+ rows=(\d+) loops`).FindStringSubmatch(plan)
			require.NotNil(t, claimed, plan)
			assert.Equal(t, "8", claimed[1], plan)
		})
	}
}
