package pgstore_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestTargetRevisionsAcrossReplicas stores targets under one name through
// two stores on one database, as two replicas do: every revision is given
// once, and both read the target of the highest.
func TestTargetRevisionsAcrossReplicas(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	replicas := []*pgstore.Store{open(t, dsn, pgstore.Options{}), open(t, dsn, pgstore.Options{})}
	const each = 25
	var mu sync.Mutex
	given := map[uint64]string{}
	var wg sync.WaitGroup
	for i, s := range replicas {
		for w := range 4 {
			wg.Go(func() {
				for n := range each {
					v := fmt.Sprintf(`{"replica":%d,"writer":%d,"n":%d}`, i, w, n)
					rev, err := s.PutTarget(ctx, "device", json.RawMessage(v))
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					if prev, dup := given[rev]; dup {
						t.Errorf("revision %d given to %s and %s", rev, prev, v)
					}
					given[rev] = v
					mu.Unlock()
				}
			})
		}
		// Revisions without a target interleave with the targets.
		wg.Go(func() {
			for range each {
				rev, err := s.PutTarget(ctx, "device", nil)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				if prev, dup := given[rev]; dup {
					t.Errorf("revision %d given to %s and to a PutTarget without a target", rev, prev)
				}
				given[rev] = ""
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := uint64(len(replicas) * 5 * each)
	require.Len(t, given, int(total))
	var top uint64 // of a target
	for rev, v := range given {
		if v != "" {
			top = max(top, rev)
		}
	}
	for _, s := range replicas {
		got, rev, err := s.Target(ctx, "device")
		require.NoError(t, err)
		assert.Equal(t, top, rev)
		assert.JSONEq(t, given[top], string(got))
	}
	next, err := replicas[0].PutTarget(ctx, "device", nil)
	require.NoError(t, err)
	assert.Equal(t, total+1, next, "revisions follow each other, from 1")
}

// TestTargetsOfAnOlderSchema checks migration 3 on a database whose
// targets were stored before revisions were kept: they read as revision 1.
func TestTargetsOfAnOlderSchema(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	s, err := pgstore.Open(ctx, dsn, pgstore.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	// Back to schema version 2, with a target written then.
	undoMigration6(t, dsn, "converge")
	query(t, dsn, `DELETE FROM converge.migrations WHERE version >= 3`, nil)
	query(t, dsn, `ALTER TABLE converge.history DROP COLUMN subject, DROP COLUMN made_by`, nil) // migrations 4 and 5
	query(t, dsn, `ALTER TABLE converge.targets DROP COLUMN revision, DROP COLUMN last_revision, ALTER COLUMN value SET NOT NULL`, nil)
	query(t, dsn, `INSERT INTO converge.targets (name, value) VALUES ('device', '{"app":"v1"}'::bytea)`, nil)

	s = open(t, dsn, pgstore.Options{})
	got, rev, err := s.Target(ctx, "device")
	require.NoError(t, err)
	assert.JSONEq(t, `{"app":"v1"}`, string(got))
	assert.Equal(t, uint64(1), rev)
	rev, err = s.PutTarget(ctx, "device", json.RawMessage(`{"app":"v2"}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), rev)

	_, _, err = s.Target(ctx, "other")
	require.ErrorIs(t, err, converge.ErrStoreNotFound)
	rev, err = s.PutTarget(ctx, "other", nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), rev)
	_, _, err = s.Target(ctx, "other")
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "a revision without a target stores none")
}
