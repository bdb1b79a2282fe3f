package converge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

func TestPriorityRank(t *testing.T) {
	const bound = math.MaxInt64 / 2
	tests := []struct {
		name     string
		due      int64
		priority int
		want     int64
	}{
		{"priority 0 is the due time", 1_000, 0, 1_000},
		{"each level is worth a step", 10 * int64(time.Second), 3, 7 * int64(time.Second)},
		{"at once, the lowest priority", math.MinInt64, 0, math.MinInt64},
		{"at once, the highest priority, no overflow", math.MinInt64, converge.MaxPriority, math.MinInt64},
		{"before 1824 is at once", -bound, 5, math.MinInt64},
		{"never, no overflow", math.MaxInt64, converge.MaxPriority, math.MaxInt64},
		{"after 2116 is never", bound, 5, math.MaxInt64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, converge.PriorityRank(tc.due, tc.priority))
		})
	}
}

func TestCheckPriority(t *testing.T) {
	for _, p := range []int{0, 1, converge.MaxPriority} {
		require.NoError(t, converge.CheckPriority("k", p), p)
	}
	for _, p := range []int{-1, converge.MaxPriority + 1, math.MinInt} {
		err := converge.CheckPriority("k", p)
		require.ErrorIs(t, err, converge.ErrStoreInvalid, p)
		var re *converge.StoreRequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, "priority", re.Field)
		assert.Equal(t, "k", re.Key)
	}
}

// A record of a higher priority is claimed first among due records; one
// that waited long enough goes first whatever the priorities (ageing).
func ExampleMemStore_PutPriority() {
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s := &converge.MemStore{Now: func() time.Time { return now }}
	put := func(key string, priority int, dueAgo time.Duration) {
		if _, err := s.PutPriority(ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`{}`)}, priority); err != nil {
			panic(err)
		}
		if err := s.Schedule(ctx, key, now.Add(-dueAgo)); err != nil {
			panic(err)
		}
	}
	put("job/routine", 0, 5*time.Second)
	put("job/urgent", 10, 0)
	put("job/waited", 0, time.Minute) // a minute due: worth priority 60
	claimed, err := s.ClaimDue(ctx, "job/", "replica-1", time.Minute, 10)
	if err != nil {
		panic(err)
	}
	for _, c := range claimed {
		fmt.Println(c.Record.Key)
	}
	// Output:
	// job/waited
	// job/urgent
	// job/routine
}
