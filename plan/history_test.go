package plan_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/plan"
)

// rolling is a handler that signals its workers one at a time, as the
// k0s machine does (SchedulableWait <-> Schedulable once per worker), and
// fails the worker named "bad".
func rolling() plan.CommandHandler {
	return plan.CommandHandlerFuncs{
		NewPlanFunc: func(_ context.Context, c *plan.CommandContext) (plan.State, error) {
			for _, w := range c.Command.Targets[0].Discovery.Static {
				c.SetTarget("workers", w, plan.TargetPending, "")
			}
			return plan.StateSchedulableWait, nil
		},
		SchedulableWaitFunc: func(_ context.Context, c *plan.CommandContext) (plan.State, error) {
			pending := false
			for _, t := range c.Status.Targets["workers"] {
				switch {
				case t.State == plan.TargetSent && t.Name == "bad":
					c.SetTarget("workers", t.Name, plan.TargetApplyFailed, "disk full")
					c.Status.Reason = `node "bad" failed: disk full`
					return plan.StateApplyFailed, nil
				case t.State == plan.TargetSent:
					c.SetTarget("workers", t.Name, plan.TargetCompleted, "")
				case t.State == plan.TargetPending:
					pending = true
				}
			}
			if pending {
				return plan.StateSchedulable, nil
			}
			return plan.StateCompleted, nil
		},
		SchedulableFunc: func(_ context.Context, c *plan.CommandContext) (plan.State, error) {
			for _, t := range c.Status.Targets["workers"] {
				if t.State == plan.TargetPending {
					c.SetTarget("workers", t.Name, plan.TargetSent, "")
					break
				}
			}
			return plan.StateSchedulableWait, nil
		},
	}
}

func rollingPlan(id string, workers ...string) *plan.Document {
	return &plan.Document{Spec: plan.Plan{ID: id, Commands: []plan.Command{{
		Kind:    "restart",
		Targets: []plan.CommandTargets{{Group: "workers", Discovery: plan.CommandDiscovery{Static: workers}}},
	}}}}
}

func newRollingRunner(t *testing.T, store converge.Store) *plan.Runner {
	t.Helper()
	r, err := plan.NewRunner(store, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{"restart": rolling()}, PollInterval: time.Millisecond})
	require.NoError(t, err)
	return r
}

// TestCreateExisting: creating a plan whose ID is taken fails with
// ErrExists, naming the plan once, and changes nothing.
func TestCreateExisting(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	r := newRollingRunner(t, store)
	require.NoError(t, r.Create(ctx, rollingPlan("nightly", "w1")))
	before, v1, err := r.Get(ctx, "nightly")
	require.NoError(t, err)

	err = r.Create(ctx, rollingPlan("nightly", "w1", "w2"))
	require.ErrorIs(t, err, plan.ErrExists)
	require.ErrorIs(t, err, converge.ErrStoreStale, "as before ErrExists")
	var ee *plan.ExistsError
	require.True(t, errors.As(err, &ee))
	assert.Equal(t, "nightly", ee.PlanID)
	assert.Equal(t, 1, strings.Count(err.Error(), `"nightly"`), "named once: %s", err)
	assert.True(t, strings.HasPrefix(err.Error(), "plan: "), err.Error())

	after, v2, err := r.Get(ctx, "nightly")
	require.NoError(t, err)
	assert.Equal(t, v1, v2, "nothing written")
	assert.Equal(t, before, after)
	hist, err := r.History(ctx, "nightly")
	require.NoError(t, err)
	assert.Len(t, hist, 1, "only the first creation")
}

// TestHistorySaysWhatHappened runs plans over several workers and checks
// the history: the plan's entries say what happened (started, completed,
// stopped with the reason), and the moves between SchedulableWait and
// Schedulable, one pair per worker, are not recorded.
func TestHistorySaysWhatHappened(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers []string
		want    []string // the plan's entries: from>to: reason
		state   plan.State
	}{
		{name: "completed", workers: []string{"w1", "w2", "w3", "w4", "w5"}, state: plan.StateCompleted, want: []string{
			">NewPlan: plan created", "NewPlan>SchedulableWait: started: 1 command", "SchedulableWait>Completed: the command completed"}},
		{name: "failed", workers: []string{"w1", "w2", "bad", "w4"}, state: plan.StateApplyFailed, want: []string{
			">NewPlan: plan created", "NewPlan>SchedulableWait: started: 1 command",
			`SchedulableWait>ApplyFailed: stopped: command 0 (restart): node "bad" failed: disk full`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := converge.NewMemStore()
			r := newRollingRunner(t, store)
			require.NoError(t, r.Create(ctx, rollingPlan("p", tc.workers...)))
			st, _ := r.Run(ctx, "p")
			require.NotNil(t, st)
			require.Equal(t, tc.state, st.State)
			hist, err := r.History(ctx, "p")
			require.NoError(t, err)
			stored, err := store.History(ctx, plan.KeyPrefix+"p")
			require.NoError(t, err)
			assert.Equal(t, stored, hist, "nothing to leave out when reading")
			var planEntries []string
			for _, h := range hist {
				assert.NotEqual(t, "plan", h.Reason, "an entry says what happened")
				quiet := (h.From == "SchedulableWait" && h.To == "Schedulable") || (h.From == "Schedulable" && h.To == "SchedulableWait")
				assert.False(t, quiet, "no flapping entry: %+v", h)
				if h.Subject == nil {
					planEntries = append(planEntries, fmt.Sprintf("%s>%s: %s", h.From, h.To, h.Reason))
				}
			}
			assert.Equal(t, tc.want, planEntries)
			assert.LessOrEqual(t, len(hist), 5, "a short history however many workers: %+v", hist)
		})
	}
}

// TestHistoryStoredWithFlapsReads: a history stored before the moves
// between SchedulableWait and Schedulable were left out, with the reason
// "plan", reads as it was stored.
func TestHistoryStoredWithFlapsReads(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	r := newRollingRunner(t, store)
	require.NoError(t, r.Create(ctx, rollingPlan("old", "w1")))
	at := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	old := []converge.HistoryEntry{
		{At: at, From: "NewPlan", To: "SchedulableWait", Reason: "plan"},
		{At: at, From: "SchedulableWait", To: "Schedulable", Reason: "plan"},
		{At: at, From: "SchedulableWait", To: "Schedulable", Reason: "command 0 (restart)", Subject: &converge.HistorySubject{Command: 0}},
		{At: at, From: "Schedulable", To: "SchedulableWait", Reason: "plan"},
		{At: at, From: "SchedulableWait", To: "Completed", Reason: "plan"},
	}
	// Append the old entries with a write that changes nothing else.
	rec, err := store.Get(ctx, plan.KeyPrefix+"old")
	require.NoError(t, err)
	_, err = store.Put(ctx, converge.StoreRecord{Key: rec.Key, Version: rec.Version, Value: rec.Value}, old...)
	require.NoError(t, err)

	hist, err := r.History(ctx, "old")
	require.NoError(t, err)
	var got []string
	for _, h := range hist {
		got = append(got, fmt.Sprintf("%s>%s: %s", h.From, h.To, h.Reason))
	}
	want := []string{">NewPlan: plan created"}
	for _, h := range old {
		want = append(want, fmt.Sprintf("%s>%s: %s", h.From, h.To, h.Reason))
	}
	assert.Equal(t, want, got)
}
