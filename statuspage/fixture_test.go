package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/plan"
	"github.com/convergekit/converge/statuspage"
)

// The fleet of the tests: hosts whose key says where they end up.
const (
	stateNew     controller.State = "new"
	stateWaiting controller.State = "waiting"
	stateReady   controller.State = "ready"
)

// fleetKeys are the hosts of the test fleet: "ready-*" become ready,
// "wait-*" wait (above the SLA of waiting), "bad-*" fail until quarantined,
// "term-*" fail with a terminal error.
var fleetKeys = []string{"ready-1", "ready-2", "ready-3", "wait-1", "wait-2", "bad-1", "term-1", "ready-a/b", "<script>alert(1)</script>"}

var errDisk = errors.New("disk failed")

// fleet is a controller that ran its objects to where fleetKeys says, and
// stopped: the page shows what it left.
func fleet(t *testing.T) *controller.Controller {
	t.Helper()
	var (
		mu   sync.Mutex
		done = map[string]bool{}
		all  = make(chan struct{})
	)
	finish := func(key string) {
		mu.Lock()
		defer mu.Unlock()
		if !done[key] {
			done[key] = true
			if len(done) == len(fleetKeys) {
				close(all)
			}
		}
	}
	handler := controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
		switch {
		case strings.HasPrefix(o.Key, "bad-"):
			if o.Retries == 1 {
				defer finish(o.Key)
			}
			return controller.Result{}, errDisk
		case strings.HasPrefix(o.Key, "term-"):
			defer finish(o.Key)
			return controller.Result{}, controller.Terminal(errDisk)
		case strings.HasPrefix(o.Key, "wait-"):
			if o.State == stateNew {
				return controller.Transition(stateWaiting).Because("accepted"), nil
			}
			finish(o.Key)
			return controller.Wait("agent busy"), nil
		default:
			if o.State == stateNew {
				return controller.Transition(stateReady).Because("agent reported"), nil
			}
			finish(o.Key)
			return controller.NoChange(), nil
		}
	})
	c, err := controller.New(controller.Config{
		Kind:            "host",
		Handler:         handler,
		Backoff:         converge.Backoff{Base: time.Microsecond, Max: time.Millisecond},
		SLA:             map[controller.State]time.Duration{stateWaiting: time.Nanosecond},
		QuarantineAfter: 2,
	})
	require.NoError(t, err)
	for _, k := range fleetKeys {
		prio := 0
		if k == "ready-1" {
			prio = 7
		}
		require.NoError(t, c.AddObject(t.Context(), controller.NewObject{Key: k, State: stateNew, Data: fleetData, Priority: prio}))
	}
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	select {
	case <-all:
	case <-t.Context().Done():
	}
	cancel()
	require.NoError(t, <-stopped)
	return c
}

// planAt is when the targets of the test plans last changed.
var planAt = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// plans is a runner with two stored plans: "rollout" failed on its second
// worker, "canary" is running.
func plans(t *testing.T) (*plan.Runner, converge.Store) {
	t.Helper()
	store := converge.NewMemStore()
	r, err := plan.NewRunner(store, plan.RunnerConfig{})
	require.NoError(t, err)
	at := planAt
	doc := func(id string, st plan.State, reason string, targets ...plan.TargetStatus) *plan.Document {
		names := make([]string, len(targets))
		for i, tg := range targets {
			names[i] = tg.Name
		}
		return &plan.Document{
			Spec: plan.Plan{ID: id, Commands: []plan.Command{{
				Kind:    "update",
				Targets: []plan.CommandTargets{{Group: "workers", Discovery: plan.CommandDiscovery{Static: names}}},
			}}},
			Status: &plan.Status{State: st, Reason: reason, Commands: []plan.CommandStatus{{
				ID: 0, Kind: "update", State: st, Reason: reason, Started: at,
				Targets: map[string][]plan.TargetStatus{"workers": targets},
			}}},
		}
	}
	require.NoError(t, r.Create(t.Context(), doc("rollout", plan.StateApplyFailed, "w2 failed",
		plan.TargetStatus{Name: "w1", State: plan.TargetCompleted, LastUpdatedTimestamp: at},
		plan.TargetStatus{Name: "w2", State: plan.TargetApplyFailed, Reason: "disk full", LastUpdatedTimestamp: at},
	)))
	require.NoError(t, r.Create(t.Context(), doc("canary", plan.StateSchedulableWait, "",
		plan.TargetStatus{Name: "c1", State: plan.TargetSent, LastUpdatedTimestamp: at},
		plan.TargetStatus{Name: "c2", State: plan.TargetPending, LastUpdatedTimestamp: at},
	)))
	return r, store
}

// newHandler is the page of the test fleet and plans.
func newHandler(t *testing.T, actions bool) (*statuspage.Handler, *controller.Controller, *plan.Runner) {
	t.Helper()
	return newHandlerWith(t, actions, nil)
}

// newHandlerWith is newHandler with its options changed by tune (when not
// nil).
func newHandlerWith(t *testing.T, actions bool, tune func(*statuspage.Options)) (*statuspage.Handler, *controller.Controller, *plan.Runner) {
	t.Helper()
	c := fleet(t)
	r, store := plans(t)
	opts := statuspage.Options{
		Title:       "test fleet",
		Controllers: []statuspage.Controller{{Controller: c, States: []controller.State{stateNew, stateWaiting, stateReady}}},
		Plans:       r,
		PlanIDs:     statuspage.StorePlanIDs(store),
		Actions:     actions,
		Authorizer:  testAuthorizer,
	}
	if tune != nil {
		tune(&opts)
	}
	h, err := statuspage.New(opts)
	require.NoError(t, err)
	return h, c, r
}

// errRefused is testAuthorizer's refusal.
var errRefused = errors.New("refused")

// testAuthorizer names the viewer by the X-User header ("admin" when it
// is absent): "admin" may do everything, "viewer" and "alice" may read
// and release, "bob" may read and abort; anyone else may do nothing.
func testAuthorizer(r *http.Request, a statuspage.Action) (string, error) {
	who := r.Header.Get("X-User")
	if who == "" {
		who = "admin"
	}
	allowed := map[string][]statuspage.Action{
		"admin":  {statuspage.ActionRead, statuspage.ActionRetry, statuspage.ActionAbort, statuspage.ActionRelease},
		"viewer": {statuspage.ActionRead},
		"alice":  {statuspage.ActionRead, statuspage.ActionRelease},
		"bob":    {statuspage.ActionRead, statuspage.ActionAbort},
		"carol":  {statuspage.ActionRead, statuspage.ActionCancel},
	}
	if slices.Contains(allowed[who], a) {
		return who, nil
	}
	return "", errRefused
}

// fleetData is the data of every host of the test fleet.
var fleetData = json.RawMessage(`{"password":"hunter2"}`)
