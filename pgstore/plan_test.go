package pgstore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestHotStatementsArePlannedGenerically runs the statements of the
// controller's hot path (Claim, ClaimDue, the fenced Put, the Put that
// creates, Finish) many times on one connection, on tables bulk-loaded
// and never analysed, and checks in pg_prepared_statements that
// PostgreSQL planned each of them generically after its first custom
// plans, whatever the retention options: re-planning every call cost a
// third of the CPU of a claimed object. Before the retention bounds were
// built into the SQL, the fenced Put (with its NULL age bound) and the
// Put that creates kept a custom plan on every call.
func TestHotStatementsArePlannedGenerically(t *testing.T) {
	dsn := pgtest.DSN(t)
	for _, tc := range []struct {
		name string
		ret  converge.Retention
	}{
		{"default retention", converge.Retention{}},
		{"entries and age", converge.Retention{Entries: 5, Age: time.Hour}},
		{"keep all", converge.Retention{Entries: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			schema := "plans_" + strings.ReplaceAll(tc.name, " ", "_")
			pool, s := pgstore.OpenUnplanned(t, dsn, pgstore.Options{Schema: schema, Retention: tc.ret})
			q := pgx.Identifier{schema}.Sanitize()

			const rounds = 30
			hist := converge.HistoryEntry{At: time.Now(), From: "new", To: "done"}
			for i := range rounds {
				key := fmt.Sprintf("obj-%03d", i)
				v, err := s.Put(ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`{}`)}, hist)
				require.NoError(t, err)
				cl, err := s.ClaimDue(ctx, "obj-", "me", time.Minute, 4)
				require.NoError(t, err)
				require.Len(t, cl, 1)
				l, err := s.Claim(ctx, key, "me", time.Minute) // renews
				require.NoError(t, err)
				_, err = s.Put(ctx, converge.StoreRecord{Key: key, Version: v, Value: json.RawMessage(`{"x":1}`), Token: l.Token}, hist)
				require.NoError(t, err)
				require.NoError(t, s.Finish(ctx, l, time.Time{}))
			}

			rows, err := pool.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
			require.NoError(t, err)
			type plans struct {
				sql             string
				generic, custom int64
			}
			got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (plans, error) {
				var p plans
				err := r.Scan(&p.sql, &p.generic, &p.custom)
				return p, err
			})
			require.NoError(t, err)
			for _, want := range []struct{ name, marker string }{
				{"Put (create)", "INSERT INTO " + q + ".records"},
				{"Put (fenced)", "FROM locked WHERE r.key = locked.key"},
				{"ClaimDue", "FOR UPDATE OF r SKIP LOCKED"},
				{"Claim", "SELECT $1, $2, now()"},
				{"Finish", "UPDATE " + q + ".leases l SET owner = ''"},
			} {
				var found []plans
				for _, p := range got {
					if strings.Contains(p.sql, want.marker) {
						found = append(found, p)
					}
				}
				if !assert.Len(t, found, 1, "%s: prepared statements containing %q", want.name, want.marker) {
					continue
				}
				p := found[0]
				assert.Equal(t, int64(rounds), p.generic+p.custom, "%s: executions", want.name)
				// PostgreSQL plans the first five executions for their
				// parameters, then compares: a statement whose generic
				// plan it rejects is planned again on every call.
				assert.LessOrEqual(t, p.custom, int64(5), "%s planned for its parameters %d times in %d calls", want.name, p.custom, rounds)
			}
		})
	}
}
