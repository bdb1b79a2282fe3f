package pgstore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
			cfg, err := pgxpool.ParseConfig(dsn)
			require.NoError(t, err)
			cfg.MaxConns = 1 // every statement prepared on the connection read below
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			defer pool.Close()
			schema := "plans_" + strings.ReplaceAll(tc.name, " ", "_")
			s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema, Retention: tc.ret})
			require.NoError(t, err)
			defer s.Close()

			// A bulk load that no ANALYZE (nor autovacuum) has seen.
			q := pgx.Identifier{schema}.Sanitize()
			for _, tbl := range []string{"records", "history", "leases"} {
				_, err := pool.Exec(ctx, "ALTER TABLE "+q+"."+tbl+" SET (autovacuum_enabled = false)")
				require.NoError(t, err)
			}
			_, err = pool.Exec(ctx, `INSERT INTO `+q+`.records (key, version, value, due_at)
				SELECT 'bulk-' || i, 1, '{}'::bytea, now() + interval '1 day' FROM generate_series(1, 5000) i`)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `INSERT INTO `+q+`.history (key, at, from_state, to_state, reason)
				SELECT 'bulk-' || (i % 5000), now(), 'a', 'b', '' FROM generate_series(1, 20000) i`)
			require.NoError(t, err)

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
				{"Claim", "VALUES ($1, $2, now()"},
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
