package autopilot_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// planHistory runs the autopilot example plan on store and returns its
// history as "from>to (reason)" lines.
func planHistory(t *testing.T, store converge.Store, mem *converge.MemStore) []string {
	t.Helper()
	bus := planAutoBus(time.Second, nil, planNodes()...)
	r := planRunner(t, store, bus, converge.PlanConfig{})
	setup := planRunner(t, mem, bus, converge.PlanConfig{})
	planCreate(t, setup, planDoc(t, "testdata/plan/autopilot-plan.yaml"))
	st, err := r.Run(context.Background(), "id123")
	require.NoError(t, err)
	require.Equal(t, converge.PlanCompleted, st.State)
	assert.Len(t, bus.Sent(), 3, "no target signalled twice")
	hist, err := mem.History(context.Background(), converge.PlanKeyPrefix+"id123")
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
