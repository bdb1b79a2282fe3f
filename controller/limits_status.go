package controller

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// LimitStatus is what the limit of one state holds now (Controller.Limits,
// ReadLimits).
type LimitStatus struct {
	// State is the limited state, and Limit its limit.
	State State
	Limit Limit
	// InUse is the number of the state's concurrency slots held now,
	// across every replica, as the store's leases say (for a controller
	// on its own, which keeps its slots in memory, those it holds); -1
	// when the store cannot tell (it is not a converge.LeaseReader), and
	// 0 without a concurrency limit.
	InUse int
	// WaitingForSlot is the number of objects in the state put off for
	// want of a slot, as the controller that answers counts them (see
	// MetricLimitedObjects: those it put off itself); 0 from ReadLimits.
	WaitingForSlot int
	// WaitingToEnter is the number of objects waiting to enter the state
	// for want of a token of its entry rate: those whose Reason is
	// LimitReason(State).
	WaitingToEnter int
}

// Limits returns what each limit of c (Config.Limits) holds now, sorted
// by state, as ReadLimits reads it from the store (the slots in use
// across every replica, the objects waiting to enter each state), with
// the objects c put off for want of a slot.
func (c *Controller) Limits(ctx context.Context) ([]LimitStatus, error) {
	if len(c.limits) == 0 {
		return nil, nil
	}
	out, err := ReadLimits(ctx, c.cfg.Store, c.cfg.Kind, c.cfg.Limits)
	if err != nil {
		return nil, err
	}
	_, shared := c.shared()
	for i := range out {
		l := c.limits[out[i].State]
		out[i].WaitingForSlot, _ = l.waitingNow()
		if !shared && l.lim.Concurrent > 0 {
			out[i].InUse = l.inUse() // a controller on its own keeps its slots in memory
		}
	}
	return out, nil
}

// ReadLimits reads from store what the limits of the controllers of kind
// hold now, for each state of limits, sorted by state, without a
// Controller (an operator's tool): the slots in use (LimitStatus.InUse)
// and the objects waiting to enter each state, read from the stored
// objects. The limits are the controllers' Config.Limits: the store does
// not keep them.
func ReadLimits(ctx context.Context, store converge.Store, kind string, limits map[State]Limit) ([]LimitStatus, error) {
	if len(limits) == 0 {
		return nil, nil
	}
	reasons := map[string]State{}
	for s := range limits {
		reasons[LimitReason(s)] = s
	}
	recs, err := store.List(ctx, kind+"/")
	if err != nil {
		return nil, err
	}
	entering := map[State]int{}
	for _, r := range recs {
		var o struct{ Reason string }
		if err := json.Unmarshal(r.Value, &o); err != nil {
			continue // a record that cannot be read waits on nothing
		}
		if s, ok := reasons[o.Reason]; ok {
			entering[s]++
		}
	}
	out := make([]LimitStatus, 0, len(limits))
	for s, l := range limits {
		n, err := slotsInUse(ctx, store, kind, s, l.Concurrent)
		if err != nil {
			return nil, err
		}
		out = append(out, LimitStatus{State: s, Limit: l, InUse: n, WaitingToEnter: entering[s]})
	}
	slices.SortFunc(out, func(a, b LimitStatus) int { return strings.Compare(string(a.State), string(b.State)) })
	return out, nil
}

// inUse returns the number of l's slots this controller holds.
func (l *limiter) inUse() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, h := range l.held {
		if h {
			n++
		}
	}
	return n
}

// slotsInUse counts the slots of state held now in store (by the
// store's leases under the state's slot keys), or returns -1 when store
// cannot tell. n is the state's Limit.Concurrent: 0 has no slots.
func slotsInUse(ctx context.Context, store converge.Store, kind string, state State, n int) (int, error) {
	if n == 0 {
		return 0, nil
	}
	lr, ok := store.(converge.LeaseReader)
	if !ok {
		return -1, nil
	}
	held, err := lr.Leases(ctx, limitSlotPrefix(kind, state))
	if err != nil {
		return 0, err
	}
	return len(held), nil
}

// limitSlotPrefix is the start of the keys of the slots of state
// (LimitSlotKey).
func limitSlotPrefix(kind string, state State) string {
	return kind + ".limit/" + string(state) + "/slot/"
}

// String describes the limit: "5 at once", "2 per 10s", or both.
func (l Limit) String() string {
	var parts []string
	if l.Concurrent > 0 {
		parts = append(parts, strconv.Itoa(l.Concurrent)+" at once")
	}
	if l.Every > 0 {
		burst := max(l.Burst, 1)
		parts = append(parts, strconv.Itoa(burst)+" per "+(time.Duration(burst)*l.Every).String())
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
