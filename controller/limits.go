package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge"
)

// Limit bounds the objects of one lifecycle state (Config.Limits), across
// every controller that shares the store: how many of them are handled at
// once, and how fast objects may enter the state. The store enforces
// both, through its leases (converge.Store.Claim), on its own clock: no
// replica's wall clock moves them. The zero value limits nothing and is
// not valid in Config.Limits.
type Limit struct {
	// Concurrent, when positive, is the most handlers that run at once
	// for objects in the state, across every replica. Before a handler
	// runs for such an object, the controller claims one of Concurrent
	// slots in the store (under the keys LimitSlotKey names), a lease
	// with the replica's Owner and LeaseTTL, renewed while the handler
	// runs as the object's lease is: when it cannot be renewed by
	// Config.RenewDeadline, the handler's context is cancelled as for a
	// lost object lease (so the handler has stopped before another
	// replica can take the slot), and the run is put off rather than
	// failed. The slot is given back when the handler returns. An object that finds every slot held is not run:
	// it is due again after Config.Poll (plus up to half of it at
	// random; for a controller on its own, at once when one of its slots
	// frees), counted in MetricLimited, and not as a failure. A replica
	// that found every slot held puts the state's objects off without
	// asking the store for a Poll after that, unless it frees a slot
	// itself meanwhile: a pass over many due objects of the state asks
	// the store once, not once per object and slot.
	// A controller on its own (no Owner) keeps its slots in memory: the
	// bound is then its own.
	Concurrent int
	// Every, when positive, bounds the rate at which objects enter the
	// state, by a transition of their handler: at most Burst transitions
	// into it in any span of Burst×Every, so one every Every on average.
	// Each entry takes one of Burst tokens in the store, a lease held
	// until Burst×Every after the write of the transition it let in,
	// never given back. A transition that finds no
	// token is deferred: nothing it returned is stored, the object stays
	// in its state with the Reason LimitReason gives (stored once, with a
	// history entry whose Reason starts with ReasonLimited), and its
	// handler runs again after Every, to decide again. Objects added in
	// the state (Add, AddObject) take no token. The entries are counted
	// when their transitions are written, by the store's clock: a
	// transition that took a token must be written within
	// Config.RenewDeadline of asking for it (it fails otherwise, as a
	// store error, and is retried), and the token is held Burst×Every
	// from that write.
	Every time.Duration
	// Burst is how many objects may enter the state at once after a quiet
	// span (see Every); 0 means 1. It needs Every.
	Burst int
}

// ReasonLimited starts the Reason of the history entry of an object whose
// transition into a state was deferred by the state's entry rate
// (Limit.Every); its From and To are both the object's state.
const ReasonLimited = "limited"

// LimitSlotKey returns the store key of the concurrency slot i (0 to
// Limit.Concurrent-1) of state for the controllers of kind: a lease, held
// while a handler of an object in state runs, by the replica that runs
// it. Rate tokens (Limit.Every) live under kind + ".limit/" + state +
// "/rate/". No record is stored under either.
func LimitSlotKey(kind string, state State, i int) string {
	return limitSlotPrefix(kind, state) + strconv.Itoa(i)
}

// LimitReason returns the Reason an object waiting to enter state, for
// want of a token of its entry rate, is stored with.
func LimitReason(state State) string {
	return "waiting to enter " + string(state) + ": entry rate limit"
}

// The values of MetricLimited's "limit" label.
const (
	LimitConcurrent = "concurrent" // a handler run put off: every slot was held
	LimitRate       = "rate"       // a transition deferred: no token
)

// errLimited means an object's handler did not run because every
// concurrency slot of its state was held: the object is due again later,
// which is no failure.
var errLimited = errors.New("controller: every slot of the state's limit is held")

// validate says why l is not a valid limit of state, as a
// *converge.ConfigError.
func (l Limit) validate(state State) error {
	bad := func(why string) error {
		return &converge.ConfigError{Field: "Limits", Reason: fmt.Sprintf("state %q: %s", state, why)}
	}
	switch {
	case l.Concurrent < 0:
		return bad(fmt.Sprintf("Concurrent must not be negative, got %d", l.Concurrent))
	case l.Every < 0:
		return bad(fmt.Sprintf("Every must not be negative, got %s", l.Every))
	case l.Burst < 0:
		return bad(fmt.Sprintf("Burst must not be negative, got %d", l.Burst))
	case l.Burst > 0 && l.Every == 0:
		return bad("Burst needs Every")
	case l.Concurrent == 0 && l.Every == 0:
		return bad("limits nothing: set Concurrent, Every or both")
	}
	return nil
}

