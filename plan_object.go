package converge

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// PlanIntentRetry is the intent (see Controller.Request) that asks the plan
// handler to retry a plan stopped in an error state, as PlanRunner.Retry
// does.
const PlanIntentRetry = "retry"

// PlanObjectData returns the lifecycle state and the data under which a
// Controller keeps doc as an object: pass them to Controller.Add with the
// plan's ID as key. The spec (and status, if any) is checked first.
func PlanObjectData(doc *PlanDocument) (LifecycleState, json.RawMessage, error) {
	if err := doc.Spec.Validate(); err != nil {
		return "", nil, err
	}
	if err := planStorable(doc.Spec); err != nil {
		return "", nil, err
	}
	state := PlanNewPlan
	if doc.Status != nil {
		st := doc.Status.Clone()
		if _, err := planReconcileStatus(doc.Spec, st); err != nil {
			return "", nil, err
		}
		state = st.State.normal()
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return "", nil, err
	}
	return LifecycleState(state), b, nil
}

// Handler returns a Handler that runs plans as objects of a Controller: the
// object's data is the plan document, its lifecycle state is the plan's
// state, and each call is one Step. A transition of the plan's state is a
// transition of the object (stored with the history by the controller, and
// stepped again at once); a change of the status without one is stored and
// stepped again at once; a plan whose targets are still working waits
// PollInterval. A plan in an error state stays there until someone queues
// PlanIntentRetry with Controller.Request. Decode and Step errors are
// returned, for the controller to retry with backoff. OnStep is called for
// every step that changed the status, before the controller stores it.
//
// A plan run by a Controller is stored as an Object, not as the bare
// document PlanRunner.Run works on: run a given plan one way or the other.
func (r *PlanRunner) Handler() Handler {
	return HandlerFunc(r.handleObject)
}

func (r *PlanRunner) handleObject(ctx context.Context, obj Object) (HandlerResult, error) {
	doc, err := PlanDecode(obj.Data)
	if err != nil {
		return HandlerResult{}, fmt.Errorf("converge: plan object %q: %w", obj.Key, err)
	}
	if slices.Contains(obj.Intents, PlanIntentRetry) && doc.Status != nil && doc.Status.State.IsError() {
		from := doc.Status.State
		if err := doc.Status.Retry(r.cfg.Now()); err != nil {
			return HandlerResult{}, err
		}
		data, err := json.Marshal(doc)
		if err != nil {
			return HandlerResult{}, err
		}
		return Transition(LifecycleState(doc.Status.State)).WithData(data).Because(fmt.Sprintf("retry after %s", from)), nil
	}
	step, err := r.Step(ctx, doc)
	if err != nil {
		return HandlerResult{}, err
	}
	if !step.Changed {
		if step.Done {
			return NoChange(), nil
		}
		return Wait(planWaitReason(doc.Status)).After(r.cfg.PollInterval), nil
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return HandlerResult{}, err
	}
	if r.cfg.OnStep != nil {
		r.cfg.OnStep(obj.Key, step, doc.Status.Clone())
	}
	if LifecycleState(step.To) != obj.State {
		reason := "plan"
		switch {
		case step.To.IsError():
			reason = doc.Status.Reason
		case step.Command >= 0:
			reason = fmt.Sprintf("command %d (%s): %s -> %s", step.Command, doc.Spec.Commands[step.Command].Kind, step.CommandFrom, step.CommandTo)
		}
		return Transition(LifecycleState(step.To)).WithData(data).Because(reason), nil
	}
	// The status changed within the state: store it and step again now.
	return NoChange().WithData(data).After(time.Nanosecond), nil
}

// planWaitReason says what an unfinished plan waits for.
func planWaitReason(st *PlanStatus) string {
	for i := range st.Commands {
		cs := &st.Commands[i]
		if cs.State == PlanCompleted {
			continue
		}
		var names []string
		for _, g := range planSortedKeys(cs.Targets) {
			for _, t := range cs.Targets[g] {
				if t.State == SignalSent {
					names = append(names, t.Name)
				}
			}
		}
		return fmt.Sprintf("command %d (%s) waits for %v", i, cs.Kind, names)
	}
	return "waiting"
}
