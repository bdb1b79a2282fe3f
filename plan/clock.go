package plan

import (
	"sync"
	"time"

	"github.com/convergekit/converge/internal/sysclock"
)

// planClock is a Runner's clock: the wall clock its timestamps come
// from (RunnerConfig.Now; they are for people and for k0s) and a monotonic
// clock its timeouts are measured on, so that a wall-clock step (NTP
// setting the time of a device without a real-time clock) or the skew
// between replicas never makes a timeout fire early.
//
// A timestamp is tied to the monotonic reading of the step that set it
// (an anchor); one this runner did not set (a plan resumed after a restart
// or taken over from another replica) is tied to the reading at which the
// runner first asked about it: its age before that is unknown, since the
// wall clocks of two processes cannot be trusted to agree, so a timeout
// may fire late by the time the plan had no runner, never early.
type planClock struct {
	wall func() time.Time
	// mono returns the time elapsed since an arbitrary origin on a clock
	// that never steps.
	mono func() time.Duration

	mu sync.Mutex
	// anchors maps a plan ID, then a timestamp (Unix nanoseconds), to the
	// monotonic reading it is tied to. A plan's map is dropped when the
	// plan ends.
	anchors map[string]map[int64]time.Duration
}

// newPlanClock returns the clock of a runner whose RunnerConfig.Now is now
// and RunnerConfig.Monotonic is mono. Without mono, with the system clock
// (nil or time.Now) durations are measured on the monotonic clock; an
// injected clock (a test's fake) is trusted for both, measured by
// time.Time.Sub between its readings (which uses their monotonic reading
// when they carry one).
func newPlanClock(now func() time.Time, mono func() time.Duration) *planClock {
	c := &planClock{wall: now, mono: mono, anchors: map[string]map[int64]time.Duration{}}
	if sysclock.Is(now) {
		c.wall = time.Now
	}
	switch {
	case mono != nil:
	case sysclock.Is(now):
		base := time.Now()
		c.mono = func() time.Duration { return time.Since(base) }
	default:
		base := now()
		c.mono = func() time.Duration { return now().Sub(base) }
	}
	return c
}

// read returns the time of a step, in UTC to the nanosecond (the
// timestamps it sets), and the monotonic reading of the same moment.
func (c *planClock) read() (time.Time, time.Duration) {
	return c.wall().UTC(), c.mono()
}

// set ties the timestamp at, set by this runner in plan id, to the
// monotonic reading m of the moment it was read.
func (c *planClock) set(id string, at time.Time, m time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.planAnchors(id)
	a[at.UnixNano()] = m
}

// since returns how long before the monotonic reading m the timestamp at
// of plan id was set: from its anchor, or 0 when the runner sees it for
// the first time (it is then anchored at m).
func (c *planClock) since(id string, at time.Time, m time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.planAnchors(id)
	k := at.UnixNano()
	if t, ok := a[k]; ok {
		return m - t
	}
	a[k] = m
	return 0
}

// planAnchors returns the anchors of plan id, made empty the first time;
// c.mu must be held.
func (c *planClock) planAnchors(id string) map[int64]time.Duration {
	a := c.anchors[id]
	if a == nil {
		a = map[int64]time.Duration{}
		c.anchors[id] = a
	}
	return a
}

// drop forgets the anchors of plan id (it ended).
func (c *planClock) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.anchors, id)
}
