package controller

import (
	"context"
	"reflect"
	"time"

	"github.com/convergekit/converge"
)

// SLAEvent reports that an object went above its state's SLA, or that an
// object that had left it (by a transition, or deleted). See Config.OnSLA.
type SLAEvent struct {
	// Kind is the controller's kind.
	Kind string
	// Key names the object.
	Key string
	// State is the state whose SLA the object went above.
	State State
	// SLA is that state's SLA (Config.SLA).
	SLA time.Duration
	// TimeInState is how long the object had been in State at At.
	TimeInState time.Duration
	// At is when the controller found the breach, or stored its end.
	At time.Time
	// Breached is true when the object went above the SLA, and false when
	// it left State after that.
	Breached bool
}

// checkSLA looks whether obj (read at obj.Version, entry e) is above its
// state's SLA: it marks the entry for MetricAboveSLA, and, the first
// time, stores the breach with the object and an entry with
// ReasonAboveSLA in its history (fencing the write with token when it is
// not zero) and reports it to OnSLA. It returns the object as
// stored, and the store's error (nothing reported) when the write failed.
func (c *Controller) checkSLA(ctx context.Context, e *ctrlEntry, obj *Object, token uint64) (*Object, error) {
	sla, ok := c.cfg.SLA[obj.State]
	if !ok {
		return obj, nil
	}
	now := c.now()
	if c.inState(e, obj.Since, now) <= sla {
		return obj, nil
	}
	if e.flags.Load()&entryAboveSLA == 0 {
		e.flags.Or(entryAboveSLA)
		c.metrics.Add(MetricAboveSLA, 1, c.cfg.Kind, string(obj.State))
	}
	if obj.SLABreached {
		return obj, nil
	}
	upd := *obj
	upd.SLABreached = true
	h := converge.HistoryEntry{At: now, From: string(obj.State), To: string(obj.State), Reason: ReasonAboveSLA + " " + sla.String()}
	if err := c.rewrite(ctx, e, obj, &upd, token, h); err != nil {
		return nil, err
	}
	c.reportSLA(e, &upd, now, true)
	return &upd, nil
}

// untilSLA returns how long until obj goes above its state's SLA, so that
// it is looked at then, or -1 when that is not to come (no SLA, or a
// breach already stored).
func (c *Controller) untilSLA(e *ctrlEntry, obj *Object) time.Duration {
	sla, ok := c.cfg.SLA[obj.State]
	if !ok || obj.SLABreached {
		return -1
	}
	return max(sla-c.inState(e, obj.Since, c.now())+time.Nanosecond, 0)
}

// reportSLA calls OnSLA, if set, for obj (entry e) at now.
func (c *Controller) reportSLA(e *ctrlEntry, obj *Object, now time.Time, breached bool) {
	if c.cfg.OnSLA == nil {
		return
	}
	c.cfg.OnSLA(SLAEvent{
		Kind: c.cfg.Kind, Key: obj.Key, State: obj.State, SLA: c.cfg.SLA[obj.State],
		TimeInState: c.inState(e, obj.Since, now), At: now, Breached: breached,
	})
}

// slaAnchor ties an object's Since (a wall-clock time, Unix nanoseconds)
// to the reading of the monotonic clock at which the object entered its
// state, as far as this controller knows.
type slaAnchor struct {
	since int64
	mono  time.Duration
	set   bool
}

// inState returns how long the object of entry e, whose Since is since,
// has been in its state at now: on the monotonic clock from the anchor of
// since, which is made the first time since is asked about, from its age
// on the wall clock then (never negative). See Config.SLA.
func (c *Controller) inState(e *ctrlEntry, since, now time.Time) time.Duration {
	m := c.mono()
	k := since.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.sla.set || e.sla.since != k {
		e.sla = slaAnchor{since: k, mono: m - max(now.Sub(since), 0), set: true}
	}
	return m - e.sla.mono
}

// anchorSLA ties since, stamped by this controller at the monotonic
// reading m, to it: an object that it moves to a new state.
func (c *Controller) anchorSLA(e *ctrlEntry, since time.Time, m time.Duration) {
	e.mu.Lock()
	e.sla = slaAnchor{since: since.UnixNano(), mono: m, set: true}
	e.mu.Unlock()
}

// monotonic returns the monotonic clock of a controller whose Config.Now
// is now and Config.Monotonic mono (see Config.Monotonic).
func monotonic(now func() time.Time, mono func() time.Duration) func() time.Duration {
	switch {
	case mono != nil:
		return mono
	case now == nil || reflect.ValueOf(now).Pointer() == reflect.ValueOf(time.Now).Pointer():
		base := time.Now()
		return func() time.Duration { return time.Since(base) }
	default:
		base := now()
		return func() time.Duration { return now().Sub(base) }
	}
}