// limiter carries out the Limit of one state for a controller.
type limiter struct {
	c     *Controller
	state State
	lim   Limit
	slots []string // slot keys
	rate  []string // rate token keys
	ttl   time.Duration
	// tokens numbers the owners of rate tokens, which must differ from
	// claim to claim (a claim by the lease's owner would renew it).
	tokens atomic.Uint64

	mu   sync.Mutex
	held []bool // the slots this controller holds, or is claiming
	// waiting holds the keys put off for want of a slot, oldest first,
	// woken in turn when this controller frees one; waits holds when
	// each was put off last (time.Now). A key put off longer ago than
	// twice Poll is due again anyway, and may have moved on since: it is
	// not woken.
	waiting []string
	waits   map[string]time.Time
	// blocked holds, for MetricLimitedObjects, the keys waiting on the
	// limit and when each was last put off (time.Now), for want of a slot
	// ([limitSlot]) or of a token to enter the state ([limitToken]). A
	// key leaves it when it gets what it waited for, or when it was last
	// put off longer ago than the limit's staleAfter: it has been looked
	// at since, here or by another replica, which counts it then.
	blocked [2]map[string]time.Time
	// fullAt is when a replica last found every slot held (time.Now),
	// zero when it has freed one since: for a Poll after it, the objects
	// of the state are put off without asking the store, so that a pass
	// over many due objects asks once, not once per object and slot.
	fullAt time.Time
}

// The indexes of limiter.blocked.
const (
	limitSlot  = 0
	limitToken = 1
)

// newLimiters makes the limiters of c's Config.Limits (nil for none).
func newLimiters(c *Controller) map[State]*limiter {
	if len(c.cfg.Limits) == 0 {
		return nil
	}
	out := make(map[State]*limiter, len(c.cfg.Limits))
	for s, lim := range c.cfg.Limits {
		l := &limiter{c: c, state: s, lim: lim, held: make([]bool, lim.Concurrent), waits: map[string]time.Time{}}
		l.blocked = [2]map[string]time.Time{{}, {}}
		for i := range lim.Concurrent {
			l.slots = append(l.slots, LimitSlotKey(c.cfg.Kind, s, i))
		}
		if lim.Every > 0 {
			burst := max(lim.Burst, 1)
			l.ttl = time.Duration(burst) * lim.Every
			for i := range burst {
				l.rate = append(l.rate, c.cfg.Kind+".limit/"+string(s)+"/rate/"+strconv.Itoa(i))
			}
		}
		out[s] = l
	}
	return out
}

// slot is a concurrency slot a handler run holds.
type slot struct {
	i     int
	lease converge.Lease // zero for a controller on its own
	ctx   context.Context
	stop  func() // stops renewing the lease; nil for a controller on its own
}

// acquire takes a free slot for the handler of key, and returns nil when
// every slot is held. A replica (sq not nil) claims it in the store and
// renews it (see keep) under ctx, the handler's context; the returned
// slot's ctx is what the handler runs with then.
func (l *limiter) acquire(ctx context.Context, sq converge.Queue, key string, hr *handlerRun) *slot {
	if sq != nil {
		l.mu.Lock()
		full := !l.fullAt.IsZero() && time.Since(l.fullAt) < l.c.cfg.Poll
		if full {
			l.putOff(key)
			l.mu.Unlock()
			l.c.metrics.Add(MetricLimited, 1, l.c.cfg.Kind, string(l.state), LimitConcurrent)
			return nil
		}
		l.mu.Unlock()
	}
	n := len(l.slots)
	from := rand.IntN(n)
	for k := range n {
		i := (from + k) % n
		l.mu.Lock()
		if l.held[i] {
			l.mu.Unlock()
			continue
		}
		l.held[i] = true
		if sq == nil {
			l.gotSlot(key)
			l.mu.Unlock()
			return &slot{i: i, ctx: ctx}
		}
		l.mu.Unlock()
		asked := time.Now()
		lease, err := sq.Claim(ctx, l.slots[i], l.c.cfg.Owner, l.c.cfg.LeaseTTL)
		if err == nil {
			sctx, stop := l.c.keep(ctx, sq, lease, asked, l.state, hr)
			l.mu.Lock()
			l.gotSlot(key)
			l.mu.Unlock()
			return &slot{i: i, lease: lease, ctx: sctx, stop: stop}
		}
		l.mu.Lock()
		l.held[i] = false
		l.mu.Unlock()
		if ctx.Err() != nil {
			break
		}
		// Held by another replica, or the store failed: try the next.
	}
	l.mu.Lock()
	if sq != nil && ctx.Err() == nil {
		l.fullAt = time.Now()
	}
	l.putOff(key)
	l.mu.Unlock()
	l.c.metrics.Add(MetricLimited, 1, l.c.cfg.Kind, string(l.state), LimitConcurrent)
	return nil
}

