package statuspage_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/plan"
	"github.com/convergekit/converge/statuspage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// get asks h for path, as JSON when asJSON.
func get(t *testing.T, h http.Handler, path string, asJSON bool) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if asJSON {
		req.Header.Set("Accept", "application/json")
	} else {
		req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	if asJSON && rec.Code == http.StatusOK {
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	}
	return rec.Code, string(body)
}

// getJSON decodes the JSON view at path into v, strictly.
func getJSON(t *testing.T, h http.Handler, path string, v any) {
	t.Helper()
	code, body := get(t, h, path, true)
	require.Equal(t, http.StatusOK, code, body)
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), body)
}

func TestEveryViewShowsItsDataAsHTMLAndJSON(t *testing.T) {
	h, _, _ := newHandler(t, false)
	tests := []struct {
		path  string
		html  []string
		check func(t *testing.T)
	}{
		{"/", []string{"test fleet", `href="./controllers/host"`, ">waiting<", `href="./plans/rollout"`, "w2 failed"}, func(t *testing.T) {
			var v statuspage.OverviewView
			getJSON(t, h, "/", &v)
			require.Len(t, v.Controllers, 1)
			c := v.Controllers[0]
			assert.Equal(t, "host", c.Kind)
			assert.Equal(t, len(fleetKeys), c.Objects)
			assert.Equal(t, []statuspage.StateCount{
				{State: "new", Objects: 2, Halted: 2},
				{State: "waiting", Objects: 2, AboveSLA: 2},
				{State: "ready", Objects: 5},
			}, c.States)
			assert.Equal(t, 1, c.Quarantined)
			assert.Equal(t, 1, c.Terminal)
			assert.Equal(t, 2, c.AboveSLA)
			require.Len(t, v.Plans, 2)
			assert.Equal(t, "canary", v.Plans[0].ID)
			assert.Equal(t, statuspage.PlanSummary{ID: "rollout", State: "ApplyFailed", Reason: "w2 failed", Commands: 1, Active: 0, Targets: 2, Completed: 1, Failed: 1,
				Updated: v.Plans[1].Updated}, v.Plans[1])
			assert.True(t, planAt.Equal(v.Plans[1].Updated), "updated when its targets last changed: %s", v.Plans[1].Updated)
		}},
		{"/controllers/host", []string{"bad-1", "term-1", "wait-1", "disk failed", `href="../controllers/host/objects/bad-1"`}, func(t *testing.T) {
			var v statuspage.ControllerView
			getJSON(t, h, "/controllers/host", &v)
			require.Len(t, v.QuarantinedObjects, 1)
			q := v.QuarantinedObjects[0]
			assert.Equal(t, "bad-1", q.Key)
			assert.Equal(t, "quarantined", q.Halted)
			assert.Equal(t, 2, q.Retries)
			require.NotNil(t, q.LastError)
			assert.Equal(t, "disk failed", q.LastError.Error)
			require.Len(t, v.TerminalObjects, 1)
			assert.Equal(t, "term-1", v.TerminalObjects[0].Key)
			require.Len(t, v.AboveSLAObjects, 2)
			assert.Equal(t, "wait-1", v.AboveSLAObjects[0].Key)
		}},
		{"/controllers/host/states/ready", []string{"ready-1", "ready-3", `href="../../../controllers/host/objects/ready-a%2Fb"`}, func(t *testing.T) {
			var v statuspage.StateView
			getJSON(t, h, "/controllers/host/states/ready", &v)
			keys := []string{}
			for _, o := range v.Objects {
				keys = append(keys, o.Key)
			}
			assert.Equal(t, []string{"<script>alert(1)</script>", "ready-1", "ready-2", "ready-3", "ready-a/b"}, keys)
		}},
		{"/controllers/host/objects/ready-a%2Fb", []string{"ready-a/b", "agent reported", ">ready<"}, func(t *testing.T) {
			var v statuspage.ObjectView
			getJSON(t, h, "/controllers/host/objects/ready-a%2Fb", &v)
			assert.Equal(t, "ready-a/b", v.Key)
			assert.Equal(t, "ready", v.State)
			require.Len(t, v.History, 2)
			assert.Equal(t, "new", v.History[1].From)
			assert.Equal(t, "ready", v.History[1].To)
			assert.Equal(t, "agent reported", v.History[1].Reason)
			assert.Empty(t, v.Actions, "read-only")
			assert.Empty(t, v.RecentFailures, "never failed")
			assert.True(t, v.FailingSince.IsZero())
			assert.Zero(t, v.Priority)
		}},
		{"/controllers/host/objects/ready-1", []string{`<td id="priority">7</td>`}, func(t *testing.T) {
			var v statuspage.ObjectView
			getJSON(t, h, "/controllers/host/objects/ready-1", &v)
			assert.Equal(t, 7, v.Priority)
		}},
		{"/controllers/host/objects/bad-1", []string{"Recent failures", `id="recent-failures"`, "failing since", "disk failed"}, func(t *testing.T) {
			var v statuspage.ObjectView
			getJSON(t, h, "/controllers/host/objects/bad-1", &v)
			require.Len(t, v.RecentFailures, 2, "both failed runs, oldest first")
			for _, f := range v.RecentFailures {
				assert.Equal(t, statuspage.FailureView{At: f.At, State: "new", Error: "disk failed"}, f)
			}
			assert.False(t, v.RecentFailures[1].At.Before(v.RecentFailures[0].At), "oldest first")
			assert.True(t, v.RecentFailures[0].At.Equal(v.FailingSince), "failing since the first failure: %s", v.FailingSince)
		}},
		{"/plans", []string{"rollout", "canary", "1/2"}, func(t *testing.T) {
			var v statuspage.PlansView
			getJSON(t, h, "/plans", &v)
			require.Len(t, v.Plans, 2)
		}},
		{"/plans/rollout", []string{"rollout", "disk full", "SignalApplyFailed", "SignalCompleted", "workers"}, func(t *testing.T) {
			var v statuspage.PlanView
			getJSON(t, h, "/plans/rollout", &v)
			assert.Equal(t, "ApplyFailed", v.State)
			require.Len(t, v.CommandViews, 1)
			cmd := v.CommandViews[0]
			assert.Equal(t, "update", cmd.Kind)
			require.NotNil(t, cmd.Started)
			require.Len(t, cmd.Groups, 1)
			assert.Equal(t, "workers", cmd.Groups[0].Name)
			require.Len(t, cmd.Groups[0].Targets, 2)
			assert.Equal(t, statuspage.PlanTargetView{Name: "w2", State: "SignalApplyFailed", Reason: "disk full", LastUpdated: cmd.Groups[0].Targets[1].LastUpdated}, cmd.Groups[0].Targets[1])
			assert.NotNil(t, v.History)
			assert.Empty(t, v.Actions, "read-only")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, body := get(t, h, tt.path, false)
			require.Equal(t, http.StatusOK, code, body)
			for _, s := range tt.html {
				assert.Contains(t, body, s)
			}
			tt.check(t)
		})
	}
}

