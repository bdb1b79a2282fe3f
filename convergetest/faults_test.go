package convergetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

func TestFaultStorePartitionFailsEveryCallUntilHealed(t *testing.T) {
	ctx := context.Background()
	mem := converge.NewMemStore()
	var f convergetest.FaultStore
	f.Inner = mem
	_, err := f.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	f.Partition(convergetest.PartitionFail)
	calls := []func() error{
		func() error { _, err := f.Get(ctx, "k"); return err },
		func() error {
			_, err := f.Put(ctx, converge.StoreRecord{Key: "k", Version: 1, Value: json.RawMessage(`2`)})
			return err
		},
		func() error { _, err := f.List(ctx, ""); return err },
		func() error { _, err := f.Claim(ctx, "k", "a", time.Minute); return err },
		func() error { _, err := f.ClaimDue(ctx, "", "a", time.Minute, 1); return err },
		func() error { return f.Schedule(ctx, "k", time.Now()) },
		func() error { _, err := f.Watch(ctx, "", func(string) {}); return err },
	}
	for _, call := range calls {
		err := call()
		require.ErrorIs(t, err, convergetest.ErrPartitioned)
		var se *convergetest.StoreError
		require.ErrorAs(t, err, &se)
	}
	rec, err := mem.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), rec.Version, "nothing reached the store")
	n, cut := f.Calls()
	assert.Equal(t, 1+len(calls), n)
	assert.Equal(t, len(calls), cut)

	f.Heal()
	_, err = f.Put(ctx, converge.StoreRecord{Key: "k", Version: 1, Value: json.RawMessage(`2`)})
	require.NoError(t, err, "healed")
}

func TestFaultStoreHangWaitsForHealOrContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := convergetest.NewFaultStore(converge.NewMemStore())
		f.Partition(convergetest.PartitionHang)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		_, err := f.Get(ctx, "k")
		require.ErrorIs(t, err, context.DeadlineExceeded, "hangs until the context ends")
		assert.Equal(t, time.Minute, time.Since(start))

		done := make(chan error)
		go func() {
			_, err := f.Put(context.Background(), converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
			done <- err
		}()
		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("returned while cut off: %v", err)
		default:
		}
		f.Heal()
		require.NoError(t, <-done, "goes through once healed")
		_, err = f.Get(context.Background(), "k")
		require.NoError(t, err)
	})
}

func TestFaultStoreDelayAndClockStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := convergetest.NewFaultStore(nil)
		f.Delay(3 * time.Second)
		start := time.Now()
		_, err := f.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
		require.NoError(t, err)
		assert.Equal(t, 3*time.Second, time.Since(start), "the reply comes late")

		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err = f.Put(short, converge.StoreRecord{Key: "k", Version: 1, Value: json.RawMessage(`2`)})
		require.ErrorIs(t, err, context.DeadlineExceeded, "the caller gave up waiting")
		f.Delay(0)
		rec, err := f.Get(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, uint64(2), rec.Version, "the store did the write before the late reply")

		assert.Equal(t, time.Now(), f.Now())
		f.Step(-time.Hour)
		assert.Equal(t, time.Now().Add(-time.Hour), f.Now())
		assert.Equal(t, "hang", convergetest.PartitionHang.String())
	})
}

func TestRunsFindsOverlappingRunsOfOneObject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r convergetest.Runs
		endA := r.Begin("x", "a")
		time.Sleep(time.Second)
		endB := r.Begin("y", "b") // another object: never overlaps x
		time.Sleep(time.Second)
		endA()
		endC := r.Begin("x", "c") // starts as a ends: no overlap
		time.Sleep(time.Second)
		assert.Empty(t, r.Overlaps())
		endD := r.Begin("x", "d") // c still runs
		time.Sleep(time.Second)
		endD()
		endC()
		endB()
		endB() // again: no change
		overlaps := r.Overlaps()
		require.Len(t, overlaps, 1)
		assert.Equal(t, "c", overlaps[0].A.Owner)
		assert.Equal(t, "d", overlaps[0].B.Owner)
		assert.Contains(t, overlaps[0].String(), `object "x"`)
		assert.Equal(t, 4, r.Len())
		assert.Equal(t, 2*time.Second, r.Runs()[0].End.Sub(r.Runs()[0].Start))
	})
}

// TestRunsMostAtOnceCountsRunsOfAStateTogether: the most runs at one
// time of objects in a state, whatever their object and owner; runs of
// other states, and a run ending as another begins, do not count.
func TestRunsMostAtOnceCountsRunsOfAStateTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r convergetest.Runs
		endA := r.BeginIn("x", "r0", "b")
		endB := r.BeginIn("y", "r1", "b")
		endO := r.BeginIn("z", "r1", "a") // another state
		time.Sleep(time.Second)
		endA()
		endC := r.BeginIn("w", "r2", "b") // starts as a ends: 2, not 3
		time.Sleep(time.Second)
		assert.Equal(t, 2, r.MostAtOnce("b"))
		endD := r.BeginIn("v", "r0", "b") // b and c still run; d is going
		time.Sleep(time.Second)
		assert.Equal(t, 3, r.MostAtOnce("b"), "a run still going counts")
		endB()
		endC()
		endD()
		endO()
		assert.Equal(t, 3, r.MostAtOnce("b"))
		assert.Equal(t, 1, r.MostAtOnce("a"))
		assert.Zero(t, r.MostAtOnce("c"))
		assert.Equal(t, "b", r.Runs()[0].State)
	})
}

