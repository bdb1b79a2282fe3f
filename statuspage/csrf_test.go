package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/plan"
	"github.com/convergekit/converge/statuspage"
)

// actionsOf reads the actions a view offers the viewer who.
func actionsOf(t *testing.T, h http.Handler, who, path string) []statuspage.ActionView {
	t.Helper()
	rec := as(h, who, http.MethodGet, path, nil, true)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var v struct {
		Actions []statuspage.ActionView `json:"actions"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	return v.Actions
}

func TestCSRFTokenIsBoundToTheViewer(t *testing.T) {
	h, c, _ := newHandler(t, true)
	// admin's token, posted by alice, whom the Authorizer allows to release.
	admin := actionsOf(t, h, "admin", "/controllers/host/objects/bad-1")
	require.Len(t, admin, 1)
	rec := as(h, "alice", http.MethodPost, "/"+admin[0].Path, url.Values{"csrf": {admin[0].Token}}, true)
	assert.Equal(t, http.StatusForbidden, rec.Code, "another viewer's token")
	o, _ := c.Get("bad-1")
	assert.Equal(t, controller.HaltQuarantined, o.Halted, "nothing was released")

	alice := actionsOf(t, h, "alice", "/controllers/host/objects/bad-1")
	require.Len(t, alice, 1)
	assert.NotEqual(t, admin[0].Token, alice[0].Token)
	rec = as(h, "alice", http.MethodPost, "/"+alice[0].Path, url.Values{"csrf": {alice[0].Token}}, true)
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

func TestCSRFTokenIsUsedOnce(t *testing.T) {
	h, _, r := newHandler(t, true)
	abort := actionsOf(t, h, "bob", "/plans/canary")
	require.Len(t, abort, 1)
	rec := as(h, "bob", http.MethodPost, "/"+abort[0].Path, url.Values{"csrf": {abort[0].Token}, "reason": {"first"}}, true)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	rec = as(h, "bob", http.MethodPost, "/"+abort[0].Path, url.Values{"csrf": {abort[0].Token}, "reason": {"replayed"}}, true)
	assert.Equal(t, http.StatusForbidden, rec.Code, "a replayed token")
	doc, _, err := r.Get(t.Context(), "canary")
	require.NoError(t, err)
	assert.Equal(t, "first", doc.Status.Abort, "the replay did nothing")
}

func TestCSRFTokenExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, store := plans(t)
		h, err := statuspage.New(statuspage.Options{
			Plans: r, PlanIDs: statuspage.StorePlanIDs(store),
			Actions: true, Authorizer: testAuthorizer, TokenTTL: time.Minute,
		})
		require.NoError(t, err)
		fresh := actionsOf(t, h, "admin", "/plans/canary")
		stale := actionsOf(t, h, "admin", "/plans/rollout")
		require.Len(t, fresh, 1)
		require.Len(t, stale, 1)
		time.Sleep(59 * time.Second) // the fake clock of the bubble
		rec := as(h, "admin", http.MethodPost, "/"+fresh[0].Path, url.Values{"csrf": {fresh[0].Token}}, true)
		assert.Equal(t, http.StatusOK, rec.Code, "a token just before it expires: %s", rec.Body.String())
		time.Sleep(time.Second)
		rec = as(h, "admin", http.MethodPost, "/"+stale[0].Path, url.Values{"csrf": {stale[0].Token}}, true)
		assert.Equal(t, http.StatusForbidden, rec.Code, "an expired token")
		doc, _, err := r.Get(t.Context(), "rollout")
		require.NoError(t, err)
		assert.Equal(t, plan.StateApplyFailed, doc.State(), "nothing was retried")
	})
}

// errFlaky is the error of a store write that fails once.
var errFlaky = errors.New("store write failed")

// flakyStore is a store whose next Put fails when failNext is set.
type flakyStore struct {
	converge.Store
	failNext atomic.Bool
}

func (s *flakyStore) Put(ctx context.Context, rec converge.StoreRecord, hist ...converge.HistoryEntry) (uint64, error) {
	if s.failNext.CompareAndSwap(true, false) {
		return 0, errFlaky
	}
	return s.Store.Put(ctx, rec, hist...)
}

// replicas are two pages on one fleet and one plan store sharing a
// secret, as two replicas of a program (or one before and after a
// restart) are.
func replicas(t *testing.T) (h1, h2 *statuspage.Handler, c *controller.Controller, r *plan.Runner, store converge.Store) {
	t.Helper()
	c = fleet(t)
	r, store = plans(t)
	secret := []byte("a secret both replicas share")
	hs := make([]*statuspage.Handler, 2)
	for i := range hs {
		var err error
		hs[i], err = statuspage.New(statuspage.Options{
			Controllers: []statuspage.Controller{{Controller: c}},
			Plans:       r, PlanIDs: statuspage.StorePlanIDs(store),
			Actions: true, Authorizer: testAuthorizer, Secret: secret,
		})
		require.NoError(t, err)
	}
	return hs[0], hs[1], c, r, store
}

// failAgain runs plan id until it stops in an error state: its first
// target fails.
func failAgain(t *testing.T, store converge.Store, id string) {
	t.Helper()
	fail := func(_ context.Context, c *plan.CommandContext) (plan.State, error) {
		for g, ts := range c.Status.Targets {
			c.SetTarget(g, ts[0].Name, plan.TargetApplyFailed, "failed again")
			break
		}
		return plan.StateApplyFailed, nil
	}
	r, err := plan.NewRunner(store, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{
		"update": plan.CommandHandlerFuncs{NewPlanFunc: fail, SchedulableWaitFunc: fail, SchedulableFunc: fail},
	}})
	require.NoError(t, err)
	_, err = r.Run(t.Context(), id)
	require.ErrorIs(t, err, plan.ErrFailed)
}

func TestCSRFTokenIsGoodOnceAcrossHandlersSharingTheSecret(t *testing.T) {
	tests := []struct {
		name, page string
		// again brings back what the action is offered for, as the
		// program may (the plan fails again, the program retries it).
		again func(t *testing.T, r *plan.Runner, store converge.Store)
		// history reads the history of what the action changes.
		history func(t *testing.T, c *controller.Controller, r *plan.Runner) []converge.HistoryEntry
	}{
		{"release", "/controllers/host/objects/bad-1", nil, func(t *testing.T, c *controller.Controller, _ *plan.Runner) []converge.HistoryEntry {
			h, err := c.History(t.Context(), "bad-1")
			require.NoError(t, err)
			return h
		}},
		{"retry", "/plans/rollout", func(t *testing.T, _ *plan.Runner, store converge.Store) {
			failAgain(t, store, "rollout")
		}, func(t *testing.T, _ *controller.Controller, r *plan.Runner) []converge.HistoryEntry {
			h, err := r.History(t.Context(), "rollout")
			require.NoError(t, err)
			return h
		}},
		{"abort", "/plans/canary", func(t *testing.T, r *plan.Runner, store converge.Store) {
			failAgain(t, store, "canary")
			require.NoError(t, r.Retry(t.Context(), "canary"))
		}, func(t *testing.T, _ *controller.Controller, r *plan.Runner) []converge.HistoryEntry {
			h, err := r.History(t.Context(), "canary")
			require.NoError(t, err)
			return h
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h1, h2, c, r, store := replicas(t)
			offered := actionsOf(t, h1, "admin", tt.page)
			require.Len(t, offered, 1)
			require.Equal(t, tt.name, offered[0].Name)
			form := url.Values{"csrf": {offered[0].Token}}
			before := len(tt.history(t, c, r))

			rec := as(h1, "admin", http.MethodPost, "/"+offered[0].Path, form, true)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Greater(t, len(tt.history(t, c, r)), before, "the action stored its history")
			if tt.again != nil {
				tt.again(t, r, store)
				require.Len(t, actionsOf(t, h2, "admin", tt.page), 1, "the action is offered again")
			}
			done := tt.history(t, c, r)

			for i, h := range []http.Handler{h2, h1} {
				rec = as(h, "admin", http.MethodPost, "/"+offered[0].Path, form, true)
				assert.Contains(t, []int{http.StatusForbidden, http.StatusConflict}, rec.Code, "replay %d: %s", i, rec.Body.String())
				assert.Equal(t, done, tt.history(t, c, r), "replay %d did nothing", i)
			}
		})
	}
}

func TestCSRFTokenOfAFailedActionStaysGoodOnce(t *testing.T) {
	store := &flakyStore{Store: converge.NewMemStore()}
	seed, _ := plans(t)
	r, err := plan.NewRunner(store, plan.RunnerConfig{})
	require.NoError(t, err)
	doc, _, err := seed.Get(t.Context(), "rollout")
	require.NoError(t, err)
	require.NoError(t, r.Create(t.Context(), doc))
	secret := []byte("a secret both replicas share")
	var hs []http.Handler
	for range 2 {
		h, err := statuspage.New(statuspage.Options{Plans: r, Actions: true, Authorizer: testAuthorizer, Secret: secret})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	retry := actionsOf(t, hs[0], "admin", "/plans/rollout")
	require.Len(t, retry, 1)
	form := url.Values{"csrf": {retry[0].Token}}

	store.failNext.Store(true)
	rec := as(hs[0], "admin", http.MethodPost, "/"+retry[0].Path, form, true)
	require.Equal(t, http.StatusInternalServerError, rec.Code, rec.Body.String())
	doc, _, err = r.Get(t.Context(), "rollout")
	require.NoError(t, err)
	require.Equal(t, plan.StateApplyFailed, doc.State(), "the failed retry changed nothing")

	for i, h := range hs {
		rec = as(h, "admin", http.MethodPost, "/"+retry[0].Path, form, true)
		if i == 0 {
			require.Equal(t, http.StatusOK, rec.Code, "the token of the failed retry works: %s", rec.Body.String())
			continue
		}
		assert.Equal(t, http.StatusConflict, rec.Code, "and only once, on either page: %s", rec.Body.String())
	}
	doc, _, err = r.Get(t.Context(), "rollout")
	require.NoError(t, err)
	assert.False(t, doc.State().IsError(), "retried: %s", doc.State())
}

func TestPagesWithActionsSurviveAForeignRecord(t *testing.T) {
	store := converge.NewMemStore()
	c, err := controller.New(controller.Config{Kind: "host", Store: store, Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
		return controller.NoChange(), nil
	})})
	require.NoError(t, err)
	require.NoError(t, c.Add(t.Context(), "h1", stateNew, nil))
	// h1 quarantined, as a replica stored it.
	rec, err := store.Get(t.Context(), "host/h1")
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(rec.Value, &obj))
	obj["halted"] = string(controller.HaltQuarantined)
	rec.Value, err = json.Marshal(obj)
	require.NoError(t, err)
	_, err = store.Put(t.Context(), rec)
	require.NoError(t, err)
	// Another program's record under the controller's kind: the store
	// cannot be listed whole as objects.
	_, err = store.Put(t.Context(), converge.StoreRecord{Key: "host/foreign", Value: []byte(`[1, 2]`)})
	require.NoError(t, err)
	_, err = c.StoredObjects(t.Context())
	require.Error(t, err)
	h, err := statuspage.New(statuspage.Options{Controllers: []statuspage.Controller{{Controller: c}}, Actions: true, Authorizer: testAuthorizer})
	require.NoError(t, err)
	for _, path := range []string{"/", "/controllers/host", "/controllers/host/objects/h1"} {
		code, body := get(t, h, path, true)
		assert.Equal(t, http.StatusOK, code, "%s: %s", path, body)
	}
	// The quarantined object is still released, once.
	items := attention(t, h, "admin")
	require.Equal(t, []string{"h1: " + statuspage.ProblemQuarantined + " [release]"}, problems(items))
	form := url.Values{"csrf": {items[0].Actions[0].Token}}
	rec2 := as(h, "admin", http.MethodPost, "/"+items[0].Actions[0].Path, form, true)
	require.Equal(t, http.StatusOK, rec2.Code, rec2.Body.String())
	rec2 = as(h, "admin", http.MethodPost, "/"+items[0].Actions[0].Path, form, true)
	assert.Equal(t, http.StatusForbidden, rec2.Code, rec2.Body.String())
	qs, err := c.Quarantined(t.Context())
	require.NoError(t, err)
	assert.Empty(t, qs, "released")
}
