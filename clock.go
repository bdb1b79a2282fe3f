package converge

import (
	"time"

	"github.com/convergekit/converge/internal/sysclock"
)

// walkClock reads the time for one walk. With the system clock it reads
// only the monotonic clock after the walk's first reading and derives the
// wall time from it: on virtual machines a time.Now, which reads both
// clocks, can cost well over 100 ns, once per item. The times it returns
// carry a monotonic reading, like time.Now's, and their wall time is the
// walk's start plus the monotonic time elapsed since, so a wall-clock step
// during a walk does not reorder its items' times.
type walkClock struct {
	base time.Time
	now  func() time.Time // nil: the system clock, read as above
}

// newWalkClock returns a clock reading from now (nil or time.Now: the
// system clock) and its first reading.
func newWalkClock(now func() time.Time) (walkClock, time.Time) {
	if sysclock.Is(now) {
		t := time.Now()
		return walkClock{base: t}, t
	}
	return walkClock{now: now}, now()
}

// Now returns the current time.
func (c *walkClock) Now() time.Time {
	if c.now != nil {
		return c.now()
	}
	return c.base.Add(time.Since(c.base))
}
