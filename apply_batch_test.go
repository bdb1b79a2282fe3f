package converge_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heldItem is converged, except for the one whose Apply waits until every
// other item of the walk has been checked.
type heldItem struct {
	id      converge.ID
	slow    bool
	checked *atomic.Int64
	others  int64
	allDone chan struct{}
}

func (h *heldItem) ID() converge.ID { return h.id }
func (h *heldItem) StateCurrent(context.Context, converge.DepStates) (bool, error) {
	return !h.slow, nil
}
func (h *heldItem) StateGoal(context.Context, converge.DepStates) (bool, error) { return true, nil }
func (h *heldItem) Check(_ context.Context, c, t bool) (converge.Decision, error) {
	if !h.slow && h.checked.Add(1) == h.others {
		close(h.allDone)
	}
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (h *heldItem) Apply(_ context.Context, _, t bool) (bool, error) {
	select {
	case <-h.allDone:
		h.slow = false
		return t, nil
	case <-time.After(time.Hour):
		return false, errors.New("the other items waited for this Apply")
	}
}
func (h *heldItem) ApplyDry(_ context.Context, _, t bool) (bool, error) { return t, nil }

// TestWalkRunsOtherItemsDuringAnApply: whatever batch of a worker the
// changing item lands in, the items taken with it go to the other worker
// while its Apply runs, so it never waits for them.
func TestWalkRunsOtherItemsDuringAnApply(t *testing.T) {
	const n = 40
	for slow := range 12 {
		t.Run(fmt.Sprint("slow item ", slow), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var checked atomic.Int64
				allDone := make(chan struct{})
				g := converge.NewGraph()
				for k := range n {
					g.Add(converge.Wrap[bool](&heldItem{
						id: converge.ID(fmt.Sprintf("item-%02d", k)), slow: k == slow,
						checked: &checked, others: n - 1, allDone: allDone,
					}), converge.Present)
				}
				w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 2})
				require.NoError(t, err)
				rep, err := w.Apply(context.Background(), g)
				require.NoError(t, err)
				assert.Equal(t, 1, rep.Count(converge.OutcomeChanged))
				assert.Equal(t, n-1, rep.Count(converge.OutcomeUnchanged))
			})
		})
	}
}
