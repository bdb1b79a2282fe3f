package convergetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/convergekit/converge"
)

// The steady stream of the rule "queue: priority ageing": every tick,
// ageingArrivals records of priority ageingHigh are created and one
// ClaimDue takes ageingArrivals records, so the high work alone fills
// every claim; ageingLows records of priority 0 are due from the start.
const (
	ageingTick     = 250 * time.Millisecond
	ageingHigh     = 2 // its worth: 2 s, 8 ticks
	ageingArrivals = 4
	ageingLows     = 6
	ageingTicks    = 16
)

// AgeingBound is the tick (of 250 ms, counted from the first) by which
// the rule "queue: priority ageing" of ConformStore wants every record of
// priority 0 claimed, under a steady stream of records of priority 2 that
// alone fills every claim: the high priority's worth (2 s, 8 ticks, see
// converge.PriorityStep), then the ticks that the claims, 4 a tick, take
// to drain the 6 low records, and one tick of slack.
const AgeingBound = ageingHigh*int(converge.PriorityStep/ageingTick) + (ageingLows+ageingArrivals-1)/ageingArrivals + 1

// priorities runs the rules of a converge.Prioritizer.
func (c *storeConformer) priorities(p converge.Prioritizer) {
	c.priorityOrder(p)
	c.priorityInvalid(p)
	c.priorityAgeing(p)
}

// putPriority writes a record with PutPriority.
func (c *storeConformer) putPriority(p converge.Prioritizer, rule, key string, version uint64, priority int) (uint64, bool) {
	v, err := p.PutPriority(c.ctx, converge.StoreRecord{Key: key, Version: version, Value: json.RawMessage(`0`)}, priority)
	if err != nil {
		c.fail(rule, "put %q with priority %d: %v", key, priority, err)
		return 0, false
	}
	return v, true
}

// expectPriority checks the stored priority of key.
func (c *storeConformer) expectPriority(p converge.Prioritizer, rule, key string, want int) {
	got, err := p.Priority(c.ctx, key)
	if err != nil || got != want {
		c.fail(rule, "priority of %q: want %d, got %d, %v", key, want, got, err)
	}
}

func (c *storeConformer) priorityOrder(p converge.Prioritizer) {
	const rule = "queue: priority order"
	base := time.Now()
	// Equal due times: the highest priority first.
	if _, ok := c.put(rule, c.k("qprio/lo"), 0, `0`); !ok {
		return
	}
	if _, ok := c.putPriority(p, rule, c.k("qprio/hi"), 0, 50); !ok {
		return
	}
	if cr, ok := p.(converge.Creator); ok {
		if _, err := cr.CreateMany(c.ctx, []converge.NewRecord{{Key: c.k("qprio/mid"), Value: json.RawMessage(`0`), Priority: 20}}); err != nil {
			c.fail(rule, "create many with a priority: %v", err)
			return
		}
	} else if _, ok := c.putPriority(p, rule, c.k("qprio/mid"), 0, 20); !ok {
		return
	}
	// A record whose priority is raised after it was created, by a write
	// that keeps its due time.
	v, ok := c.put(rule, c.k("qprio/raised"), 0, `0`)
	if !ok {
		return
	}
	if _, ok := c.putPriority(p, rule, c.k("qprio/raised"), v, 10); !ok {
		return
	}
	// A plain Put keeps the priority.
	v, ok = c.put(rule, c.k("qprio/kept"), 0, `0`)
	if !ok {
		return
	}
	if v, ok = c.putPriority(p, rule, c.k("qprio/kept"), v, 30); !ok {
		return
	}
	if _, ok := c.put(rule, c.k("qprio/kept"), v, `1`); !ok {
		return
	}
	c.expectPriority(p, rule, c.k("qprio/kept"), 30)
	c.expectPriority(p, rule, c.k("qprio/lo"), 0)
	c.expectPriority(p, rule, c.k("qprio/mid"), 20)
	if _, err := p.Priority(c.ctx, c.k("qprio/none")); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail(rule, "priority of a missing key: want ErrStoreNotFound, got %v", err)
	}
	names := []string{"qprio/hi", "qprio/kept", "qprio/mid", "qprio/raised", "qprio/lo"}
	for _, n := range names {
		if err := p.Schedule(c.ctx, c.k(n), base.Add(-time.Hour)); err != nil {
			c.fail(rule, "schedule %q: %v", n, err)
			return
		}
	}
	prefix := c.k("qprio/")
	c.expectClaimed(rule, "equal due times, limit 2", prefix, "owner-a", 2, names[:2], true)
	c.expectClaimed(rule, "equal due times, the rest", prefix, "owner-a", 10, names[2:], true)

	// Ageing: a record of priority 0 due two hours ago goes before one of
	// priority 3600 (an hour's worth) due half an hour ago, and after one
	// of priority 7200 due as recently.
	for name, pa := range map[string]struct {
		prio int
		ago  time.Duration
	}{"qage/old": {0, 2 * time.Hour}, "qage/hour": {3600, 30 * time.Minute}, "qage/twohours": {7200, 30 * time.Minute}} {
		if _, ok := c.putPriority(p, rule, c.k(name), 0, pa.prio); !ok {
			return
		}
		if err := p.Schedule(c.ctx, c.k(name), base.Add(-pa.ago)); err != nil {
			c.fail(rule, "schedule %q: %v", name, err)
			return
		}
	}
	c.expectClaimed(rule, "aged", c.k("qage/"), "owner-a", 10, []string{"qage/twohours", "qage/old", "qage/hour"}, true)
}

