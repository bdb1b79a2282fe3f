package plan

import (
	"context"
	"log/slog"

	"github.com/convergekit/converge"
)

// planChange is one state transition a step made: of the plan (command
// -1), of a command (name ""), or of a target of a command.
type planChange struct {
	command     int
	kind        string
	group, name string
	from, to    string
	reason      string
	failure     bool // a target failed
}

// planChanges lists the transitions from old (nil before the first step)
// to cur that d, their difference, describes: the plan's, then per changed
// command its own and its targets', in group order. A target that first
// appears enters its state from "".
func planChanges(old, cur *Status, d *planDelta) []planChange {
	var out []planChange
	from := StateNewPlan
	if old != nil {
		from = old.State.normal()
	}
	if to := cur.State.normal(); to != from {
		out = append(out, planChange{command: -1, from: string(from), to: string(to), reason: cur.Reason})
	}
	for _, cd := range d.Commands {
		i := cd.Index
		c := &cur.Commands[i]
		var o *CommandStatus
		if old != nil && i < len(old.Commands) {
			o = &old.Commands[i]
		}
		cfrom := StateNewPlan
		if o != nil {
			cfrom = o.State.normal()
		}
		if to := c.State.normal(); to != cfrom {
			ch := planChange{command: i, kind: c.Kind, from: string(cfrom), to: string(to)}
			if to.IsError() {
				ch.reason = c.Reason
			}
			out = append(out, ch)
		}
		target := func(g string, t *TargetStatus, before TargetState) {
			if to := t.State.normal(); to != before {
				ch := planChange{command: i, kind: c.Kind, group: g, name: t.Name, from: string(before), to: string(to)}
				if to.IsFailure() {
					ch.reason, ch.failure = t.Reason, true
				}
				out = append(out, ch)
			}
		}
		if cd.Full != nil {
			for _, g := range planSortedKeys(c.Targets) {
				for j := range c.Targets[g] {
					t := &c.Targets[g][j]
					var before TargetState
					if o != nil && j < len(o.Targets[g]) && o.Targets[g][j].Name == t.Name {
						before = o.Targets[g][j].State.normal()
					}
					target(g, t, before)
				}
			}
			continue
		}
		for _, td := range cd.Targets {
			target(td.Group, &c.Targets[td.Group][td.Index], o.Targets[td.Group][td.Index].State.normal())
		}
	}
	return out
}

// observed reports whether the runner has metrics or logs to report to.
func (r *Runner) observed() bool { return r.cfg.Metrics != nil || r.cfg.Logger != nil }

func (r *Runner) logAttrs(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	ctx = context.WithoutCancel(ctx)
	if r.cfg.Logger != nil && r.cfg.Logger.Enabled(ctx, level) {
		r.cfg.Logger.LogAttrs(ctx, level, msg, attrs...)
	}
}

// observeChanges reports the transitions of the plan id.
func (r *Runner) observeChanges(ctx context.Context, id string, changes []planChange) {
	for _, ch := range changes {
		if m := r.cfg.Metrics; m != nil {
			switch {
			case ch.command < 0:
				m.Add(converge.MetricPlanTransitions, 1, ch.to)
			case ch.name == "":
				m.Add(converge.MetricPlanCommandTransitions, 1, ch.kind, ch.to)
			default:
				m.Add(converge.MetricPlanTargetTransitions, 1, ch.kind, ch.to)
			}
		}
		if r.cfg.Logger == nil || ch.from == "" && ch.command < 0 {
			continue // a created plan is logged by Create
		}
		attrs := []slog.Attr{slog.String("plan", id)}
		level, msg := slog.LevelInfo, "plan state changed"
		if ch.command >= 0 {
			attrs = append(attrs, slog.Int("command", ch.command), slog.String("kind", ch.kind))
			msg = "command state changed"
		}
		if ch.name != "" {
			attrs = append(attrs, slog.String("group", ch.group), slog.String("host", ch.name))
			level, msg = slog.LevelDebug, "target state changed"
			if ch.failure {
				level = slog.LevelWarn
			}
		}
		attrs = append(attrs, slog.String("from", ch.from), slog.String("to", ch.to))
		if ch.reason != "" {
			attrs = append(attrs, slog.String("reason", ch.reason))
		}
		r.logAttrs(ctx, level, msg, attrs...)
	}
}
