package boltstore

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// TestGroupCommitFailure queues writes behind a running commit so they
// share the next one, where one fails: it alone gets the error, the others
// are run again without it and committed once, with their own results.
func TestGroupCommitFailure(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Options{})
	require.NoError(t, err)
	defer s.Close()

	inLeader, release := make(chan struct{}), make(chan struct{})
	var leaderErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		leaderErr = s.update(func(tx *bolt.Tx) error {
			close(inLeader)
			<-release
			return tx.Bucket(bucketTargets).Put([]byte("leader"), []byte("1"))
		})
	})
	<-inLeader

	boom := errors.New("boom")
	var runs [3]int
	var results [3]string
	var errs [3]error
	for i := range 3 {
		wg.Go(func() {
			errs[i] = s.update(func(tx *bolt.Tx) error {
				runs[i]++ // calls are serial: one transaction at a time
				results[i] = ""
				b := tx.Bucket(bucketTargets)
				n := string(b.Get([]byte("count"))) + "x"
				if err := b.Put([]byte("count"), []byte(n)); err != nil {
					return err
				}
				if i == 1 {
					return boom // after writing: the rollback must undo it
				}
				results[i] = n
				return nil
			})
		})
	}
	// Wait until the three are queued behind the leader.
	require.Eventually(t, func() bool {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		return len(s.queue) == 3
	}, 5e9, 1e6)
	close(release)
	wg.Wait()

	require.NoError(t, leaderErr)
	require.ErrorIs(t, errs[1], boom)
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	assert.ElementsMatch(t, []string{"x", "xx"}, []string{results[0], results[2]}, "each write saw the committed ones only")
	assert.Equal(t, 1, runs[1])
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		assert.Equal(t, "xx", string(tx.Bucket(bucketTargets).Get([]byte("count"))), "two writes committed, the failed one not")
		assert.Equal(t, "1", string(tx.Bucket(bucketTargets).Get([]byte("leader"))))
		return nil
	}))
}
