package converge

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestWalkClockSystem(t *testing.T) {
	c, first := newWalkClock(time.Now)
	prev := first
	for range 1000 {
		now := c.Now()
		assert.False(t, now.Before(prev), "the clock went back")
		prev = now
	}
	// A reading carries the monotonic clock, as time.Now's does, and its
	// wall time is the wall clock's, give or take the walk's drift.
	assert.NotEqual(t, prev, prev.Round(0), "no monotonic reading")
	assert.WithinDuration(t, time.Now(), prev, time.Second)
}

func TestWalkClockCustom(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	c, first := newWalkClock(func() time.Time { at = at.Add(time.Second); return at })
	assert.Equal(t, time.Unix(1_800_000_001, 0), first)
	assert.Equal(t, time.Unix(1_800_000_002, 0), c.Now())
}
