package autopilot_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planNoRelease is a Store whose Release does nothing, as for a process that
// crashed holding its claim.
type planNoRelease struct{ converge.Store }

func (planNoRelease) Release(context.Context, converge.Lease) error { return nil }

// TestPlanRunnerRestartedResumesAtOnce checks that a runner with the default
// owner, restarted in the same program on the same host after a crash,
// takes the plan over at once (its owner is the crashed runner's), while a
// runner with another owner waits for the crashed runner's claim to expire.
func TestPlanRunnerRestartedResumesAtOnce(t *testing.T) {
	const ttl = time.Minute
	tests := []struct {
		name  string
		owner string
		waits bool
	}{
		{name: "default owner", owner: "", waits: false},
		{name: "other owner", owner: "someone-else", waits: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := converge.NewMemStore()
				bus := autopilot.NewBus(planWrk("worker0")) // answers when told
				crashed := planRunner(t, planNoRelease{mem}, bus, plan.RunnerConfig{LeaseTTL: ttl})
				planCreate(t, crashed, planOf(planCmd("update", planGroup("workers", 1, "worker0"))))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := crashed.Run(ctx, "p1")
				cancel()
				require.ErrorIs(t, err, context.DeadlineExceeded)
				_, err = mem.Claim(context.Background(), plan.KeyPrefix+"p1", "probe", time.Second)
				require.ErrorIs(t, err, converge.ErrClaimHeld, "the crashed runner still holds the plan")
				require.NoError(t, bus.Respond("worker0", plan.TargetCompleted, ""))

				restarted := planRunner(t, mem, bus, plan.RunnerConfig{LeaseTTL: ttl, Owner: tc.owner})
				start := time.Now()
				st, err := restarted.Run(context.Background(), "p1")
				require.NoError(t, err)
				assert.Equal(t, plan.StateCompleted, st.State)
				if tc.waits {
					assert.GreaterOrEqual(t, time.Since(start), ttl-5*time.Second, "waits for the claim to expire")
				} else {
					assert.Less(t, time.Since(start), plan.DefaultPollInterval, "resumes at once")
				}
				assert.Len(t, bus.Sent(), 1, "the target is not signalled again")
			})
		})
	}
}

// TestPlanDefaultOwnerIsStable checks that the default owner is the same
// for every runner of a program and is what a runner's Config reports.
func TestPlanDefaultOwnerIsStable(t *testing.T) {
	a, err := plan.NewRunner(nil, plan.RunnerConfig{})
	require.NoError(t, err)
	b, err := plan.NewRunner(nil, plan.RunnerConfig{})
	require.NoError(t, err)
	assert.Equal(t, a.Config().Owner, b.Config().Owner)
	assert.Equal(t, plan.DefaultOwner(), a.Config().Owner)
	assert.NotEmpty(t, a.Config().Owner)
	c, err := plan.NewRunner(nil, plan.RunnerConfig{Owner: "mine"})
	require.NoError(t, err)
	assert.Equal(t, "mine", c.Config().Owner)
}
