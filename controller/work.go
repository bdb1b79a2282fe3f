package controller

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/workqueue"
)

// process runs the handler once for the key of it and acts on its
// verdict. It returns what the worker tells the queue: whether to reset
// the key's backoff, and when to run it next (negative: not at all, the
// error paths having queued it with backoff already).
func (c *Controller) process(ctx context.Context, q *workqueue.Queue[ctrlEntry], it *workqueue.Item[ctrlEntry]) (forget bool, next time.Duration) {
	key := it.Key
	e := it.Entry
	if e == nil || e.flags.Load()&entryGone != 0 {
		if e = c.entry(key); e == nil {
			return true, -1
		}
		it.Entry = e // only the worker holding it touches it.Entry
	}
	cur := e.load()
	obj := &cur
	if e.flags.Load()&entryReload != 0 {
		e.flags.And(^entryReload)
		rec, err := c.cfg.Store.Get(ctx, c.prefix+key)
		switch {
		case errors.Is(err, converge.ErrStoreNotFound):
			c.forget(key, e, obj)
			return true, -1
		case err != nil:
			e.flags.Or(entryReload)
			c.fail(q, key, obj)
			return false, -1
		}
		fresh, err := c.decode(rec)
		if err != nil {
			c.fail(q, key, obj)
			return false, -1
		}
		c.replace(e, obj, fresh)
		obj = fresh
	}
	if _, ok := c.cfg.SLA[obj.State]; ok {
		c.checkSLA(e, obj, c.now())
	}
	res, err := c.run(ctx, obj)
	if err != nil {
		c.fail(q, key, obj)
		return false, -1
	}
	how, d, err := c.settle(ctx, e, obj, res, 0)
	switch {
	case errors.Is(err, errVerdict):
		c.fail(q, key, obj)
		return false, -1
	case err != nil:
		return false, c.storeFailed(q, key, e, obj, err)
	case how == settledAgain:
		return true, 0
	case how == settledGone:
		return true, -1
	}
	return true, d
}

// run runs the handler on obj, measuring its latency.
func (c *Controller) run(ctx context.Context, obj *Object) (Result, error) {
	var start time.Time
	if c.timed {
		start = c.now()
	}
	res, err := c.handle(ctx, *obj)
	if c.timed {
		c.metrics.HandlerLatency(c.cfg.Kind, obj.State, c.now().Sub(start))
	}
	return res, err
}

// settled says what follows a handler's verdict once it is stored.
type settled uint8

const (
	settledLater settled = iota // run again after the returned delay
	settledAgain                // transitioned: run again at once
	settledGone                 // deleted
)

// errVerdict means a handler returned a verdict that cannot be carried
// out (a transition without a next state); it counts as a handler error.
var errVerdict = errors.New("controller: transition without a next state")

// settle stores what the handler's res says about obj (read at
// obj.Version, entry e), fencing the write with token when it is not
// zero, and updates the controller's view. For settledLater it returns
// the delay before the object's next run. A store error is returned as is
// (nothing changed in the view); errVerdict means res is not valid.
func (c *Controller) settle(ctx context.Context, e *ctrlEntry, obj *Object, res Result, token uint64) (settled, time.Duration, error) {
	key := obj.Key
	switch res.Verdict {
	case VerdictTransition:
		if res.Next == "" {
			return 0, 0, errVerdict
		}
		now := c.now()
		next := &Object{Key: key, State: res.Next, Since: now, Reason: res.Reason, Data: obj.Data}
		if res.Data != nil {
			next.Data = slices.Clone(res.Data)
		}
		v, err := c.put(ctx, next, obj.Version, token, converge.HistoryEntry{At: now, From: string(obj.State), To: string(res.Next), Reason: res.Reason})
		if err != nil {
			return 0, 0, err
		}
		next.Version = v
		c.replace(e, obj, next)
		return settledAgain, 0, nil
	case VerdictDeleted:
		err := c.cfg.Store.Delete(ctx, c.prefix+key, obj.Version, converge.HistoryEntry{At: c.now(), From: string(obj.State), Reason: "deleted"})
		if err != nil && !errors.Is(err, converge.ErrStoreNotFound) {
			return 0, 0, err
		}
		c.forget(key, e, obj)
		return settledGone, 0, nil
	}
	// VerdictNoChange, VerdictWait: store what changed besides the state.
	if res.Verdict == VerdictWait || res.Data != nil || len(obj.Intents) > 0 {
		upd := *obj
		upd.Intents = nil
		if res.Verdict == VerdictWait {
			upd.Reason = res.Reason
		}
		if res.Data != nil {
			upd.Data = slices.Clone(res.Data)
		}
		if upd.Reason != obj.Reason || res.Data != nil || len(obj.Intents) > 0 {
			v, err := c.put(ctx, &upd, obj.Version, token)
			if err != nil {
				return 0, 0, err
			}
			upd.Version = v
			e.store(&upd)
		}
	}
	d := res.RequeueAfter
	if d <= 0 {
		d = c.resync()
	}
	if sla, ok := c.cfg.SLA[obj.State]; ok && e.flags.Load()&entryAboveSLA == 0 {
		// Look again when the SLA runs out, so a breach is seen on time.
		d = max(min(d, obj.Since.Add(sla).Sub(c.now())+time.Nanosecond), 0)
	}
	return settledLater, d, nil
}

