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
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/plan"
)

// planCtl runs a Controller of plans on store until stop is called.
type planCtlRun struct {
	ctrl  *controller.Controller
	steps chan plan.Step
	stop  func()
}

func planController(t *testing.T, store converge.Store, bus *autopilot.Bus) *planCtlRun {
	t.Helper()
	steps := make(chan plan.Step, 100)
	r := planRunner(t, store, bus, plan.RunnerConfig{OnStep: func(_ string, s plan.Step, _ *plan.Status) { steps <- s }})
	ctrl, err := controller.New(controller.Config{Kind: "plan", Handler: controller.Plans(r), Store: store})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	run := &planCtlRun{ctrl: ctrl, steps: steps}
	run.stop = func() {
		cancel()
		require.NoError(t, <-done)
	}
	return run
}

// waitDone reads steps until one finishes the plan, then lets the controller
// store it.
func (p *planCtlRun) waitDone(t *testing.T) plan.Step {
	t.Helper()
	for s := range p.steps {
		if s.Done {
			synctest.Wait()
			return s
		}
	}
	t.Fatal("steps closed")
	return plan.Step{}
}

func planAdd(t *testing.T, ctrl *controller.Controller, doc *plan.Document) {
	t.Helper()
	state, data, err := controller.PlanObject(doc)
	require.NoError(t, err)
	require.NoError(t, ctrl.Add(context.Background(), doc.Spec.ID, state, data))
}

// TestPlanControllerAutopilot runs the autopilot example as an object of the
// object controller: the object's state follows the plan's state and every
// transition is in the controller's history.
func TestPlanControllerAutopilot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := converge.NewMemStore()
		bus := planAutoBus(10*time.Second, nil, planNodes()...)
		p := planController(t, store, bus)
		defer p.stop()
		planAdd(t, p.ctrl, planDoc(t, "testdata/plan/autopilot-plan.yaml"))
		last := p.waitDone(t)
		assert.Equal(t, plan.StateCompleted, last.To)

		obj, ok := p.ctrl.Get("id123")
		require.True(t, ok)
		assert.Equal(t, controller.State("Completed"), obj.State)
		doc, err := autopilot.Decode(obj.Data)
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, doc.Status.State)
		assert.Equal(t, []plan.State{plan.StateCompleted, plan.StateCompleted}, planCmdStates(doc.Status))
		assert.Equal(t, map[string]int{"worker0 id123/0/0": 1, "controller0 id123/1/0": 1, "worker0 id123/1/0": 1}, planDeliveries(bus))

		hist, err := p.ctrl.History(context.Background(), "id123")
		require.NoError(t, err)
		var states []string
		for _, h := range hist {
			states = append(states, h.To)
		}
		assert.Equal(t, []string{"NewPlan", "SchedulableWait", "Schedulable", "SchedulableWait", "Schedulable", "SchedulableWait",
			"Schedulable", "SchedulableWait", "Completed"}, states)
		assert.Equal(t, "command 1 (k0supdate): SchedulableWait -> Completed", hist[len(hist)-1].Reason)
	})
}

// TestPlanControllerRetry fails a plan, then retries it through an intent.
func TestPlanControllerRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := converge.NewMemStore()
		bus := planAutoBus(time.Second, func(node string, s autopilot.Signal) (plan.TargetState, string) {
			if node == "w1" && s.Attempt == 0 {
				return plan.TargetApplyFailed, "checksum mismatch"
			}
			return plan.TargetCompleted, ""
		}, planWrk("w0"), planWrk("w1"))
		p := planController(t, store, bus)
		defer p.stop()
		planAdd(t, p.ctrl, planOf(planCmd("update", planGroup("workers", 2, "w0", "w1"))))
		last := p.waitDone(t)
		assert.Equal(t, plan.StateApplyFailed, last.To)
		obj, _ := p.ctrl.Get("p1")
		assert.Equal(t, controller.State("ApplyFailed"), obj.State)
		assert.Equal(t, `command 0 (update): node "w1" failed: checksum mismatch`, obj.Reason)

		require.NoError(t, p.ctrl.Request(context.Background(), "p1", controller.IntentRetry))
		last = p.waitDone(t)
		assert.Equal(t, plan.StateCompleted, last.To)
		assert.Equal(t, map[string]int{"w0 p1/0/0": 1, "w1 p1/0/0": 1, "w1 p1/0/1": 1}, planDeliveries(bus))
		hist, err := p.ctrl.History(context.Background(), "p1")
		require.NoError(t, err)
		found := false
		for _, h := range hist {
			found = found || (h.From == "ApplyFailed" && h.To == "SchedulableWait" && h.Reason == "retry after ApplyFailed")
		}
		assert.True(t, found, "retry in history: %+v", hist)
	})
}

// TestPlanControllerResume stops a controller mid-plan and lets a new one on
// the same Store finish it without signalling any target twice.
func TestPlanControllerResume(t *testing.T) {
	for stopAfter := 1; stopAfter <= 7; stopAfter += 2 {
		synctest.Test(t, func(t *testing.T) {
			store := converge.NewMemStore()
			bus := planAutoBus(10*time.Second, nil, planNodes()...)
			p1 := planController(t, store, bus)
			planAdd(t, p1.ctrl, planDoc(t, "testdata/plan/autopilot-plan.yaml"))
			for range stopAfter {
				<-p1.steps
			}
			p1.stop()

			p2 := planController(t, store, bus)
			defer p2.stop()
			if obj, ok := p2.ctrl.Get("id123"); ok && obj.State == "Completed" {
				return
			}
			p2.waitDone(t)
			obj, ok := p2.ctrl.Get("id123")
			require.True(t, ok)
			assert.Equal(t, controller.State("Completed"), obj.State)
			for k, n := range planDeliveries(bus) {
				assert.Equal(t, 1, n, "signal %s delivered %d times", k, n)
			}
			assert.Len(t, bus.Sent(), 3)
		})
	}
}

// TestPlanObjectData checks the data a controller keeps for a plan.
func TestPlanObjectData(t *testing.T) {
	doc := planDoc(t, "testdata/plan/k0s-shape.yaml")
	state, data, err := controller.PlanObject(doc)
	require.NoError(t, err)
	assert.Equal(t, controller.State("SchedulableWait"), state)
	back, err := autopilot.Decode(data)
	require.NoError(t, err)
	assert.Equal(t, doc, back)

	_, _, err = controller.PlanObject(&plan.Document{})
	require.ErrorIs(t, err, plan.ErrInvalid)
	doc.Status.Commands = append(doc.Status.Commands, plan.CommandStatus{ID: 2, Kind: "extra"})
	_, _, err = controller.PlanObject(doc)
	require.ErrorIs(t, err, plan.ErrStatusMismatch)
}
