package pgstore

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClaimDueReadsNoMoreThanItTakes checks the plan of ClaimDue on many
// records due at the same time (made in one transaction) and many whose
// claim ran out at the same time (taken over from a dead owner): it must
// walk the indexes in the order it takes records ((claimed_due, key),
// then (due_at, key)) and stop at its limit, not read and sort every due
// record on each claim, which made a claim cost as much as the whole
// backlog. It must do so before the table's statistics know of the
// records (as right after a bulk load) and after. Both plans PostgreSQL
// may use for the prepared statement are checked: the one for these
// arguments and the generic one.
func TestClaimDueReadsNoMoreThanItTakes(t *testing.T) {
	ctx, s, _ := openInternal(t)
	_, err := s.pool.Exec(ctx, `INSERT INTO converge.records (key, version, value, due_at, claimed_due)
		SELECT 'obj/' || lpad(i::text, 6, '0'), 1, '{}',
			CASE WHEN i % 2 = 0 THEN now() END, CASE WHEN i % 2 = 1 THEN now() - interval '1 minute' END
		FROM generate_series(1, 5000) i`)
	require.NoError(t, err)
	for _, stats := range []string{"stale", "analyzed"} {
		if stats == "analyzed" {
			_, err = s.pool.Exec(ctx, `ANALYZE converge.records`)
			require.NoError(t, err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(stats+"/"+mode, func(t *testing.T) {
				plan := explainClaimDue(t, ctx, s, mode, "EXPLAIN")
				assert.NotContains(t, plan, "Seq Scan on records", plan)
				assert.NotContains(t, plan, "Sort Key: r", plan)
				assert.Contains(t, plan, "Index Scan using records_claimed on records", plan)
				assert.Contains(t, plan, "Index Scan using records_due on records", plan)
			})
		}
	}
}

// TestClaimDueWalksNoRecordInFlight checks that ClaimDue does not read the
// records that other claims hold, renewed claims included: a claim that
// walked them (they were due first, at -infinity) read, and looked up the
// lease of, every record in flight before it reached one it could take.
func TestClaimDueWalksNoRecordInFlight(t *testing.T) {
	ctx, s, _ := openInternal(t)
	_, err := s.pool.Exec(ctx, `INSERT INTO converge.records (key, version, value, due_at)
		SELECT 'obj/' || lpad(i::text, 6, '0'), 1, '{}', now() - interval '1 hour' FROM generate_series(1, 300) i`)
	require.NoError(t, err)
	held, err := s.ClaimDue(ctx, "obj/", "other", time.Minute, 200)
	require.NoError(t, err)
	require.Len(t, held, 200)
	// 50 more are claimed for a moment and renewed (as a controller
	// renews the lease of a handler that runs long), then held past the
	// first lease's end.
	renewed, err := s.ClaimDue(ctx, "obj/", "other", 300*time.Millisecond, 50)
	require.NoError(t, err)
	require.Len(t, renewed, 50)
	for _, c := range renewed {
		l, err := s.Claim(ctx, c.Record.Key, "other", time.Minute)
		require.NoError(t, err)
		require.Equal(t, c.Lease.Token, l.Token, "renewed, not taken anew")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var over bool
		assert.NoError(c, s.pool.QueryRow(ctx, `SELECT now() > $1`, renewed[0].Lease.Expires).Scan(&over))
		assert.True(c, over, "the first lease has run out by the database's clock")
	}, 10*time.Second, 20*time.Millisecond)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			plan := explainClaimDue(t, ctx, s, mode, "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF)")
			// Each walk read as many records as it took (none of the
			// first) and looked up the lease of each of those only: 8
			// lookups in all, where a walk past the records in flight
			// looks up theirs too.
			assert.Regexp(t, `Index Scan using records_claimed on records \S+ \(actual rows=0 loops=1\)`, plan)
			assert.Regexp(t, `Index Scan using records_due on records \S+ \(actual rows=8 loops=1\)`, plan)
			lookups := 0
			for _, m := range leaseLookups.FindAllStringSubmatch(plan, -1) {
				n, err := strconv.Atoi(m[1])
				require.NoError(t, err)
				lookups += n
			}
			assert.Equal(t, 8, lookups, plan)
		})
	}
}

// leaseLookups matches the lookups of a lease by ClaimDue's walks (the
// scalar subquery on leases x) in a plan that EXPLAIN ANALYZE shows, the
// number of lookups its group.
var leaseLookups = regexp.MustCompile(`Index Scan using leases_pkey on leases x\S* \(actual rows=\d+ loops=(\d+)\)`)

// explained counts the statements that explainClaimDue prepared.
var explained atomic.Int64

// explainClaimDue returns the plan that explain (an EXPLAIN command with
// its options) shows for ClaimDue of 8 records under "obj/" with
// plan_cache_mode set to mode, in a transaction that it rolls back.
func explainClaimDue(t *testing.T, ctx context.Context, s *Store, mode, explain string) string {
	t.Helper()
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	// A prepared statement outlives the transaction: each gets a name of
	// its own on the pool's connections.
	name := fmt.Sprintf("claim_due_%d", explained.Add(1))
	_, err = tx.Exec(ctx, "PREPARE "+name+" AS "+s.sql.claimDue)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, explain+" EXECUTE "+name+"('obj/', 8, 'o', 60000000)")
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// TestClaimDueByRankReadsNoMoreThanItTakes checks that ClaimDue among
// records of many priorities walks records_due in the order of their
// rank (due time less the priority's worth) and stops at its limit: the
// order by priority costs no sort of the due records, and the records of
// a high priority not due yet that the walk passes over are only those
// due within their priority's worth of now.
func TestClaimDueByRankReadsNoMoreThanItTakes(t *testing.T) {
	ctx, s, _ := openInternal(t)
	_, err := s.pool.Exec(ctx, `INSERT INTO converge.records (key, version, value, due_at, priority)
		SELECT 'obj/' || lpad(i::text, 6, '0'), 1, '{}', now() - (i % 7) * interval '1 second', i % 5
		FROM generate_series(1, 5000) i`)
	require.NoError(t, err)
	// Of priority 100, due in 10 minutes: ranked after now, never walked.
	_, err = s.pool.Exec(ctx, `INSERT INTO converge.records (key, version, value, due_at, priority)
		SELECT 'obj/later-' || i, 1, '{}', now() + interval '10 minutes', 100 FROM generate_series(1, 500) i`)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `ANALYZE converge.records`)
	require.NoError(t, err)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			plan := explainClaimDue(t, ctx, s, mode, "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF)")
			assert.NotContains(t, plan, "Seq Scan on records", plan)
			assert.NotContains(t, plan, "Sort Key: r", plan)
			assert.Regexp(t, `Index Scan using records_due on records \S+ \(actual rows=8 loops=1\)`, plan)
		})
	}
	got, err := s.ClaimDue(ctx, "obj/", "o", time.Minute, 3)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, c := range got {
		p, err := s.Priority(ctx, c.Record.Key)
		require.NoError(t, err)
		assert.Equal(t, 4, p, "the highest priority due first: %s", c.Record.Key)
	}
}
