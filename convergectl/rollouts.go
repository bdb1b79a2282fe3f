package main

import (
	"context"
	"fmt"

	"github.com/convergekit/converge/fleet"
)

func init() {
	register(&command{
		name: "rollouts",
		summary: `List the fleet's rollouts in the store: per rollout its state and why, and per
wave its devices pending, moving, ready and failed beside its thresholds.`,
		run: runRollouts,
	})
}

func runRollouts(ctx context.Context, e *env, c *common, _ []string) error {
	st, closer, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	rs, err := fleet.ReadRollouts(ctx, st)
	if err != nil {
		return err
	}
	if c.structured() {
		return c.emit(e.out, map[string]any{"rollouts": rs})
	}
	if len(rs) == 0 {
		fmt.Fprintln(e.errOut, "no rollouts in the store")
		return nil
	}
	t := newTable(e.out, "ROLLOUT", "WAVE", "STATE", "DEVICES", "PENDING", "MOVING", "READY", "FAILED", "THRESHOLDS", "REASON")
	for _, r := range rs {
		reason := r.Reason
		if r.Restored > 0 {
			reason = fmt.Sprintf("%s (%d restored)", reason, r.Restored)
		}
		var pending, moving, ready, failed int
		for _, w := range r.Waves {
			pending, moving, ready, failed = pending+w.Pending, moving+w.Moving, ready+w.Ready, failed+w.Failed
		}
		t.row(r.ID, "", string(r.State), fmt.Sprint(r.Devices), fmt.Sprint(pending), fmt.Sprint(moving), fmt.Sprint(ready), fmt.Sprint(failed), "", cut(reason, 80))
		for _, w := range r.Waves {
			t.row("", w.Name, string(w.State), fmt.Sprint(w.Devices), fmt.Sprint(w.Pending), fmt.Sprint(w.Moving), fmt.Sprint(w.Ready), fmt.Sprint(w.Failed),
				fmt.Sprintf("ok %d%% / err %d%%", w.SuccessThreshold, w.ErrorThreshold), "")
		}
	}
	return t.flush()
}