func (c *storeConformer) priorityInvalid(p converge.Prioritizer) {
	const rule = "queue: priority invalid"
	key := c.k("qprioinv/a")
	for _, prio := range []int{-1, converge.MaxPriority + 1} {
		_, err := p.PutPriority(c.ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`0`)}, prio)
		var re *converge.StoreRequestError
		if !errors.As(err, &re) || re.Field != "priority" || re.Key != key {
			c.fail(rule, "priority %d: want a *converge.StoreRequestError on field priority naming %q, got %v", prio, key, err)
		}
		if cr, ok := p.(converge.Creator); ok {
			_, err := cr.CreateMany(c.ctx, []converge.NewRecord{{Key: key, Value: json.RawMessage(`0`), Priority: prio}})
			if !errors.As(err, &re) || re.Key != key {
				c.fail(rule, "create many with priority %d: want a *converge.StoreRequestError naming %q, got %v", prio, key, err)
			}
		}
	}
	if _, err := c.s.Get(c.ctx, key); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail(rule, "a refused priority wrote %q: %v", key, err)
	}
}

// priorityAgeing is the starvation check: a steady stream of high
// priority records fills every claim while low ones are due; ageing must
// still get every low one claimed by AgeingBound.
func (c *storeConformer) priorityAgeing(p converge.Prioritizer) {
	const rule = "queue: priority ageing"
	if c.opts.Wait == nil {
		return
	}
	prefix := c.k("qstarve/")
	claimedAt := map[string]int{}
	lows := make([]string, ageingLows)
	for i := range lows {
		lows[i] = fmt.Sprintf("%slow-%d", prefix, i)
		if _, ok := c.put(rule, lows[i], 0, `0`); !ok {
			return
		}
	}
	high := 0
	for tick := 0; tick < ageingTicks; tick++ {
		for range ageingArrivals {
			if _, ok := c.putPriority(p, rule, fmt.Sprintf("%shigh-%d", prefix, high), 0, ageingHigh); !ok {
				return
			}
			high++
		}
		got, ok := c.claimDue(rule, prefix, "owner-a", ageingArrivals)
		if !ok {
			return
		}
		for _, x := range got {
			claimedAt[x.Record.Key] = tick
		}
		c.finishAll(rule, got)
		c.opts.Wait(ageingTick)
	}
	var late []string
	for _, k := range lows {
		if at, ok := claimedAt[k]; !ok || at > AgeingBound {
			late = append(late, k)
		}
	}
	if len(late) > 0 {
		c.fail(rule, "under a steady stream of priority %d filling every claim, want every record of priority 0 claimed by tick %d (of %s), these were not: %v",
			ageingHigh, AgeingBound, ageingTick, late)
	}
	if slices.ContainsFunc(lows, func(k string) bool { at, ok := claimedAt[k]; return ok && at == 0 }) {
		// The first claim must go to the high stream: otherwise the rule
		// checks nothing about priorities.
		c.fail(rule, "a record of priority 0 was claimed at the first tick, before the high stream")
	}
}