// putOff notes that key was put off for want of a slot. l.mu is held.
func (l *limiter) putOff(key string) {
	if _, ok := l.waits[key]; !ok {
		l.waiting = append(l.waiting, key)
	}
	l.waits[key] = time.Now()
	l.blocked[limitSlot][key] = l.waits[key]
}

// gotSlot notes that key runs: it waits no more. l.mu is held.
func (l *limiter) gotSlot(key string) {
	delete(l.waits, key)
	delete(l.blocked[limitSlot], key)
}

// release gives s back (see free). A replica gives the slot's lease back in the
// background (on Controller.releasing), and uses the slot again once
// that is done: the worker goes on at once.
func (l *limiter) release(sq converge.Queue, s *slot) {
	if s.stop == nil {
		l.free(sq, s)
		return
	}
	s.stop()
	l.c.releasing.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.RenewDeadline)
		// A release that fails leaves the slot to expire.
		_ = sq.Release(ctx, s.lease)
		cancel()
		l.free(sq, s)
	})
}

// free makes s free for this controller again, and, for a controller on
// its own, wakes the oldest object it put off for want of a slot, unless
// that was more than twice Poll ago (it has been due again since).
func (l *limiter) free(sq converge.Queue, s *slot) {
	l.mu.Lock()
	l.held[s.i] = false
	l.fullAt = time.Time{} // a slot is free: the next object asks the store
	var wake string
	stale := 2 * l.c.cfg.Poll
	for len(l.waiting) > 0 && wake == "" {
		k := l.waiting[0]
		l.waiting = l.waiting[1:]
		if at, ok := l.waits[k]; ok {
			delete(l.waits, k)
			if time.Since(at) < stale {
				wake = k
			}
		}
	}
	if len(l.waiting) == 0 {
		l.waiting = nil
	}
	l.mu.Unlock()
	if wake == "" {
		return
	}
	// A controller on its own queues it at once. A replica does not make
	// it due at once in the store: the worker that put it off may not be
	// done with it yet, and a claim of a key that a worker still holds is
	// left until its lease expires. It is due after Poll anyway.
	if q := l.c.q.Load(); q != nil && sq == nil {
		q.Add(wake)
	}
}

// rateToken is a token of an entry rate that a transition took: its
// write must be done by deadline, and entered then holds the token for
// Burst×Every from the write on.
type rateToken struct {
	l        *limiter
	lease    converge.Lease
	deadline time.Time
}

// take takes a token to enter the state, and returns nil when none is
// free.
//
// A token is a lease of Burst×Every, but the write of the transition it
// lets in comes after the claim, later by as long as the store's answer
// and the write take: a token claimed again Burst×Every after the first
// claim could let in a write that lands within Burst×Every of the first
// write, which the limit promises not to do. So the token is claimed for
// Burst×Every plus RenewDeadline, the write must be done within
// RenewDeadline of asking for the token (a context deadline: a write
// not sent by then is not sent), and once it is done the token is held
// again for Burst×Every from then (entered): the next claim of the token
// comes Burst×Every after the write at the earliest, by the store's
// clock, whether or not that last claim gets through.
func (l *limiter) take(ctx context.Context) (*rateToken, error) {
	n := len(l.rate)
	from := rand.IntN(n)
	slack := l.c.cfg.RenewDeadline
	asked := time.Now()
	for k := range n {
		owner := l.c.tokenOwner + "#" + strconv.FormatUint(l.tokens.Add(1), 10)
		lease, err := l.c.cfg.Store.Claim(ctx, l.rate[(from+k)%n], owner, l.ttl+slack)
		switch {
		case err == nil:
			return &rateToken{l: l, lease: lease, deadline: asked.Add(slack)}, nil
		case !errors.Is(err, converge.ErrClaimHeld):
			return nil, err
		}
	}
	return nil, nil
}

// entered holds t for Burst×Every from now, the transition it let in
// being written: a claim by its owner, which the store takes as a
// renewal. When that fails, the token runs out when first claimed,
// which is later than this would make it.
func (t *rateToken) entered() {
	ctx, cancel := context.WithTimeout(context.Background(), t.l.c.cfg.RenewDeadline)
	defer cancel()
	_, _ = t.l.c.cfg.Store.Claim(ctx, t.lease.Key, t.lease.Owner, t.l.ttl)
}

// limitedDelay returns how long an object put off by a limit waits before
// it is looked at again: d, plus up to half of it at random, so that the
// objects put off together do not come back together.
func limitedDelay(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d/2)+1))
}

