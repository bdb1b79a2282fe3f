package plan_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/plan"
)

// compactingStore plays a runner that compacts a plan while another
// reads it: the first read of a base record finds it gone (dropped by the
// compaction), and the plan's head has moved on meanwhile.
type compactingStore struct {
	converge.Store
	head     string
	mu       sync.Mutex
	injected bool
}

func (s *compactingStore) Get(ctx context.Context, key string) (converge.StoreRecord, error) {
	s.mu.Lock()
	inject := !s.injected && strings.HasPrefix(key, "plan-base/")
	s.injected = s.injected || inject
	s.mu.Unlock()
	if inject {
		head, err := s.Store.Get(ctx, s.head)
		if err != nil {
			return converge.StoreRecord{}, err
		}
		if _, err := s.Store.Put(ctx, head); err != nil {
			return converge.StoreRecord{}, err
		}
		return converge.StoreRecord{}, converge.ErrStoreNotFound
	}
	return s.Store.Get(ctx, key)
}

// TestGetWhileAnotherRunnerCompacts reads a plan whose base a compaction
// replaced between the reader's read of the head and of the base: the
// reader reads the plan again rather than calling it corrupt.
func TestGetWhileAnotherRunnerCompacts(t *testing.T) {
	ctx := context.Background()
	mem := converge.NewMemStore()
	steps := 0
	h := plan.CommandHandlerFuncs{SchedulableWaitFunc: func(context.Context, *plan.CommandContext) (plan.State, error) {
		steps++
		if steps < 100 {
			return plan.StateSchedulable, nil
		}
		return plan.StateCompleted, nil
	}}
	r, err := plan.NewRunner(mem, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{"k": h}, PollInterval: 1})
	require.NoError(t, err)
	doc := &plan.Document{Spec: plan.Plan{ID: "p", Commands: []plan.Command{{Kind: "k"}}}}
	require.NoError(t, r.Create(ctx, doc))
	_, err = r.Run(ctx, "p")
	require.NoError(t, err)

	cs := &compactingStore{Store: mem, head: plan.KeyPrefix + "p"}
	reader, err := plan.NewRunner(cs, plan.RunnerConfig{})
	require.NoError(t, err)
	got, _, err := reader.Get(ctx, "p")
	require.NoError(t, err)
	assert.True(t, cs.injected, "the plan has a base record, read after its head")
	assert.Equal(t, plan.StateCompleted, got.Status.State)
}
