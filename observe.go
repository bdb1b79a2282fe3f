package converge

import (
	"context"
	"log/slog"
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

// kindLabels are the label values of one item kind, built once per graph
// so that reporting an item allocates nothing.
type kindLabels struct {
	kind    []string                    // {kind}
	outcome [len(outcomeNames)][]string // {kind, outcome}
	phase   [len(phaseNames)][]string   // {kind, phase}
}

// itemKinds maps the items of a compiled graph to their kind's labels.
type itemKinds struct {
	of     []int32
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
				j = int32(len(ks.labels))
				index[kind] = j
				kl := kindLabels{kind: []string{kind}}
				for o, name := range outcomeNames {
					kl.outcome[o] = []string{kind, name}
				}
				for p, name := range phaseNames {
					kl.phase[p] = []string{kind, name}
				}
				ks.labels = append(ks.labels, kl)
			}
			ks.of[k] = j
		}
		c.itemKinds = ks
	})
	return c.itemKinds
}

// Walk results, the "result" label of MetricWalks.
const (
	walkOK = iota
	walkFailed
	walkInterrupted
)

var walkResultNames = [...]string{"ok", "failed", "interrupted"}

// walkLabels holds the label values of MetricWalks and MetricWalkDuration
// by mode and dryness.
var walkLabels = func() (l [2][2]struct {
	mode   []string
	result [len(walkResultNames)][]string
}) {
	for m, name := range modeNames {
		for dry := range 2 {
			mode := name
			if dry == 1 {
				mode += "-dry"
			}
			l[m][dry].mode = []string{mode}
			for r, res := range walkResultNames {
				l[m][dry].result[r] = []string{mode, res}
			}
		}
	}
	return l
}()

// observeItem reports the result of item k, which ran: its metrics, and a
// log line. applied is how long its Apply took, or negative when it did
// not apply. Workers call it without holding ws.mu.
func (ws *walkState) observeItem(k int, res *ItemResult, applied time.Duration) {
	if m := ws.cfg.Metrics; m != nil {
		kl := &ws.kinds.labels[ws.kinds.of[k]]
		m.Add(MetricWalkItems, 1, kl.outcome[res.Outcome]...)
		if res.Outcome == OutcomeFailed {
			m.Add(MetricWalkItemFailures, 1, kl.phase[res.Phase]...)
		}
		if applied >= 0 {
			m.Observe(MetricWalkApplyDuration, applied.Seconds(), kl.kind...)
		}
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
	labels := &walkLabels[ws.mode][boolIndex(ws.dry)]
	if m := ws.cfg.Metrics; m != nil {
		if counts[OutcomeWaiting]+counts[OutcomeNotRun] > 0 {
			for k := range rep.Items {
				if o := rep.Items[k].Outcome; o == OutcomeWaiting || o == OutcomeNotRun {
					m.Add(MetricWalkItems, 1, ws.kinds.labels[ws.kinds.of[k]].outcome[o]...)
				}
			}
		}
		m.Add(MetricWalks, 1, labels.result[result]...)
		m.Observe(MetricWalkDuration, rep.Duration.Seconds(), labels.mode...)
		if rep.EventsDropped > 0 {
			m.Add(MetricWalkEventsDropped, float64(rep.EventsDropped))
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
		slog.String("mode", labels.mode[0]),
		slog.String("result", walkResultNames[result]),
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

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}