// handle runs the handler, turning a panic into an error.
func (c *Controller) handle(ctx context.Context, obj Object) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &converge.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return c.cfg.Handler.Handle(ctx, obj)
}

func (c *Controller) resync() time.Duration {
	d := c.cfg.Resync
	if c.cfg.ResyncJitter > 0 {
		d += time.Duration(float64(d) * c.cfg.ResyncJitter * rand.Float64())
	}
	return d
}

// fail counts an error of obj and retries it with backoff.
func (c *Controller) fail(q *workqueue.Queue[ctrlEntry], key string, obj *Object) {
	c.metrics.HandlerError(c.cfg.Kind, obj.State)
	q.AddRateLimited(key)
}

// storeFailed handles a failed write: a stale version means someone else
// wrote, so read again and run at once (it returns 0); any other error may
// or may not have been written, so read again after a backoff (it returns
// -1, having queued the key with backoff).
func (c *Controller) storeFailed(q *workqueue.Queue[ctrlEntry], key string, e *ctrlEntry, obj *Object, err error) time.Duration {
	e.flags.Or(entryReload)
	if errors.Is(err, converge.ErrStoreStale) {
		return 0
	}
	c.fail(q, key, obj)
	return -1
}

// replace installs next in e and accounts for a change of state.
func (c *Controller) replace(e *ctrlEntry, prev, next *Object) {
	e.store(next)
	if prev.State == next.State && prev.Since.Equal(next.Since) {
		return
	}
	kind := c.cfg.Kind
	if e.flags.Load()&entryAboveSLA != 0 {
		e.flags.And(^entryAboveSLA)
		c.metrics.AboveSLA(kind, prev.State, -1)
	}
	if prev.State != next.State {
		c.metrics.ObjectsInState(kind, prev.State, -1)
		c.metrics.ObjectsInState(kind, next.State, 1)
	}
	c.metrics.StateExited(kind, prev.State, next.Since.Sub(prev.Since))
	c.metrics.StateEntered(kind, next.State)
}

// forget drops a deleted object.
func (c *Controller) forget(key string, e *ctrlEntry, obj *Object) {
	e.flags.Or(entryGone)
	c.mu.Lock()
	if c.objs[key] == e {
		delete(c.objs, key)
	}
	c.mu.Unlock()
	kind := c.cfg.Kind
	if e.flags.Load()&entryAboveSLA != 0 {
		c.metrics.AboveSLA(kind, obj.State, -1)
	}
	c.metrics.ObjectsInState(kind, obj.State, -1)
	c.metrics.StateExited(kind, obj.State, c.now().Sub(obj.Since))
}

// checkSLA updates the above-SLA mark of e for obj at now.
func (c *Controller) checkSLA(e *ctrlEntry, obj *Object, now time.Time) {
	sla, ok := c.cfg.SLA[obj.State]
	if !ok || e.flags.Load()&entryAboveSLA != 0 {
		return
	}
	if now.Sub(obj.Since) > sla {
		e.flags.Or(entryAboveSLA)
		c.metrics.AboveSLA(c.cfg.Kind, obj.State, 1)
	}
}
