package plan_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/errtext"
	"github.com/convergekit/converge/plan"
)

// TestErrorMessagesNameTheCulpritOnce checks the messages of nested
// failures: the runner adds what it knows to a handler's error, the plan
// is named once, and the message has one "plan: " prefix (none of the
// core's); a Store's error comes through as the Store wrote it.
func TestErrorMessagesNameTheCulpritOnce(t *testing.T) {
	tests := []struct {
		name     string
		err      func(t *testing.T) error
		is       error
		pkg      string // the package whose prefix the message has; "" means plan
		culprits []string
	}{
		{name: "plan that failed", is: plan.ErrFailed, culprits: []string{`"p1"`, "command 0", "disk full"},
			err: func(t *testing.T) error {
				return runPlan(t, plan.CommandHandlerFuncs{SchedulableWaitFunc: func(_ context.Context, c *plan.CommandContext) (plan.State, error) {
					c.Status.Reason = `node "w0" failed: disk full`
					return plan.StateApplyFailed, nil
				}})
			}},
		{name: "plan that timed out", is: plan.ErrFailed, culprits: []string{`"p1"`, "command 0", "1.5s"},
			err: func(t *testing.T) error {
				var err error
				synctest.Test(t, func(t *testing.T) {
					err = runPlanTimeout(t, 1500*time.Millisecond)
				})
				return err
			}},
		{name: "plan with an unknown command", is: plan.ErrUnknownCommand, culprits: []string{"command 0", "(update)"},
			err: func(t *testing.T) error { return runPlan(t, nil) }},
		{name: "plan not stored", is: converge.ErrStoreNotFound, pkg: "converge", culprits: []string{`"plan/nope"`},
			err: func(t *testing.T) error {
				r, err := plan.NewRunner(converge.NewMemStore(), plan.RunnerConfig{})
				require.NoError(t, err)
				_, _, err = r.Get(context.Background(), "nope")
				return err
			}},
		{name: "stored plan that does not decode", is: plan.ErrDecode, culprits: []string{`"p1"`, "spec.commands"},
			err: func(t *testing.T) error {
				st := converge.NewMemStore()
				_, err := st.Put(context.Background(), converge.StoreRecord{Key: plan.KeyPrefix + "p1", Value: []byte(`{"spec":{"id":"p1","commands":{}}}`)})
				require.NoError(t, err)
				r, err := plan.NewRunner(st, plan.RunnerConfig{})
				require.NoError(t, err)
				_, _, err = r.Get(context.Background(), "p1")
				return err
			}},
		{name: "abort of a finished plan", is: plan.ErrFinished, culprits: []string{`"p1"`},
			err: func(t *testing.T) error {
				r, err := plan.NewRunner(converge.NewMemStore(), plan.RunnerConfig{
					Handlers: map[string]plan.CommandHandler{"update": plan.CommandHandlerFuncs{}},
				})
				require.NoError(t, err)
				ctx := context.Background()
				require.NoError(t, r.Create(ctx, examplePlan("p1", "w0")))
				_, err = r.Run(ctx, "p1")
				require.NoError(t, err)
				return r.Abort(ctx, "p1", "too late")
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err(t)
			require.ErrorIs(t, err, tc.is)
			msg := err.Error()
			pkg := tc.pkg
			if pkg == "" {
				pkg = "plan"
			}
			assert.Empty(t, errtext.Problems(pkg, msg, []string{"plan: ", "converge: "}))
			for _, c := range tc.culprits {
				assert.Equal(t, 1, strings.Count(msg, c), "%s named %d times: %s", c, strings.Count(msg, c), msg)
			}
		})
	}
}

// runPlan runs plan "p1" with one command of kind update on handler h (no
// handler when nil) and returns Run's error.
func runPlan(t *testing.T, h plan.CommandHandler) error {
	t.Helper()
	cfg := plan.RunnerConfig{}
	if h != nil {
		cfg.Handlers = map[string]plan.CommandHandler{"update": h}
	}
	return runPlanWith(t, cfg, plan.Command{})
}

func runPlanTimeout(t *testing.T, d time.Duration) error {
	return runPlanWith(t, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{
		"update": plan.CommandHandlerFuncs{SchedulableWaitFunc: func(context.Context, *plan.CommandContext) (plan.State, error) {
			return plan.StateSchedulableWait, nil
		}},
	}}, plan.Command{Timeout: d})
}

func runPlanWith(t *testing.T, cfg plan.RunnerConfig, cmd plan.Command) error {
	t.Helper()
	r, err := plan.NewRunner(converge.NewMemStore(), cfg)
	require.NoError(t, err)
	cmd.Kind = "update"
	cmd.Targets = []plan.CommandTargets{{Group: "workers", Discovery: plan.CommandDiscovery{Static: []string{"w0"}}}}
	require.NoError(t, r.Create(context.Background(), &plan.Document{Spec: plan.Plan{ID: "p1", Commands: []plan.Command{cmd}}}))
	_, err = r.Run(context.Background(), "p1")
	require.Error(t, err)
	return err
}