func TestUnknownThingsAre404(t *testing.T) {
	h, _, _ := newHandler(t, false)
	for _, path := range []string{"/nothing", "/controllers/vm", "/controllers/host/objects/nope", "/plans/nope", "/targets/device"} {
		t.Run(path, func(t *testing.T) {
			code, body := get(t, h, path, true)
			assert.Equal(t, http.StatusNotFound, code, body)
		})
	}
}

func TestObjectKeyIsEscaped(t *testing.T) {
	h, _, _ := newHandler(t, false)
	key := "<script>alert(1)</script>"
	for _, path := range []string{"/controllers/host/states/ready", "/controllers/host/objects/" + url.PathEscape(key)} {
		t.Run(path, func(t *testing.T) {
			code, body := get(t, h, path, false)
			require.Equal(t, http.StatusOK, code, body)
			assert.NotContains(t, body, "<script>")
			assert.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
		})
	}
	_, body := get(t, h, "/controllers/host/states/ready", false)
	assert.Contains(t, body, `href="../../../controllers/host/objects/%3Cscript%3Ealert%281%29%3C%2Fscript%3E"`, "the key is path-escaped in the link")
}

// csrfToken finds the token of the form posting to action in body.
func csrfToken(t *testing.T, body, action string) string {
	t.Helper()
	re := regexp.MustCompile(`<form method="post" action="` + regexp.QuoteMeta(action) + `"><input type="hidden" name="csrf" value="([^"]+)">`)
	m := re.FindStringSubmatch(body)
	require.NotNil(t, m, "no form for %s in\n%s", action, body)
	return m[1]
}

