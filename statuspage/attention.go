package statuspage

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"

	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/fleet"
	"github.com/convergekit/converge/plan"
)

// targetAttention returns the item of a target whose last pass failed.
func targetAttention(tv TargetView) (AttentionItem, bool) {
	p := tv.LastPass
	if p == nil || p.Result != PassFailed {
		return AttentionItem{}, false
	}
	return AttentionItem{
		Kind: "target", Name: tv.Name, Problem: ProblemPassFailed, Error: p.Error, Since: p.At,
		Repeats: tv.FailuresInARow, Path: "targets/" + url.PathEscape(tv.Name),
	}, true
}

// rolloutAttention returns the item of a fleet rollout that is paused,
// or that was aborted or failed without being finished by its runner.
func rolloutAttention(ro fleet.RolloutStatus) (AttentionItem, bool) {
	item := AttentionItem{Kind: "rollout", Name: ro.ID, State: string(ro.State), Error: ro.Reason, Since: ro.Created}
	switch ro.State {
	case fleet.RolloutPaused:
		item.Problem = ProblemRolloutPaused
	case fleet.RolloutAborted, fleet.RolloutFailed:
		item.Problem = ProblemRolloutStopped
	default:
		return AttentionItem{}, false
	}
	for _, w := range ro.Waves {
		item.Repeats += w.Failed
	}
	return item, true
}

// rollbackAttention returns the item of a target rolled back, until a new
// target is set.
func rollbackAttention(tv TargetView) (AttentionItem, bool) {
	rb := tv.RolledBack
	if rb == nil {
		return AttentionItem{}, false
	}
	return AttentionItem{
		Kind: "target", Name: tv.Name, Problem: ProblemRolledBack, Revision: rb.From, Since: rb.At, Repeats: rb.Failures,
		Error: fmt.Sprintf("revision %d rolled back to revision %d: %s", rb.From, rb.To, rb.Error), Path: "targets/" + url.PathEscape(tv.Name),
	}, true
}

// pendingAttention returns the items of a target's pending host actions.
func pendingAttention(tv TargetView) []AttentionItem {
	items := make([]AttentionItem, 0, len(tv.PendingActions))
	for _, p := range tv.PendingActions {
		it := AttentionItem{
			Kind: "target", Name: tv.Name, Problem: ProblemActionPending, Action: p.Action, Revision: p.Revision,
			Error: fmt.Sprintf("%s asked by %s", p.Action, p.Item), Since: p.Since, Path: "targets/" + url.PathEscape(tv.Name),
		}
		if p.Reason != "" {
			it.Error += ": " + p.Reason
		}
		items = append(items, it)
	}
	return items
}

// controllerAttention returns the items of c's objects: quarantined (as
// the store has them, every replica's), halted by a terminal error, and
// above their state's SLA, each once, the quarantined first, each part
// sorted by key.
func (h *Handler) controllerAttention(r *http.Request, c *controller.Controller, objs []controller.Object, above map[string]bool) ([]AttentionItem, error) {
	kind := c.Kind()
	// With actions, the store is listed once as objects: the releases'
	// tokens are bound to the stored versions (the view may lag behind),
	// and its quarantined objects are those. When it cannot be listed
	// whole (a record that is not an object), Quarantined reads those
	// that are, and the view's versions stand in: a token of a stale
	// version is refused when it is used, never taken.
	var stored map[string]controller.Object
	var quarantined []controller.Object
	if h.opts.Actions {
		if all, err := c.StoredObjects(r.Context()); err == nil {
			stored = make(map[string]controller.Object, len(all))
			for _, o := range all {
				stored[o.Key] = o
				if o.Halted == controller.HaltQuarantined {
					quarantined = append(quarantined, o)
				}
			}
		}
	}
	if stored == nil {
		var err error
		if quarantined, err = c.Quarantined(r.Context()); err != nil {
			return nil, err
		}
	}
	byKey := map[string]controller.Object{}
	for _, o := range objs {
		if o.Halted != "" || above[o.Key] {
			byKey[o.Key] = o
		}
	}
	for _, o := range quarantined {
		byKey[o.Key] = o // the store's, newer than the view's
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sort.SliceStable(keys, func(i, j int) bool {
		return byKey[keys[i]].Halted == controller.HaltQuarantined && byKey[keys[j]].Halted != controller.HaltQuarantined
	})
	items := make([]AttentionItem, 0, len(keys))
	for _, k := range keys {
		o := byKey[k]
		it := AttentionItem{Kind: "object", Controller: kind, Name: k, State: string(o.State), Path: objectPath(kind, k), Since: o.Since}
		switch o.Halted {
		case controller.HaltQuarantined:
			it.Problem = ProblemQuarantined
		case controller.HaltTerminal:
			it.Problem = ProblemTerminal
		default:
			if !above[k] {
				continue // halted in the view, released in the store since
			}
			it.Problem = ProblemAboveSLA
		}
		if o.LastError != nil {
			it.Error = o.LastError.Error
			if o.Halted != "" {
				it.Since = o.LastError.At
			}
		}
		it.Repeats = o.Retries
		so, ok := stored[k]
		if stored == nil {
			so, ok = o, true
		}
		if h.opts.Actions && ok && so.Halted != "" {
			it.Actions = h.offer(r, it.Actions, ActionRelease, it.Path+"/release", kind, k, so.Version)
		}
		items = append(items, it)
	}
	return items, nil
}

// planAttention returns the item of a plan that failed, was aborted, or
// runs with failed targets.
func (h *Handler) planAttention(r *http.Request, s PlanSummary, sp storedPlan) (AttentionItem, bool) {
	doc := sp.doc
	it := AttentionItem{Kind: "plan", Name: s.ID, State: s.State, Since: s.Updated, Path: "plans/" + url.PathEscape(s.ID), Error: s.Reason}
	if doc == nil {
		it.Problem, it.Error = ProblemPlanFailed, s.Error
		return it, s.Error != ""
	}
	st := doc.State()
	switch {
	case st == plan.StateAborted:
		it.Problem = ProblemPlanAborted
	case st.IsError():
		it.Problem = ProblemPlanFailed
	case !st.IsFinal() && s.Failed > 0:
		it.Problem = ProblemHostsFailed
	default:
		return it, false
	}
	it.Repeats = s.Failed
	if it.Error == "" && doc.Status != nil {
		it.Error = firstTargetFailure(doc.Status)
	}
	if h.opts.Actions {
		path := "plans/" + url.PathEscape(s.ID)
		if st.IsError() {
			it.Actions = h.offer(r, it.Actions, ActionRetry, path+"/retry", "", s.ID, sp.version)
		} else if doc.Status == nil || doc.Status.Abort == "" {
			it.Actions = h.offer(r, it.Actions, ActionAbort, path+"/abort", "", s.ID, planRun(doc))
		}
	}
	return it, true
}

// firstTargetFailure describes the first failed target of st, "" when
// none failed.
func firstTargetFailure(st *plan.Status) string {
	for _, cs := range st.Commands {
		groups := make([]string, 0, len(cs.Targets))
		for g := range cs.Targets {
			groups = append(groups, g)
		}
		sort.Strings(groups)
		for _, g := range groups {
			for _, t := range cs.Targets[g] {
				if t.State.IsFailure() {
					return fmt.Sprintf("%s/%s: %s", g, t.Name, t.Reason)
				}
			}
		}
	}
	return ""
}
