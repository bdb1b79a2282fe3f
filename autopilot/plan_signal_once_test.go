package autopilot_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planLagSender reaches the nodes of a Bus over something slower: a
// node's report shows a signal only once the node has acted on it (acked),
// as with a node that picks its signals up from a queue. afterSend, when
// set, runs after every delivery.
type planLagSender struct {
	*autopilot.Bus
	mu        sync.Mutex
	acked     map[string]bool
	afterSend func()
}

func (s *planLagSender) ack(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked[node] = true
}

func (s *planLagSender) Read(ctx context.Context, node string) (autopilot.Report, error) {
	s.mu.Lock()
	acked := s.acked[node]
	s.mu.Unlock()
	if !acked {
		return autopilot.Report{}, nil
	}
	return s.Bus.Read(ctx, node)
}

func (s *planLagSender) Send(ctx context.Context, node string, sig autopilot.Signal) error {
	err := s.Bus.Send(ctx, node, sig)
	if s.afterSend != nil {
		s.afterSend()
	}
	return err
}

// TestPlanRunnerSignalsOnceAcrossCrash kills a runner right after it
// signalled a node and before anything more is stored, with a node whose
// report does not show the signal yet: the runner had stored its intent
// before sending, and the node, sent the signal again by the runner that
// resumes, recognises it and acts once.
func TestPlanRunnerSignalsOnceAcrossCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := autopilot.NewBus(planWrk("worker0"))
		sender := &planLagSender{Bus: bus, acked: map[string]bool{}}
		acted := map[string]int{}
		bus.OnSignal = func(node string, s autopilot.Signal) {
			acted[node+" "+s.ID]++
			time.AfterFunc(time.Minute, func() {
				_ = bus.Respond(node, plan.TargetCompleted, "")
				sender.ack(node)
			})
		}
		mem := converge.NewMemStore()
		setup := planRunner(t, mem, sender, plan.RunnerConfig{})
		planCreate(t, setup, planOf(planCmd("update", planGroup("workers", 1, "worker0"))))

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		dying := &planKillStore{Store: mem, left: -1, cancel: cancel}
		sender.afterSend = dying.kill
		r1 := planRunner(t, dying, sender, plan.RunnerConfig{Owner: "runner-1", LeaseTTL: time.Minute})
		_, err := r1.Run(ctx, "p1")
		require.ErrorIs(t, err, context.Canceled)
		sender.afterSend = nil
		require.Len(t, bus.Sent(), 1, "killed right after the first signal")

		doc, _, err := setup.Get(context.Background(), "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.TargetSent, doc.Status.Commands[0].Target("workers", "worker0").State,
			"the intent to signal was stored before the signal was sent")

		r2 := planRunner(t, mem, sender, plan.RunnerConfig{Owner: "runner-2", LeaseTTL: time.Minute})
		st, err := r2.Run(context.Background(), "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		assert.Equal(t, map[string]int{"worker0 p1/0/0": 1}, acted, "the node acted on the signal once")
		for _, d := range bus.Sent()[1:] {
			assert.True(t, d.Repeat, "a signal sent again is a repeat: %+v", d)
		}
	})
}

// TestBusIgnoresRepeatedSignal checks that a Bus node acts on a signal
// once: the same ID again changes neither its report nor calls OnSignal,
// and is recorded as a repeat; a new ID is a new signal.
func TestBusIgnoresRepeatedSignal(t *testing.T) {
	ctx := context.Background()
	bus := autopilot.NewBus(planWrk("w0"))
	calls := 0
	bus.OnSignal = func(string, autopilot.Signal) { calls++ }
	s0 := autopilot.Signal{ID: autopilot.SignalID("p", 0, 0), PlanID: "p"}
	require.NoError(t, bus.Send(ctx, "w0", s0))
	require.NoError(t, bus.Respond("w0", plan.TargetCompleted, ""))
	require.NoError(t, bus.Send(ctx, "w0", s0))
	rep, err := bus.Read(ctx, "w0")
	require.NoError(t, err)
	assert.Equal(t, autopilot.Report{SignalID: s0.ID, State: plan.TargetCompleted}, rep, "the repeat changed nothing")
	assert.Equal(t, 1, calls)

	s1 := autopilot.Signal{ID: autopilot.SignalID("p", 0, 1), PlanID: "p", Attempt: 1}
	require.NoError(t, bus.Send(ctx, "w0", s1))
	rep, err = bus.Read(ctx, "w0")
	require.NoError(t, err)
	assert.Equal(t, autopilot.Report{SignalID: s1.ID, State: plan.TargetSent}, rep)
	assert.Equal(t, 2, calls)
	assert.Equal(t, []autopilot.Delivery{{Node: "w0", Signal: s0}, {Node: "w0", Signal: s0, Repeat: true}, {Node: "w0", Signal: s1}}, bus.Sent())
}