// TestScheduleResultErrOnALimitExceeded: a result that saw more handlers
// at once in the limited state than its limit fails with
// ErrLimitExceeded; one at its limit does not.
func TestScheduleResultErrOnALimitExceeded(t *testing.T) {
	require.NoError(t, convergetest.ScheduleResult{Limit: 2, MostAtOnce: 2}.Err())
	err := convergetest.ScheduleResult{Limit: 2, MostAtOnce: 3}.Err()
	require.ErrorIs(t, err, convergetest.ErrLimitExceeded)
	assert.NotErrorIs(t, err, convergetest.ErrOverlap)
	assert.Contains(t, err.Error(), `3 handlers at once in state "b", above its limit of 2`)
}

func TestRunScheduleNeedsTwoStores(t *testing.T) {
	_, err := convergetest.RunSchedule(context.Background(), convergetest.Schedule{Stores: []converge.Queue{converge.NewMemStore()}})
	require.Error(t, err)
	_, err = convergetest.RunSchedule(context.Background(), convergetest.Schedule{
		Stores: []converge.Queue{converge.NewMemStore(), converge.NewMemStore()}, Links: []convergetest.Link{nil}})
	require.Error(t, err)
}

// TestRunScheduleFindsOverlaps: replicas on a store whose leases last a
// hundredth of what they ask for lose their objects while they handle
// them, and the schedule reports the overlaps.
func TestRunScheduleFindsOverlaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := shortLeases{converge.NewMemStore()}
		res, err := convergetest.RunSchedule(context.Background(), convergetest.Schedule{
			Seed: 1, Stores: []converge.Queue{store, store, store}, Objects: 2,
		})
		require.NoError(t, err)
		assert.Positive(t, res.Runs)
		assert.Positive(t, res.Faults)
		assert.NotEmpty(t, res.Events)
		assert.NotEmpty(t, res.Overlaps, "leases too short to hold an object")
	})
}

// shortLeases is a MemStore whose leases last a hundredth of their TTL.
type shortLeases struct{ *converge.MemStore }

func (s shortLeases) Claim(ctx context.Context, key, owner string, ttl time.Duration) (converge.Lease, error) {
	return s.MemStore.Claim(ctx, key, owner, ttl/100)
}

func (s shortLeases) ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]converge.Claimed, error) {
	return s.MemStore.ClaimDue(ctx, prefix, owner, ttl/100, limit)
}

// TestEntriesMostIn: the most entries in one window counts an entry only
// when its whole span lies in the window, and windows are half-open.
func TestEntriesMostIn(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		name   string
		spans  [][2]float64 // asked, answered, in seconds
		window time.Duration
		want   int
	}{
		{"none", nil, time.Second, 0},
		{"one", [][2]float64{{0, 0}}, time.Second, 1},
		{"two within a window", [][2]float64{{0, 0}, {0.9, 0.9}}, time.Second, 2},
		{"a window is half-open", [][2]float64{{0, 0}, {1, 1}}, time.Second, 1},
		{"the densest window", [][2]float64{{0, 0}, {5, 5}, {5.5, 5.5}, {5.9, 5.9}, {7, 7}}, time.Second, 3},
		{"a span that does not fit counts in no window", [][2]float64{{0, 0}, {0.5, 1.5}}, time.Second, 1},
		{"a span that fits counts", [][2]float64{{0, 0.2}, {0.5, 0.9}}, time.Second, 2},
		{"order of adding does not matter", [][2]float64{{5.9, 5.9}, {0, 0}, {5.5, 5.5}, {5, 5}}, time.Second, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e convergetest.Entries
			for i, s := range tt.spans {
				e.Add(fmt.Sprintf("o%d", i), at(s[0]), at(s[1]))
			}
			assert.Equal(t, len(tt.spans), e.Len())
			assert.Equal(t, tt.want, e.MostIn(tt.window))
		})
	}
}

// TestScheduleResultErrOnARateExceeded: a result that saw more entries
// into the limited state in one span of Burst×Every than its Burst fails
// with ErrRateExceeded; one at its Burst does not.
func TestScheduleResultErrOnARateExceeded(t *testing.T) {
	require.NoError(t, convergetest.ScheduleResult{Every: time.Second, Burst: 2, MostInWindow: 2}.Err())
	err := convergetest.ScheduleResult{Every: time.Second, Burst: 2, MostInWindow: 3}.Err()
	require.ErrorIs(t, err, convergetest.ErrRateExceeded)
	assert.NotErrorIs(t, err, convergetest.ErrOverlap)
	assert.NotErrorIs(t, err, convergetest.ErrLimitExceeded)
	assert.Contains(t, err.Error(), `3 entries into state "b" within 2s, above its burst of 2`)
	err = convergetest.ScheduleResult{Limit: 1, MostAtOnce: 2, Every: time.Second, Burst: 2, MostInWindow: 3}.Err()
	require.ErrorIs(t, err, convergetest.ErrLimitExceeded)
	assert.Contains(t, err.Error(), "above its burst")
}

// TestRunScheduleRefusesInvalidLimits: limits a controller would refuse
// are refused before anything runs.
func TestRunScheduleRefusesInvalidLimits(t *testing.T) {
	mem := converge.NewMemStore()
	for _, s := range []convergetest.Schedule{
		{Limit: -1}, {Every: -time.Second}, {Burst: 2}, {Every: time.Second, Burst: -1},
	} {
		s.Stores = []converge.Queue{mem, mem}
		_, err := convergetest.RunSchedule(context.Background(), s)
		assert.Error(t, err, "%+v", s)
	}
}
