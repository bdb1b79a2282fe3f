package statuspage_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
