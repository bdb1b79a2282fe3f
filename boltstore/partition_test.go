package boltstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/convergetest"
)

// TestPartitionSchedulesNeverOverlapOnBoltStore runs three replicas on
// one bolt file through 100 randomized schedules of partitions (calls
// failing or hanging), heals, kills, slow replies and clock steps, and
// checks that no object is ever handled by two replicas at once, and
// that no more handlers than the limit run at once in the limited state
// (the limit checker), and no more objects enter it in any span of
// Burst×Every than its Burst (the rate checker, on the store's clock),
// both of which they reach. Each schedule runs in its own synctest bubble
// on a file of its own.
func TestPartitionSchedulesNeverOverlapOnBoltStore(t *testing.T) {
	const schedules, limit = 100, 2
	// The entry rate into the limited state: at most burst entries in any
	// span of burst×every, one LeaseTTL.
	const burst, every = 2, 5 * time.Second
	dir := memDir(t)
	runs, faults, overlaps := 0, 0, 0
	var total convergetest.ScheduleResult
	for seed := range uint64(schedules) {
		synctest.Test(t, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("s%d.db", seed))
			st, err := boltstore.Open(path, boltstore.Options{})
			require.NoError(t, err)
			defer func() {
				require.NoError(t, st.Close())
				require.NoError(t, os.Remove(path))
			}()
			res, err := convergetest.RunSchedule(context.Background(), convergetest.Schedule{
				Seed: seed, Stores: []converge.Queue{st, st, st}, LeaseTTL: 10 * time.Second,
				Limit: limit, Every: every, Burst: burst,
			})
			require.NoError(t, err)
			require.Positive(t, res.Runs, "schedule %d ran handlers", seed)
			if err := res.Err(); err != nil {
				t.Fatalf("schedule %d: %v", seed, err)
			}
			runs += res.Runs
			faults += res.Faults
			overlaps += len(res.Overlaps)
			total.Partitions += res.Partitions
			total.Kills += res.Kills
			total.ClockSteps += res.ClockSteps
			total.Slowdowns += res.Slowdowns
			total.MostAtOnce = max(total.MostAtOnce, res.MostAtOnce)
			total.Entries += res.Entries
			total.MostInWindow = max(total.MostInWindow, res.MostInWindow)
		})
	}
	t.Logf("partition checker on boltstore: %d schedules run, %d handler runs checked, %d faults injected, %d overlaps",
		schedules, runs, faults, overlaps)
	t.Attr("schedules", strconv.Itoa(schedules))
	t.Attr("handler_runs", strconv.Itoa(runs))
	t.Attr("overlaps", strconv.Itoa(overlaps))
	require.Zero(t, overlaps)
	t.Logf("limit checker: store=boltstore handler runs=%d faults=%d (partitions=%d kills=%d clock steps=%d slowdowns=%d) largest concurrency in %s=%d limit=%d",
		runs, faults, total.Partitions, total.Kills, total.ClockSteps, total.Slowdowns, convergetest.LimitedState, total.MostAtOnce, limit)
	t.Attr("largest_concurrency", strconv.Itoa(total.MostAtOnce))
	require.LessOrEqual(t, total.MostAtOnce, limit, "never above the limit")
	require.Equal(t, limit, total.MostAtOnce, "the limit was reached: the check is not vacuous")
	t.Logf("rate checker: store=boltstore entries into %s=%d largest in one %s window=%d limit=%d per %s (Every=%s Burst=%d)",
		convergetest.LimitedState, total.Entries, burst*every, total.MostInWindow, burst, burst*every, every, burst)
	t.Attr("entries", strconv.Itoa(total.Entries))
	t.Attr("largest_entries_in_window", strconv.Itoa(total.MostInWindow))
	require.LessOrEqual(t, total.MostInWindow, burst, "never above the entry rate")
	require.Equal(t, burst, total.MostInWindow, "the entry rate was reached: the check is not vacuous")
}

// memDir returns a directory removed when the test ends, in memory
// (/dev/shm) when there is one: the schedules test leases, not the disk,
// and thousands of fsyncs to a disk shared with other work would take
// minutes instead of seconds.
func memDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "boltstore-partition-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
