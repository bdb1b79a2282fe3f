package convergetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScheduleResultErr(t *testing.T) {
	assert.NoError(t, ScheduleResult{Runs: 3}.Err(), "a clean schedule")

	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	res := ScheduleResult{Runs: 2, Overlaps: []Overlap{{
		A: Run{Object: "o4", Owner: "r1", Start: at, End: at.Add(time.Second)},
		B: Run{Object: "o4", Owner: "r0", Start: at.Add(time.Second / 2), End: at.Add(2 * time.Second)},
	}}, Events: []string{"cut r1"}}
	err := res.Err()
	require.ErrorIs(t, err, ErrOverlap)
	assert.Contains(t, err.Error(), `object "o4"`)
	assert.Contains(t, err.Error(), "cut r1")

	assert.ErrorIs(t, ScheduleResult{Runs: 1, Overruns: 1}.Err(), ErrOverlap, "an overrun is an error too")
}
