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

// partitionLimit is the limit on the handlers at once of the schedules'
// objects in convergetest.LimitedState.
const partitionLimit = 2

// partitionBurst and partitionEvery are the entry rate of the schedules'
// objects into convergetest.LimitedState: at most partitionBurst entries
// in any span of partitionBurst×partitionEvery, a span of one LeaseTTL.
const (
	partitionBurst = 2
	partitionEvery = 5 * time.Second
)

// TestPartitionSchedulesNeverOverlapOnMemStore runs three replicas on one
// MemStore through randomized schedules of partitions (calls failing or
// hanging), heals, kills, slow replies and clock steps, and checks that no
// object is ever handled by two replicas at once, and that no more
// handlers than the limit run at once in the limited state (the limit
// checker), which they reach. Each schedule runs in its own synctest
// bubble, so the minutes of leases they span take no real time.
func TestPartitionSchedulesNeverOverlapOnMemStore(t *testing.T) {
	var total convergetest.ScheduleResult
	for seed := range uint64(partitionSchedules) {
		synctest.Test(t, func(t *testing.T) {
			mem := converge.NewMemStore()
			res, err := convergetest.RunSchedule(context.Background(), convergetest.Schedule{
				Seed: seed, Stores: []converge.Queue{mem, mem, mem}, LeaseTTL: 10 * time.Second,
				Limit: partitionLimit, Every: partitionEvery, Burst: partitionBurst,
			})
			require.NoError(t, err)
			requireNoOverlap(t, seed, res)
			addSchedule(&total, res)
		})
	}
	reportSchedules(t, "MemStore", partitionSchedules, total)
	reportLimit(t, "MemStore", total)
	reportRate(t, "MemStore", total)
}

// addSchedule adds the counts of res to total.
func addSchedule(total *convergetest.ScheduleResult, res convergetest.ScheduleResult) {
	total.Runs += res.Runs
	total.Faults += res.Faults
	total.Partitions += res.Partitions
	total.Kills += res.Kills
	total.ClockSteps += res.ClockSteps
	total.Slowdowns += res.Slowdowns
	total.Overlaps = append(total.Overlaps, res.Overlaps...)
	total.Limit = res.Limit
	total.MostAtOnce = max(total.MostAtOnce, res.MostAtOnce)
	total.Every, total.Burst = res.Every, res.Burst
	total.Entries += res.Entries
	total.MostInWindow = max(total.MostInWindow, res.MostInWindow)
}

// reportLimit logs the limit checker's counts and checks that the most
// handlers seen at once in the limited state reached its limit, and
// never went above it.
func reportLimit(t *testing.T, store string, total convergetest.ScheduleResult) {
	t.Logf("limit checker: store=%s handler runs=%d faults=%d (partitions=%d kills=%d clock steps=%d slowdowns=%d) largest concurrency in %s=%d limit=%d",
		store, total.Runs, total.Faults, total.Partitions, total.Kills, total.ClockSteps, total.Slowdowns,
		convergetest.LimitedState, total.MostAtOnce, total.Limit)
	t.Attr("largest_concurrency", strconv.Itoa(total.MostAtOnce))
	require.LessOrEqual(t, total.MostAtOnce, total.Limit, "never above the limit")
	require.Equal(t, total.Limit, total.MostAtOnce, "the limit was reached: the check is not vacuous")
}

// reportRate logs the rate checker's counts and checks that the most
// entries into the limited state seen in one span of Burst×Every
// reached its Burst, and never went above it.
func reportRate(t *testing.T, store string, total convergetest.ScheduleResult) {
	window := time.Duration(total.Burst) * total.Every
	t.Logf("rate checker: store=%s entries into %s=%d largest in one %s window=%d limit=%d per %s (Every=%s Burst=%d)",
		store, convergetest.LimitedState, total.Entries, window, total.MostInWindow, total.Burst, window, total.Every, total.Burst)
	t.Attr("entries", strconv.Itoa(total.Entries))
	t.Attr("largest_entries_in_window", strconv.Itoa(total.MostInWindow))
	require.LessOrEqual(t, total.MostInWindow, total.Burst, "never above the entry rate")
	require.Equal(t, total.Burst, total.MostInWindow, "the entry rate was reached: the check is not vacuous")
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
