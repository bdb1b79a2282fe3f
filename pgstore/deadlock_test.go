package pgstore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestFencedPutAndClaimDueDoNotDeadlock runs owners that claim batches,
// write each record fenced by its lease and finish it due at once, on
// three stores at the same time: the fenced write must lock the record
// before the lease, as ClaimDue and Finish do, or PostgreSQL finds
// deadlocks between them (SQLSTATE 40P01).
func TestFencedPutAndClaimDueDoNotDeadlock(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	stores := []*pgstore.Store{open(t, dsn, pgstore.Options{}), open(t, dsn, pgstore.Options{}), open(t, dsn, pgstore.Options{})}
	for i := range 40 {
		_, err := stores[0].Put(ctx, converge.StoreRecord{Key: fmt.Sprintf("d/%02d", i), Value: json.RawMessage(`0`)})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var errs []error
	var writes int
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for i, s := range stores {
		for w := range 3 {
			owner := fmt.Sprintf("owner-%d-%d", i, w)
			wg.Go(func() {
				for time.Now().Before(deadline) {
					claimed, err := s.ClaimDue(ctx, "d/", owner, time.Minute, 4)
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						continue
					}
					for _, c := range claimed {
						rec := c.Record
						rec.Token = c.Lease.Token
						rec.Value = json.RawMessage(`1`)
						_, err := s.Put(ctx, rec, converge.HistoryEntry{At: time.Now(), To: "x"})
						if err == nil {
							err = s.Finish(ctx, c.Lease, time.Now().Add(-time.Second))
						}
						mu.Lock()
						if err != nil {
							errs = append(errs, err)
						} else {
							writes++
						}
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	for _, err := range errs {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			assert.NotEqual(t, "40P01", pe.Code, "deadlock: %v", err)
		}
	}
	assert.Empty(t, errs, "no claim, fenced write or finish fails")
	assert.Positive(t, writes)
	t.Logf("%d fenced writes by 9 owners on 3 stores", writes)
}