// post sends form to path as a browser on the page's origin would.
func post(h http.Handler, path string, form url.Values, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestActionsNeedAValidCSRFToken(t *testing.T) {
	h, c, r := newHandler(t, true)
	_, page := get(t, h, "/controllers/host/objects/bad-1", false)
	release := csrfToken(t, page, "../../../controllers/host/objects/bad-1/release")
	_, planPage := get(t, h, "/plans/rollout", false)
	retry := csrfToken(t, planPage, "../plans/rollout/retry")

	tests := []struct {
		name   string
		path   string
		form   url.Values
		header map[string]string
	}{
		{"missing token", "/controllers/host/objects/bad-1/release", url.Values{}, nil},
		{"bad token", "/controllers/host/objects/bad-1/release", url.Values{"csrf": {release + "x"}}, nil},
		{"token of another object", "/controllers/host/objects/term-1/release", url.Values{"csrf": {release}}, nil},
		{"token of another action", "/plans/rollout/abort", url.Values{"csrf": {retry}}, nil},
		{"cross-site request", "/controllers/host/objects/bad-1/release", url.Values{"csrf": {release}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"foreign origin", "/controllers/host/objects/bad-1/release", url.Values{"csrf": {release}}, map[string]string{"Origin": "https://evil.example"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := post(h, tt.path, tt.form, tt.header)
			assert.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
		})
	}
	o, _ := c.Get("bad-1")
	assert.Equal(t, controller.HaltQuarantined, o.Halted, "nothing was released")
	doc, _, err := r.Get(t.Context(), "rollout")
	require.NoError(t, err)
	assert.Equal(t, plan.StateApplyFailed, doc.State(), "nothing was retried")

	t.Run("valid token releases", func(t *testing.T) {
		rec := post(h, "/controllers/host/objects/bad-1/release", url.Values{"csrf": {release}}, map[string]string{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"})
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		assert.Equal(t, "../bad-1", rec.Header().Get("Location"))
		qs, err := c.Quarantined(t.Context())
		require.NoError(t, err)
		assert.Empty(t, qs)
	})
	t.Run("valid token retries", func(t *testing.T) {
		rec := post(h, "/plans/rollout/retry", url.Values{"csrf": {retry}}, nil)
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		doc, _, err := r.Get(t.Context(), "rollout")
		require.NoError(t, err)
		assert.Equal(t, plan.StateSchedulableWait, doc.State())
		rec = post(h, "/plans/rollout/retry", url.Values{"csrf": {retry}}, nil)
		assert.Equal(t, http.StatusForbidden, rec.Code, "a token is used once")
	})
	t.Run("valid token aborts", func(t *testing.T) {
		_, page := get(t, h, "/plans/canary", false)
		abort := csrfToken(t, page, "../plans/canary/abort")
		rec := post(h, "/plans/canary/abort", url.Values{"csrf": {abort}, "reason": {"bad canary"}}, nil)
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		doc, _, err := r.Get(t.Context(), "canary")
		require.NoError(t, err)
		assert.Equal(t, "bad canary", doc.Status.Abort)
	})
}

func TestActionsAreOffByDefault(t *testing.T) {
	h, c, r := newHandler(t, false)
	_, page := get(t, h, "/controllers/host/objects/bad-1", false)
	assert.NotContains(t, page, "<form", "a read-only page offers no action")
	for _, path := range []string{"/controllers/host/objects/bad-1/release", "/plans/rollout/retry", "/plans/canary/abort"} {
		rec := post(h, path, url.Values{}, nil)
		assert.Equal(t, http.StatusForbidden, rec.Code, path)
	}
	o, _ := c.Get("bad-1")
	assert.Equal(t, controller.HaltQuarantined, o.Halted)
	doc, _, err := r.Get(t.Context(), "rollout")
	require.NoError(t, err)
	assert.Equal(t, plan.StateApplyFailed, doc.State())
}

func TestGetNeverChangesAnything(t *testing.T) {
	h, c, r := newHandler(t, true)
	for _, path := range []string{"/controllers/host/objects/bad-1/release", "/plans/rollout/retry", "/plans/canary/abort"} {
		t.Run(path, func(t *testing.T) {
			code, _ := get(t, h, path, false)
			assert.Equal(t, http.StatusMethodNotAllowed, code)
		})
	}
	o, _ := c.Get("bad-1")
	assert.Equal(t, controller.HaltQuarantined, o.Halted)
	doc, _, err := r.Get(t.Context(), "rollout")
	require.NoError(t, err)
	assert.Equal(t, plan.StateApplyFailed, doc.State())
	doc, _, err = r.Get(t.Context(), "canary")
	require.NoError(t, err)
	assert.Empty(t, doc.Status.Abort)
}

func TestJSONViewsOfferActionsWithTokens(t *testing.T) {
	h, _, _ := newHandler(t, true)
	var v statuspage.PlanView
	getJSON(t, h, "/plans/rollout", &v)
	require.Len(t, v.Actions, 1)
	a := v.Actions[0]
	assert.Equal(t, "retry", a.Name)
	assert.Equal(t, "plans/rollout/retry", a.Path)
	rec := post(h, "/"+a.Path, url.Values{}, map[string]string{"X-CSRF-Token": a.Token, "Accept": "application/json"})
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

func TestNewRejectsBadOptions(t *testing.T) {
	c := fleet(t)
	tests := []struct {
		name string
		opts statuspage.Options
	}{
		{"short secret", statuspage.Options{Secret: []byte("short")}},
		{"controller twice", statuspage.Options{Controllers: []statuspage.Controller{{Controller: c}, {Controller: c}}}},
		{"nil controller", statuspage.Options{Controllers: []statuspage.Controller{{}}}},
		{"plan IDs without runner", statuspage.Options{PlanIDs: statuspage.StorePlanIDs(converge.NewMemStore())}},
		{"nil target", statuspage.Options{Targets: []*statuspage.Target{nil}}},
		{"negative token TTL", statuspage.Options{TokenTTL: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := statuspage.New(tt.opts)
			require.ErrorIs(t, err, converge.ErrInvalidConfig)
			var ce *converge.ConfigError
			require.True(t, errors.As(err, &ce))
			assert.Contains(t, ce.Field, "statuspage.Options.")
		})
	}
}

func newRecorder(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestAcceptHeaderChoosesJSONOrHTML(t *testing.T) {
	h, _, _ := newHandler(t, false)
	tests := []struct {
		accept string
		want   string
	}{
		{"application/json", "application/json"},
		{"text/html, application/json;q=0.5", "text/html; charset=utf-8"},
		{"application/json, text/html;q=0.9", "application/json"},
		{"application/json;q=0", "text/html; charset=utf-8"},
		{"*/*", "text/html; charset=utf-8"},
		{"", "text/html; charset=utf-8"},
	}
	for _, tt := range tests {
		t.Run(tt.accept, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/plans", nil)
			req.Header.Set("Accept", tt.accept)
			rec := newRecorder(h, req)
			require.Equal(t, http.StatusOK, rec.Code)
			assert.Equal(t, tt.want, rec.Header().Get("Content-Type"))
			assert.Contains(t, rec.Header().Values("Vary"), "Accept")
		})
	}
}

func TestPageWorksUnderAPrefix(t *testing.T) {
	h, c, _ := newHandler(t, true)
	mux := http.NewServeMux()
	mux.Handle("/status/", http.StripPrefix("/status", h))
	code, body := get(t, mux, "/status/controllers/host/objects/bad-1", false)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `<nav><a href="../../../">`, "links are relative to the page")
	token := csrfToken(t, body, "../../../controllers/host/objects/bad-1/release")
	rec := post(mux, "/status/controllers/host/objects/bad-1/release", url.Values{"csrf": {token}}, nil)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	assert.Equal(t, "../bad-1", rec.Header().Get("Location"), "the redirect stays under the prefix")
	qs, err := c.Quarantined(t.Context())
	require.NoError(t, err)
	assert.Empty(t, qs, "released")
}
