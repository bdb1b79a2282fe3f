package autopilot_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/plan"
)

// planHistory runs the autopilot example plan on store and returns its
// history as "from>to (reason)" lines.
func planHistory(t *testing.T, store converge.Store, mem *converge.MemStore) []string {
	t.Helper()
	bus := planAutoBus(time.Second, nil, planNodes()...)
	r := planRunner(t, store, bus, plan.RunnerConfig{})
	setup := planRunner(t, mem, bus, plan.RunnerConfig{})
	planCreate(t, setup, planDoc(t, "testdata/plan/autopilot-plan.yaml"))
	st, err := r.Run(context.Background(), "id123")
	require.NoError(t, err)
	require.Equal(t, plan.StateCompleted, st.State)
	assert.Len(t, bus.Sent(), 3, "no target signalled twice")
	hist, err := mem.History(context.Background(), plan.KeyPrefix+"id123")
	require.NoError(t, err)
	out := make([]string, len(hist))
	for i, h := range hist {
		out[i] = h.From + ">" + h.To + " (" + h.Reason + ")"
	}
	return out
}

// TestPlanHistoryOncePerTransition checks that every step of a plan is in
// its history once, however its write is retried: after writes that
// failed, writes whose reply was lost (they were done), and a stale write.
func TestPlanHistoryOncePerTransition(t *testing.T) {
	var want []string
	synctest.Test(t, func(t *testing.T) {
		mem := converge.NewMemStore()
		want = planHistory(t, mem, mem)
	})
	require.NotEmpty(t, want)
	tests := []struct {
		name  string
		store func(mem *converge.MemStore) converge.Store
	}{
		{name: "failed writes", store: func(mem *converge.MemStore) converge.Store {
			return (&convergetest.Store{Mem: mem}).FailNext(convergetest.OpPut, 3, nil)
		}},
		{name: "lost replies", store: func(mem *converge.MemStore) converge.Store {
			return &convergetest.Store{Mem: mem, LostReplyRate: 0.5, Seed: 3}
		}},
		{name: "stale write", store: func(mem *converge.MemStore) converge.Store { return &planStaleStore{Store: mem} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := converge.NewMemStore()
				store := tc.store(mem)
				assert.Equal(t, want, planHistory(t, store, mem))
				switch s := store.(type) {
				case *convergetest.Store:
					assert.Positive(t, s.Injected(), "faults were injected")
				case *planStaleStore:
					assert.Equal(t, int32(1), s.stale.Load(), "a write was stale")
				}
			})
		})
	}
}

// TestPlanHistorySubjects reads the history of a finished plan (one that
// failed on a host, was retried and completed): every entry says in
// Subject what moved, and each subject's entries are its own transitions,
// each once, one after the other (an entry's From is the To of the
// subject's entry before it).
func TestPlanHistorySubjects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := converge.NewMemStore()
		bus := planAutoBus(time.Second, func(node string, s autopilot.Signal) (plan.TargetState, string) {
			if node == "w1" && s.Attempt == 0 {
				return plan.TargetApplyFailed, "disk full"
			}
			return plan.TargetCompleted, ""
		}, planWrk("w0"), planWrk("w1"), planCtl("controller0"))
		r := planRunner(t, mem, bus, plan.RunnerConfig{})
		planCreate(t, r, planOf(
			planCmd("update", planGroup("controllers", 1, "controller0")),
			planCmd("update", planGroup("workers", 2, "w0", "w1"))))
		_, err := r.Run(ctx, "p1")
		require.ErrorIs(t, err, plan.ErrFailed)
		require.NoError(t, r.Retry(ctx, "p1"))
		st, err := r.Run(ctx, "p1")
		require.NoError(t, err)
		require.Equal(t, plan.StateCompleted, st.State)

		hist, err := r.History(ctx, "p1")
		require.NoError(t, err)
		last := map[string]string{} // subject -> the To of its last entry
		commands := map[int]bool{}
		hosts := 0
		for i, h := range hist {
			subject := "plan"
			if s := h.Subject; s != nil {
				require.GreaterOrEqual(t, s.Command, 0, "entry %d", i)
				require.Less(t, s.Command, len(st.Commands), "entry %d", i)
				subject = fmt.Sprintf("command %d", s.Command)
				if s.Host != "" {
					require.NotEmpty(t, s.Group, "entry %d", i)
					subject += " host " + s.Group + "/" + s.Host
					hosts++
				} else {
					commands[s.Command] = true
				}
			}
			if prev, ok := last[subject]; ok && h.From != h.To {
				assert.Equal(t, prev, h.From, "entry %d (%s) follows the last transition of its subject", i, subject)
			}
			last[subject] = h.To
		}
		assert.Equal(t, string(plan.StateCompleted), last["plan"])
		assert.Len(t, commands, len(st.Commands), "every command's transitions are in the history, under its own subject")
		for i := range st.Commands {
			assert.Equal(t, string(plan.StateCompleted), last[fmt.Sprintf("command %d", i)])
		}
		assert.Equal(t, 1, hosts, "the retried host")
		assert.Equal(t, string(plan.TargetPending), last["command 1 host workers/w1"])
	})
}

// RetryBy and AbortBy store who asked in the By of every entry they
// write; the entries of the plan's own steps name nobody.
func TestPlanActionsRecordWho(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := converge.NewMemStore()
		bus := planAutoBus(time.Second, func(node string, s autopilot.Signal) (plan.TargetState, string) {
			if node == "w1" && s.Attempt == 0 {
				return plan.TargetApplyFailed, "disk full"
			}
			return plan.TargetCompleted, ""
		}, planWrk("w0"), planWrk("w1"))
		r := planRunner(t, mem, bus, plan.RunnerConfig{})
		planCreate(t, r, planOf(planCmd("update", planGroup("workers", 1, "w0", "w1"))))
		_, err := r.Run(ctx, "p1")
		require.ErrorIs(t, err, plan.ErrFailed)
		ran, err := r.History(ctx, "p1")
		require.NoError(t, err)
		require.NoError(t, r.RetryBy(ctx, "p1", "alice"))
		retried, err := r.History(ctx, "p1")
		require.NoError(t, err)
		require.NoError(t, r.AbortBy(ctx, "p1", "maintenance window over", "ops: bob"))
		asked, err := r.History(ctx, "p1")
		require.NoError(t, err)
		st, err := r.Run(ctx, "p1")
		require.ErrorIs(t, err, plan.ErrFailed)
		require.Equal(t, plan.StateAborted, st.State)
		ended, err := r.History(ctx, "p1")
		require.NoError(t, err)

		for _, h := range ran {
			assert.Empty(t, h.By, "a step of the plan: %s", h.Reason)
		}
		require.Greater(t, len(retried), len(ran)+1, "the plan's retry and its failed host's")
		for _, h := range retried[len(ran):] {
			assert.Equal(t, "alice", h.By, "an entry of the retry: %s", h.Reason)
		}
		require.Len(t, asked, len(retried)+1)
		assert.Equal(t, "abort requested: maintenance window over", asked[len(retried)].Reason)
		assert.Equal(t, "ops: bob", asked[len(retried)].By)
		require.Greater(t, len(ended), len(asked))
		for _, h := range ended[len(asked):] {
			assert.Empty(t, h.By, "the plan ending, by its runner: %s", h.Reason)
		}
	})
}
