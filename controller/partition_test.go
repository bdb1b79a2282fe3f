package controller_test

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// partitionSchedules is how many randomized schedules of faults the
// partition checker runs on each store in the normal test run.
const partitionSchedules = 100

// TestPartitionSchedulesNeverOverlapOnMemStore runs three replicas on one
// MemStore through randomized schedules of partitions (calls failing or
// hanging), heals, kills, slow replies and clock steps, and checks that no
// object is ever handled by two replicas at once. Each schedule runs in
// its own synctest bubble, so the minutes of leases they span take no real
// time.
func TestPartitionSchedulesNeverOverlapOnMemStore(t *testing.T) {
	var total convergetest.ScheduleResult
	for seed := range uint64(partitionSchedules) {
		synctest.Test(t, func(t *testing.T) {
			mem := converge.NewMemStore()
			res, err := convergetest.RunSchedule(context.Background(), convergetest.Schedule{
				Seed: seed, Stores: []converge.Queue{mem, mem, mem}, LeaseTTL: 10 * time.Second,
			})
			require.NoError(t, err)
			requireNoOverlap(t, seed, res)
			total.Runs += res.Runs
			total.Faults += res.Faults
			total.Overlaps = append(total.Overlaps, res.Overlaps...)
		})
	}
	reportSchedules(t, "MemStore", partitionSchedules, total)
}

// requireNoOverlap fails the test with the schedule's events when res has
// an overlap or an overrun.
func requireNoOverlap(t *testing.T, seed uint64, res convergetest.ScheduleResult) {
	t.Helper()
	require.Positive(t, res.Runs, "schedule %d ran handlers", seed)
	if err := res.Err(); err != nil {
		t.Fatalf("schedule %d: %v", seed, err)
	}
}

// reportSchedules logs the partition checker's figure and attaches it to
// the test as attributes (shown by go test -v and -json).
func reportSchedules(t *testing.T, store string, schedules int, total convergetest.ScheduleResult) {
	t.Logf("partition checker on %s: %d schedules run, %d handler runs checked, %d faults injected, %d overlaps",
		store, schedules, total.Runs, total.Faults, len(total.Overlaps))
	t.Attr("schedules", strconv.Itoa(schedules))
	t.Attr("handler_runs", strconv.Itoa(total.Runs))
	t.Attr("overlaps", strconv.Itoa(len(total.Overlaps)))
	require.Empty(t, total.Overlaps)
}
