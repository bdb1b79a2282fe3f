package pgstore

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

// TestFenceIsCheckedWhenTheWriteRuns runs each fenced write in a
// transaction that started while its lease was valid, after the lease
// expired: the write must be refused. A group of writes (group) is one
// transaction, so a write late in a batch runs after the batch started;
// when the fence compared the lease's expiry with now() (the start of the
// transaction) such a write was accepted up to a batch's duration after
// its lease had expired.
func TestFenceIsCheckedWhenTheWriteRuns(t *testing.T) {
	ctx, s, _ := openInternal(t)

	for _, tc := range []struct {
		name   string
		create bool
	}{
		{"update", false},
		{"create", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "fence-" + tc.name
			var version int64
			if !tc.create {
				v, err := s.Put(ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`{}`)})
				require.NoError(t, err)
				version = int64(v)
			}
			l, err := s.Claim(ctx, key, "me", time.Hour)
			require.NoError(t, err)

			tx, err := s.pool.Begin(ctx) // now() is fixed from here on
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
			var began time.Time
			require.NoError(t, tx.QueryRow(ctx, `SELECT now()`).Scan(&began))
			// The lease expires after the transaction began, and before
			// the write runs in it.
			_, err = s.pool.Exec(ctx, `UPDATE converge.leases SET expires = clock_timestamp() WHERE key = $1`, key)
			require.NoError(t, err)
			var expires time.Time
			require.NoError(t, s.pool.QueryRow(ctx, `SELECT expires FROM converge.leases WHERE key = $1`, key).Scan(&expires))
			require.True(t, expires.After(began), "the lease expired after the transaction began")

			h, err := s.history(key, nil)
			require.NoError(t, err)
			args := []any{key, version, []byte(`{"late":true}`), int64(l.Token)}
			args = append(args, h.args()...)
			if tc.create {
				args = append(args, s.channel, payload(key))
			}
			var v int64
			var ignored string
			err = tx.QueryRow(ctx, s.sql.put[putVariant(tc.create, true)], args...).Scan(&v, &ignored)
			assert.ErrorIs(t, err, pgx.ErrNoRows, "a write whose lease expired before it ran is refused")
		})
	}
}
