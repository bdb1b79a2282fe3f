package converge

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// idKindMax is the longest prefix ID.Kind takes for a kind.
const idKindMax = 32

// Kind returns the kind of the item id names, the label its metrics carry:
// the part before the first ':' when it is a short name (1 to 32 letters,
// digits, '-', '_' or '.'), as "file" in "file:/etc/hostname" or
// "container" in "container:web/app"; else "item". A kind names a sort of
// item, never one item, so the number of metric series stays bounded.
func (id ID) Kind() string {
	for i := 0; i < len(id) && i <= idKindMax; i++ {
		c := id[i]
		switch {
		case c == ':':
			if i == 0 {
				return "item"
			}
			return string(id[:i])
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return "item"
		}
	}
	return "item"
}

// kindLabels are the label values of one item kind under one walker
// name, built once so that reporting an item allocates nothing.
type kindLabels struct {
	kind    []string                    // {name, kind}
	outcome [len(outcomeNames)][]string // {name, kind, outcome}
	phase   [len(phaseNames)][]string   // {name, kind, phase}
}

// itemKinds maps the items of a compiled graph to their kind.
type itemKinds struct {
	of    []int32  // item -> index in names
	names []string // distinct kinds
	// last holds the labels built for the last walker name asked for: a
	// graph is nearly always walked under one name.
	last atomic.Pointer[namedKindLabels]
}

// namedKindLabels are the labels of every kind of a graph under one name.
type namedKindLabels struct {
	name   string
	labels []kindLabels
}

// kinds returns the item kinds of c, computed at the first call.
func (c *compiled) kinds() *itemKinds {
	c.kindOnce.Do(func() {
		ks := &itemKinds{of: make([]int32, len(c.items))}
		index := map[string]int32{}
		for k := range c.items {
			kind := c.items[k].id.Kind()
			j, ok := index[kind]
			if !ok {
				j = int32(len(ks.names))
				index[kind] = j
				ks.names = append(ks.names, kind)
			}
			ks.of[k] = j
		}
		c.itemKinds = ks
	})
	return c.itemKinds
}

// labelsFor returns the label values of every kind of the graph for a
// walker named name, by kind index.
func (ks *itemKinds) labelsFor(name string) []kindLabels {
	if l := ks.last.Load(); l != nil && l.name == name {
		return l.labels
	}
	l := &namedKindLabels{name: name, labels: make([]kindLabels, len(ks.names))}
	for j, kind := range ks.names {
		kl := &l.labels[j]
		kl.kind = []string{name, kind}
		for o, out := range outcomeNames {
			kl.outcome[o] = []string{name, kind, out}
		}
		for p, phase := range phaseNames {
			kl.phase[p] = []string{name, kind, phase}
		}
	}
	ks.last.Store(l)
	return l.labels
}

// Walk results, the "result" label of MetricWalks: success and error are
// controller-runtime's names; interrupted has no counterpart there.
const (
	walkOK = iota
	walkFailed
	walkInterrupted
)

var walkResultNames = [...]string{"success", "error", "interrupted"}

// walkLogResults are the values of the "result" attribute of a walk's
// log line, as they were before the metric took controller-runtime's
// names.
var walkLogResults = [...]string{"ok", "failed", "interrupted"}

// walkModeNames are the values of the "mode" label by mode and dryness.
var walkModeNames = func() (l [2][2]string) {
	for m, name := range modeNames {
		l[m][0], l[m][1] = name, name+"-dry"
	}
	return l
}()

// walkLabels holds a walker's label values of MetricWalks,
// MetricWalkDuration and MetricWalkEventsDropped by mode and dryness.
type walkLabels struct {
	name   []string // {name}
	byMode [2][2]struct {
		mode   []string                       // {name, mode}
		result [len(walkResultNames)][]string // {name, mode, result}
	}
}

func newWalkLabels(name string) *walkLabels {
	l := &walkLabels{name: []string{name}}
	for m := range modeNames {
		for dry := range 2 {
			mode := walkModeNames[m][dry]
			l.byMode[m][dry].mode = []string{name, mode}
			for r, res := range walkResultNames {
				l.byMode[m][dry].result[r] = []string{name, mode, res}
			}
		}
	}
	return l
}

// nameProblem says why name cannot be the value of a "target" label, or
// "" when it can: a label value must come from a small set, so it is a
// short name, not free text.
func nameProblem(name string) string {
	if len(name) > maxNameLen {
		return fmt.Sprintf("must be at most %d bytes, got %d", maxNameLen, len(name))
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return fmt.Sprintf("must hold only letters, digits, '-', '_' and '.', got %q", name)
		}
	}
	return ""
}

// maxNameLen is the longest WalkerConfig.Name and TargetReconcilerConfig.Name.
const maxNameLen = 63

