package autopilot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planCountStore counts the bytes of the values read and written.
type planCountStore struct {
	converge.Store
	read, written atomic.Int64
}

func (s *planCountStore) Get(ctx context.Context, key string) (converge.StoreRecord, error) {
	rec, err := s.Store.Get(ctx, key)
	s.read.Add(int64(len(rec.Value)))
	return rec, err
}

func (s *planCountStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	s.written.Add(int64(len(rec.Value)))
	return s.Store.Put(ctx, rec, h...)
}

// TestPlanRunnerStepCostsWhatChanged runs a plan of 1,000 workers, one at a
// time, and checks that a stored step reads and writes, on average, a small
// part of the plan's document: what the step changed (and a share of the
// periodic compaction), not the whole document.
func TestPlanRunnerStepCostsWhatChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const workers, measured = 1000, 300
		var hosts []autopilot.Host
		var names []string
		for i := range workers {
			names = append(names, fmt.Sprintf("w%04d", i))
			hosts = append(hosts, planWrk(names[i]))
		}
		bus := autopilot.NewBus(hosts...)
		bus.OnSignal = func(node string, _ autopilot.Signal) { _ = bus.Respond(node, plan.TargetCompleted, "") }
		store := &planCountStore{Store: converge.NewMemStore()}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		steps := 0
		r := planRunner(t, store, bus, plan.RunnerConfig{OnStep: func(string, plan.Step, *plan.Status) {
			steps++
			switch steps {
			case 1: // NewPlan writes everything: count from here
				store.read.Store(0)
				store.written.Store(0)
			case 1 + measured:
				cancel()
			}
		}})
		planCreate(t, r, planOf(planCmd("update", planGroup("workers", 1, names...))))
		_, err := r.Run(ctx, "p1")
		require.ErrorIs(t, err, context.Canceled)

		doc, _, err := r.Get(context.Background(), "p1")
		require.NoError(t, err)
		full, err := json.Marshal(doc)
		require.NoError(t, err)
		perStep := (store.read.Load() + store.written.Load()) / measured
		t.Logf("document %d bytes, %d bytes read and written per step", len(full), perStep)
		assert.Less(t, perStep, int64(len(full)/5), "a step reads and writes what changed, not the document")
	})
}
