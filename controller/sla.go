package controller

import (
	"context"
	"time"
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
// time, stores the breach with the object (fencing the write with token
// when it is not zero) and reports it to OnSLA. It returns the object as
// stored, and the store's error (nothing reported) when the write failed.
func (c *Controller) checkSLA(ctx context.Context, e *ctrlEntry, obj *Object, token uint64) (*Object, error) {
	sla, ok := c.cfg.SLA[obj.State]
	if !ok {
		return obj, nil
	}
	now := c.now()
	if now.Sub(obj.Since) <= sla {
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
	if err := c.rewrite(ctx, e, obj, &upd, token); err != nil {
		return nil, err
	}
	c.reportSLA(&upd, now, true)
	return &upd, nil
}

// untilSLA returns how long until obj goes above its state's SLA, so that
// it is looked at then, or -1 when that is not to come (no SLA, or a
// breach already stored).
func (c *Controller) untilSLA(obj *Object) time.Duration {
	sla, ok := c.cfg.SLA[obj.State]
	if !ok || obj.SLABreached {
		return -1
	}
	return max(obj.Since.Add(sla).Sub(c.now())+time.Nanosecond, 0)
}

// reportSLA calls OnSLA, if set, for obj at now.
func (c *Controller) reportSLA(obj *Object, now time.Time, breached bool) {
	if c.cfg.OnSLA == nil {
		return
	}
	c.cfg.OnSLA(SLAEvent{
		Kind: c.cfg.Kind, Key: obj.Key, State: obj.State, SLA: c.cfg.SLA[obj.State],
		TimeInState: now.Sub(obj.Since), At: now, Breached: breached,
	})
}
