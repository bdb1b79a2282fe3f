package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/convergekit/converge/plan"
)

// IntentRetry is the intent (see Controller.Request) that asks the handler
// made by Plans to retry a plan stopped in an error state, as
// plan.Runner.Retry does for a plan it runs itself.
const IntentRetry = "retry"

// PlanObject returns the lifecycle state and the data under which a
// Controller keeps doc as an object: pass them to Controller.Add with the
// plan's ID as key. doc is checked first (see plan.Document.Validate);
// the checks of the command handlers (autopilot's check of k0s versions, for
// example) are plan.Runner.Validate's: call it too for a plan built
// in Go (autopilot.Decode makes them for documents).
func PlanObject(doc *plan.Document) (State, json.RawMessage, error) {
	if err := doc.Validate(); err != nil {
		return "", nil, err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return "", nil, err
	}
	return State(doc.State()), b, nil
}

// Plans returns a Handler that runs plans as objects of a Controller with
// r: the object's data is the plan document (see PlanObject), its lifecycle
// state is the plan's state, and each call is one r.Step. A transition of
// the plan's state is a transition of the object (stored with the history
// by the controller, and stepped again at once); a change of the status
// without one is stored and stepped again at once; a plan whose targets are
// still working waits r's PollInterval. A plan in an error state stays there
// until someone queues IntentRetry with Controller.Request. Decode and Step
// errors are returned, for the controller to retry with backoff. r's OnStep
// is called for every step that changed the status, before the controller
// stores it.
//
// A plan run by a Controller is stored as an Object, not as the bare
// document plan.Runner.Run works on: run a given plan one way or
// the other.
func Plans(r *plan.Runner) Handler {
	return HandlerFunc(func(ctx context.Context, obj Object) (Result, error) {
		return handlePlan(ctx, r, obj)
	})
}

func handlePlan(ctx context.Context, r *plan.Runner, obj Object) (Result, error) {
	cfg := r.Config()
	var doc plan.Document
	if err := json.Unmarshal(obj.Data, &doc); err != nil {
		return Result{}, fmt.Errorf("controller: plan object %q: %w", obj.Key, err)
	}
	if slices.Contains(obj.Intents, IntentRetry) && doc.Status != nil && doc.Status.State.IsError() {
		from := doc.Status.State
		if err := doc.Status.Retry(cfg.Now()); err != nil {
			return Result{}, err
		}
		data, err := json.Marshal(&doc)
		if err != nil {
			return Result{}, err
		}
		return Transition(State(doc.Status.State)).WithData(data).Because(fmt.Sprintf("retry after %s", from)), nil
	}
	step, err := r.Step(ctx, &doc)
	if err != nil {
		return Result{}, err
	}
	if !step.Changed {
		if step.Done {
			return NoChange(), nil
		}
		return Wait(planWaitReason(doc.Status)).After(cfg.PollInterval), nil
	}
	data, err := json.Marshal(&doc)
	if err != nil {
		return Result{}, err
	}
	if cfg.OnStep != nil {
		cfg.OnStep(obj.Key, step, doc.Status.Clone())
	}
	if State(step.To) != obj.State {
		reason := "plan"
		switch {
		case step.To.IsError():
			reason = doc.Status.Reason
		case step.Command >= 0:
			reason = fmt.Sprintf("command %d (%s): %s -> %s", step.Command, doc.Spec.Commands[step.Command].Kind, step.CommandFrom, step.CommandTo)
		}
		return Transition(State(step.To)).WithData(data).Because(reason), nil
	}
	// The status changed within the state: store it and step again now.
	return NoChange().WithData(data).After(time.Nanosecond), nil
}

// planWaitReason says what an unfinished plan waits for.
func planWaitReason(st *plan.Status) string {
	for i := range st.Commands {
		cs := &st.Commands[i]
		if cs.State == plan.StateCompleted {
			continue
		}
		var names []string
		for _, g := range slices.Sorted(maps.Keys(cs.Targets)) {
			for _, t := range cs.Targets[g] {
				if t.State == plan.TargetSent {
					names = append(names, t.Name)
				}
			}
		}
		return fmt.Sprintf("command %d (%s) waits for %v", i, cs.Kind, names)
	}
	return "waiting"
}
