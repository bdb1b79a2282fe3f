package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// limitView is what the limit of one state of a controller kind holds
// now, as the limits command prints it in JSON. Its shape is documented
// in doc.go; fields are only added.
type limitView struct {
	State string `json:"state"`
	// Objects is the number of objects in the state.
	Objects int `json:"objects"`
	// SlotsInUse is the number of the state's concurrency slots held now
	// (controller.LimitSlotKey), across every replica, and SlotHolders
	// the replicas (their controller.Config.Owner) that hold them, one
	// per slot, sorted.
	SlotsInUse  int      `json:"slotsInUse"`
	SlotHolders []string `json:"slotHolders,omitempty"`
	// WaitingToEnter is the number of objects waiting to enter the state
	// for want of a token of its entry rate (their reason is
	// controller.LimitReason of the state).
	WaitingToEnter int `json:"waitingToEnter"`
}

func init() {
	register(&command{
		name:  "limits",
		short: "List what the limits of a controller kind hold now: slots in use, objects waiting.",
		args:  "KIND",
		nargs: 1,
		summary: `List, per lifecycle state of a controller kind whose limits hold anything now,
the objects in it, the concurrency slots held (across every replica, with
the replicas holding them) and the objects waiting to enter it for want of
a token of its entry rate. The limits themselves are the controllers'
configuration (controller.Config.Limits), which the store does not keep.`,
		run: runLimits,
	})
}

func runLimits(ctx context.Context, e *env, c *common, args []string) error {
	kind := args[0]
	if err := checkKind(kind); err != nil {
		return err
	}
	st, closer, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	recs, err := st.List(ctx, kind+"/")
	if err != nil {
		return err
	}
	byState := map[string]*limitView{}
	view := func(s string) *limitView {
		v := byState[s]
		if v == nil {
			v = &limitView{State: s}
			byState[s] = v
		}
		return v
	}
	in := map[string]int{}
	for _, r := range recs {
		o, err := decodeObject(kind, r)
		if err != nil {
			return err
		}
		if o.Sealed {
			continue // its state and reason are sealed
		}
		in[string(o.State)]++
		if s, ok := enteringState(o.Reason); ok {
			view(s).WaitingToEnter++
		}
	}
	lr, ok := st.(converge.LeaseReader)
	if !ok {
		return fmt.Errorf("convergectl: the store cannot read leases")
	}
	prefix := kind + ".limit/"
	leases, err := lr.Leases(ctx, prefix)
	if err != nil {
		return err
	}
	for _, l := range leases {
		tail := strings.TrimPrefix(l.Key, prefix)
		i := strings.LastIndex(tail, "/slot/")
		if i < 0 {
			continue // a token of an entry rate
		}
		s := tail[:i]
		if l.Key != controller.LimitSlotKey(kind, controller.State(s), slotIndex(tail[i+1:])) {
			continue // not a slot
		}
		v := view(s)
		v.SlotsInUse++
		v.SlotHolders = append(v.SlotHolders, l.Owner)
	}
	out := []*limitView{}
	for s, v := range byState {
		v.Objects = in[s]
		slices.Sort(v.SlotHolders)
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b *limitView) int { return strings.Compare(a.State, b.State) })
	if c.structured() {
		return c.emit(e.out, map[string]any{"kind": kind, "limits": out})
	}
	if len(out) == 0 {
		fmt.Fprintf(e.errOut, "no limit of kind %q holds anything now\n", kind)
		return nil
	}
	t := newTable(e.out, "STATE", "OBJECTS", "SLOTS IN USE", "HELD BY", "WAITING TO ENTER")
	for _, v := range out {
		t.row(v.State, fmt.Sprint(v.Objects), fmt.Sprint(v.SlotsInUse), cut(strings.Join(v.SlotHolders, ","), 60), fmt.Sprint(v.WaitingToEnter))
	}
	return t.flush()
}

// enteringState returns the state an object with reason waits to enter,
// when reason is controller.LimitReason of it.
func enteringState(reason string) (string, bool) {
	s, ok := strings.CutPrefix(reason, "waiting to enter ")
	if !ok {
		return "", false
	}
	s, ok = strings.CutSuffix(s, ": entry rate limit")
	if !ok || controller.LimitReason(controller.State(s)) != reason {
		return "", false
	}
	return s, true
}

// slotIndex returns the index of the slot key tail "slot/N", or -1.
func slotIndex(rest string) int {
	var i int
	if _, err := fmt.Sscanf(strings.TrimPrefix(rest, "slot/"), "%d", &i); err != nil || i < 0 {
		return -1
	}
	return i
}