// acquireSlot takes a concurrency slot for the handler of obj when its
// state has a concurrency limit: it returns the slot (nil when the state
// has none) and the context the handler runs with, or errLimited when
// every slot is held.
func (c *Controller) acquireSlot(ctx context.Context, obj *Object, hr *handlerRun) (*limiter, *slot, context.Context, error) {
	l := c.limits[obj.State]
	if l == nil || l.lim.Concurrent == 0 {
		return nil, nil, ctx, nil
	}
	var sq converge.Queue
	if hr != nil {
		sq, _ = c.shared()
	}
	s := l.acquire(ctx, sq, obj.Key, hr)
	if s == nil {
		if ctx.Err() != nil {
			return nil, nil, ctx, context.Cause(ctx)
		}
		return nil, nil, ctx, errLimited
	}
	return l, s, s.ctx, nil
}

// deferEntry defers the transition of obj (read at obj.Version, entry e)
// into next, for want of a token of next's entry rate: the object stays
// in its state, stored once with the Reason LimitReason gives and a
// history entry, and is looked at again after the limit's Every.
func (c *Controller) deferEntry(ctx context.Context, e *ctrlEntry, obj *Object, l *limiter, token uint64) (time.Duration, error) {
	c.metrics.Add(MetricLimited, 1, c.cfg.Kind, string(l.state), LimitRate)
	reason := LimitReason(l.state)
	if obj.Reason != reason || obj.Retries > 0 || !obj.FailingSince.IsZero() {
		upd := *obj
		upd.History = nil
		upd.Reason = reason
		upd.Retries = 0
		upd.FailingSince = time.Time{}
		var hist []converge.HistoryEntry
		if obj.Reason != reason {
			hist = []converge.HistoryEntry{{At: c.now(), From: string(obj.State), To: string(obj.State), Reason: ReasonLimited + ": " + reason}}
		}
		if err := c.rewrite(ctx, e, obj, &upd, token, hist...); err != nil {
			return 0, err
		}
	}
	return limitedDelay(l.lim.Every), nil
}

// enter takes a token of next's entry rate, when next has one, for the
// transition of obj (read at obj.Version, entry e) into it, and returns
// it (nil when next has no entry rate): the transition's write must be
// done by its deadline, and then the token entered. When none is free it
// defers the transition (see deferEntry) and returns true with the delay
// before the object's next run.
func (c *Controller) enter(ctx context.Context, e *ctrlEntry, obj *Object, next State, token uint64) (*rateToken, time.Duration, bool, error) {
	l := c.limits[next]
	if l == nil || l.rate == nil {
		return nil, 0, false, nil
	}
	tok, err := l.take(ctx)
	if err != nil {
		return nil, 0, false, err
	}
	l.mu.Lock()
	if tok != nil {
		delete(l.blocked[limitToken], obj.Key)
	} else {
		l.blocked[limitToken][obj.Key] = time.Now()
	}
	l.mu.Unlock()
	if tok != nil {
		return tok, 0, false, nil
	}
	d, err := c.deferEntry(ctx, e, obj, l, token)
	return nil, d, true, err
}

// staleAfter is how long after it was last put off a key waiting on the
// limit for a slot (which) or a token is no longer counted as waiting
// here: twice the longest it waits before it is looked at again (Poll
// or Every, plus up to half of it; see limitedDelay).
func (l *limiter) staleAfter(which int) time.Duration {
	if which == limitToken {
		return 2 * l.lim.Every
	}
	return 2 * l.c.cfg.Poll
}

// waitingNow returns how many keys wait on l for a slot and for a token,
// dropping those put off too long ago (see limiter.blocked).
func (l *limiter) waitingNow() (slots, tokens int) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var n [2]int
	for which, m := range l.blocked {
		stale := l.staleAfter(which)
		for k, at := range m {
			if now.Sub(at) >= stale {
				delete(m, k)
				continue
			}
			n[which]++
		}
	}
	return n[limitSlot], n[limitToken]
}

// reportLimitedObjects sets MetricLimitedObjects for every limit of c: the
// objects waiting on it now, or zero when stopped is set (Run returns).
func (c *Controller) reportLimitedObjects(stopped bool) {
	for state, l := range c.limits {
		slots, tokens := l.waitingNow()
		if stopped {
			slots, tokens = 0, 0
		}
		if l.lim.Concurrent > 0 {
			c.metrics.Set(MetricLimitedObjects, float64(slots), c.cfg.Kind, string(state), LimitConcurrent)
		}
		if l.lim.Every > 0 {
			c.metrics.Set(MetricLimitedObjects, float64(tokens), c.cfg.Kind, string(state), LimitRate)
		}
	}
}