// observeItem reports the result of item k, which ran: how long its Apply
// took, and a log line. applied is how long its Apply took, or negative
// when it did not apply. Workers call it without holding ws.mu. The
// items are counted once the walk ends (observeWalk): one call to Metrics
// per kind and outcome instead of one per item.
func (ws *walkState) observeItem(k int, res *ItemResult, applied time.Duration) {
	if m := ws.cfg.Metrics; m != nil && applied >= 0 {
		m.Observe(MetricWalkApplyDuration, applied.Seconds(), ws.kindLabels[ws.kinds.of[k]].kind...)
	}
	if ws.log == nil {
		return
	}
	level, msg := slog.LevelDebug, "item unchanged"
	switch res.Outcome {
	case OutcomeFailed:
		level, msg = slog.LevelWarn, "item failed"
	case OutcomeChanged, OutcomeWouldChange:
		level, msg = slog.LevelInfo, "item changed"
	}
	if !ws.log.Enabled(ws.ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("walk", string(ws.id)),
		slog.String("item", string(res.ID)),
		slog.String("outcome", res.Outcome.String()),
		slog.Duration("duration", res.Duration),
	}
	if len(res.Refresh) > 0 {
		attrs = append(attrs, slog.String("refresh", joinIDs(res.Refresh)))
	}
	if res.Outcome == OutcomeFailed {
		cause := res.Err
		if ie, ok := res.Err.(*ItemError); ok {
			cause = ie.Err
		}
		attrs = append(attrs, slog.String("phase", res.Phase.String()), slog.String("error", causeText(cause)))
	}
	if ws.rev != 0 {
		attrs = append(attrs, slog.Uint64("revision", ws.rev))
	}
	ws.log.LogAttrs(ws.ctx, level, msg, attrs...)
}

// observeWalk reports a finished walk: the items that did not run, the
// walk's metrics, and its summary line.
func (ws *walkState) observeWalk(rep *Report) {
	var counts [len(outcomeNames)]int
	for k := range rep.Items {
		counts[rep.Items[k].Outcome]++
	}
	result := walkOK
	switch {
	case counts[OutcomeFailed] > 0:
		result = walkFailed
	case rep.notRun > 0:
		result = walkInterrupted
	}
	if m := ws.cfg.Metrics; m != nil {
		labels := &ws.labels.byMode[ws.mode][boolIndex(ws.dry)]
		ws.countItems(m, rep)
		m.Add(MetricWalks, 1, labels.result[result]...)
		m.Observe(MetricWalkDuration, rep.Duration.Seconds(), labels.mode...)
		if rep.EventsDropped > 0 {
			m.Add(MetricWalkEventsDropped, float64(rep.EventsDropped), ws.labels.name...)
		}
	}
	if ws.log == nil {
		return
	}
	level := slog.LevelInfo
	if result == walkOK && counts[OutcomeChanged]+counts[OutcomeWouldChange] == 0 {
		level = slog.LevelDebug // nothing to tell: a periodic check found no drift
	}
	if !ws.log.Enabled(ws.ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("walk", string(ws.id)),
		slog.String("mode", walkModeNames[ws.mode][boolIndex(ws.dry)]),
		slog.String("result", walkLogResults[result]),
		slog.Int("items", len(rep.Items)),
		slog.Int("changed", counts[OutcomeChanged]+counts[OutcomeWouldChange]),
		slog.Int("unchanged", counts[OutcomeUnchanged]),
		slog.Int("failed", counts[OutcomeFailed]),
		slog.Int("waiting", counts[OutcomeWaiting]),
		slog.Int("not_run", counts[OutcomeNotRun]),
		slog.Duration("duration", rep.Duration),
	}
	if rep.Interrupted != InterruptNone {
		attrs = append(attrs, slog.String("interrupted", rep.Interrupted.String()))
	}
	if ws.rev != 0 {
		attrs = append(attrs, slog.Uint64("revision", ws.rev))
	}
	ws.log.LogAttrs(context.WithoutCancel(ws.ctx), level, "walk finished", attrs...)
}

// countItems adds the items of rep to MetricWalkItems by kind and outcome,
// and the failed ones to MetricWalkItemFailures by kind and phase.
func (ws *walkState) countItems(m Metrics, rep *Report) {
	const no, np = len(outcomeNames), len(phaseNames)
	nk := len(ws.kinds.names)
	var small [2 * (no + np)]int // two kinds need no allocation
	var counts []int
	if nk <= 2 {
		counts = small[:nk*(no+np)]
	} else {
		counts = make([]int, nk*(no+np))
	}
	for k := range rep.Items {
		it := &rep.Items[k]
		row := counts[int(ws.kinds.of[k])*(no+np):]
		row[it.Outcome]++
		if it.Outcome == OutcomeFailed {
			row[no+int(it.Phase)]++
		}
	}
	for j := range nk {
		row, kl := counts[j*(no+np):(j+1)*(no+np)], &ws.kindLabels[j]
		for o, n := range row[:no] {
			if n > 0 {
				m.Add(MetricWalkItems, float64(n), kl.outcome[o]...)
			}
		}
		for p, n := range row[no:] {
			if n > 0 {
				m.Add(MetricWalkItemFailures, float64(n), kl.phase[p]...)
			}
		}
	}
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}
