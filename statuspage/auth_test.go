package statuspage_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/statuspage"
)

// as sends a request as the viewer who (see testAuthorizer).
func as(h http.Handler, who, method, path string, form url.Values, asJSON bool) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	if form != nil {
		req = httptest.NewRequest(method, path, stringsReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("X-User", who)
	if asJSON {
		req.Header.Set("Accept", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestNewRefusesActionsWithoutAnAuthorizer(t *testing.T) {
	_, err := statuspage.New(statuspage.Options{Actions: true})
	var ae *statuspage.ActionsError
	require.ErrorAs(t, err, &ae)
	assert.ErrorIs(t, err, statuspage.ErrActionsNeedAuthorizer)
	assert.ErrorIs(t, err, converge.ErrInvalidConfig)
}

func TestAuthorizerIsAskedForEveryRead(t *testing.T) {
	h, _, _ := newHandler(t, true)
	for _, path := range []string{"/", "/controllers/host", "/controllers/host/states/ready", "/controllers/host/objects/bad-1", "/plans", "/plans/rollout", "/no/such/page"} {
		t.Run(path, func(t *testing.T) {
			rec := as(h, "mallory", http.MethodGet, path, nil, true)
			require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var ev statuspage.ErrorView
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &ev))
			assert.Equal(t, http.StatusForbidden, ev.Status)
			assert.NotContains(t, rec.Body.String(), "host", "a refused viewer sees nothing of the fleet")

			rec = as(h, "mallory", http.MethodGet, path, nil, false)
			assert.Equal(t, http.StatusForbidden, rec.Code)
			assert.Contains(t, rec.Header().Get("Content-Type"), "text/html")
		})
	}
	rec := as(h, "viewer", http.MethodGet, "/controllers/host/objects/bad-1", nil, false)
	assert.Equal(t, http.StatusOK, rec.Code, "a viewer may read")
}

func TestAuthorizerIsAskedForEveryAction(t *testing.T) {
	h, c, r := newHandler(t, true)
	var obj statuspage.ObjectView
	getJSON(t, h, "/controllers/host/objects/bad-1", &obj)
	require.Len(t, obj.Actions, 1)
	var plan statuspage.PlanView
	getJSON(t, h, "/plans/canary", &plan)
	require.Len(t, plan.Actions, 1)

	// Valid tokens, rendered for admin, posted by viewers the Authorizer
	// refuses these actions.
	for _, who := range []string{"viewer", "mallory", "bob"} {
		rec := as(h, who, http.MethodPost, "/"+obj.Actions[0].Path, url.Values{"csrf": {obj.Actions[0].Token}}, true)
		assert.Equal(t, http.StatusForbidden, rec.Code, who)
	}
	for _, who := range []string{"viewer", "mallory", "alice"} {
		rec := as(h, who, http.MethodPost, "/"+plan.Actions[0].Path, url.Values{"csrf": {plan.Actions[0].Token}}, true)
		assert.Equal(t, http.StatusForbidden, rec.Code, who)
	}
	o, _ := c.Get("bad-1")
	assert.Equal(t, controller.HaltQuarantined, o.Halted, "nothing was released")
	doc, _, err := r.Get(t.Context(), "canary")
	require.NoError(t, err)
	assert.Empty(t, doc.Status.Abort, "nothing was aborted")
}

func TestActionsAreOfferedOnlyToViewersAllowedThem(t *testing.T) {
	h, _, _ := newHandler(t, true)
	for _, who := range []string{"viewer", "bob"} {
		rec := as(h, who, http.MethodGet, "/controllers/host/objects/bad-1", nil, true)
		require.Equal(t, http.StatusOK, rec.Code)
		var v statuspage.ObjectView
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
		assert.Empty(t, v.Actions, who)
		assert.NotContains(t, rec.Body.String(), "token", who)
		html := as(h, who, http.MethodGet, "/controllers/host/objects/bad-1", nil, false).Body.String()
		assert.NotContains(t, html, `name="csrf"`, who)
	}
	rec := as(h, "alice", http.MethodGet, "/controllers/host/objects/bad-1", nil, true)
	var v statuspage.ObjectView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	require.Len(t, v.Actions, 1)
	assert.Equal(t, "release", v.Actions[0].Name)
	assert.NotEmpty(t, v.Actions[0].Token)
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
