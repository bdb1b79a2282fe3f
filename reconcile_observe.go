package converge

import (
	"context"
	"log/slog"
	"time"
)

// Pass results, the "result" label of MetricTargetPasses: success and
// error are controller-runtime's names; preempted has no counterpart
// there.
const (
	passOK = iota
	passFailed
	passPreempted
)

var passResultNames = [...]string{"success", "error", "preempted"}

// targetObs reports a TargetReconciler's metrics and log lines.
type targetObs struct {
	m      Metrics // nil: none
	now    func() time.Time
	log    *slog.Logger // nil: none; carries the "target" attribute
	labels []string     // {name}
	result [len(passResultNames)][]string
	// action[a] are the labels of MetricTargetPendingActions for Action a.
	action [len(actionNames)][]string
}

func newTargetObs(name string, m Metrics, log *slog.Logger, now func() time.Time) targetObs {
	o := targetObs{m: m, now: now, log: log, labels: []string{name}}
	for i, res := range passResultNames {
		o.result[i] = []string{name, res}
	}
	for a := range actionNames {
		if a > 0 {
			o.action[a] = []string{name, actionNames[a]}
		}
	}
	return o
}

func (o *targetObs) logAttrs(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	ctx = context.WithoutCancel(ctx)
	if o.log != nil && o.log.Enabled(ctx, level) {
		o.log.LogAttrs(ctx, level, msg, attrs...)
	}
}

// targetSet reports a new current target: one set (SetTarget), or one
// resumed from the Store (Load), which the log line tells apart.
func (o *targetObs) targetSet(ctx context.Context, rev uint64, resumed bool) {
	if o.m != nil {
		o.m.Set(MetricTargetRevision, float64(rev), o.labels...)
		o.m.Set(MetricTargetFailures, 0, o.labels...)
		o.m.Set(MetricTargetBackoff, 0, o.labels...)
	}
	msg := "target set"
	if resumed {
		msg = "target resumed"
	}
	o.logAttrs(ctx, slog.LevelInfo, msg, slog.Uint64("revision", rev))
}

// pendingActions reports the number of pending host actions of each kind.
func (o *targetObs) pendingActions(list []PendingAction) {
	if o.m == nil {
		return
	}
	var n [len(actionNames)]int
	for _, p := range list {
		if int(p.Action) < len(n) {
			n[p.Action]++
		}
	}
	for a := 1; a < len(n); a++ {
		o.m.Set(MetricTargetPendingActions, float64(n[a]), o.action[a]...)
	}
}

// passStarted reports the start of a pass: no backoff is in effect any more.
func (o *targetObs) passStarted(ctx context.Context, info passInfo, forced bool) {
	if o.m != nil && !info.inter {
		o.m.Set(MetricTargetBackoff, 0, o.labels...)
	}
	o.logAttrs(ctx, slog.LevelDebug, "pass started", slog.Int("pass", info.pass), slog.Uint64("revision", info.rev),
		slog.Bool("intermediate", info.inter), slog.Bool("forced", forced))
}

// passEnded reports a pass that finished, failed (failures in a row
// counting this one) or was preempted, as ev says.
func (o *targetObs) passEnded(ctx context.Context, ev TargetEvent, failures int) {
	result := passOK
	switch ev.Kind {
	case TargetPassFailed:
		result = passFailed
	case TargetPassPreempted:
		result = passPreempted
	}
	if m := o.m; m != nil {
		m.Add(MetricTargetPasses, 1, o.result[result]...)
		m.Observe(MetricTargetPassDuration, ev.Duration.Seconds(), o.labels...)
		if result != passPreempted {
			locked := 0.0
			if ev.Locked {
				locked = 1
			}
			m.Set(MetricTargetLocked, locked, o.labels...)
		}
		if !ev.Intermediate && result != passPreempted {
			m.Set(MetricTargetFailures, float64(failures), o.labels...)
			m.Set(MetricTargetBackoff, ev.Retry.Seconds(), o.labels...)
			if result == passOK {
				m.Set(MetricTargetLastSuccess, unixSeconds(o.now()), o.labels...)
			}
		}
	}
	if o.log == nil {
		return
	}
	attrs := []slog.Attr{slog.Int("pass", ev.Pass), slog.Uint64("revision", ev.Revision), slog.Duration("duration", ev.Duration)}
	if ev.Intermediate {
		attrs = append(attrs, slog.Bool("intermediate", true))
	}
	if ev.Forced {
		attrs = append(attrs, slog.Bool("forced", true))
	}
	switch result {
	case passOK:
		o.logAttrs(ctx, slog.LevelInfo, "pass finished", attrs...)
	case passPreempted:
		o.logAttrs(ctx, slog.LevelInfo, "pass preempted", attrs...)
	default:
		attrs = append(attrs, slog.String("error", ev.Err.Error()), slog.Duration("retry", ev.Retry), slog.Bool("locked", ev.Locked))
		if failures > 0 {
			attrs = append(attrs, slog.Int("failures", failures))
		}
		o.logAttrs(ctx, slog.LevelWarn, "pass failed", attrs...)
	}
}

// unixSeconds is t as the seconds since the Unix epoch, with a fraction:
// the value of a "_timestamp_seconds" gauge.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
