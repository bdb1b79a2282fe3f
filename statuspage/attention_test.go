package statuspage_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/plan"
	"github.com/convergekit/converge/statuspage"
)

// attention reads the overview's Needs attention list as who sees it.
func attention(t *testing.T, h http.Handler, who string) []statuspage.AttentionItem {
	t.Helper()
	rec := as(h, who, http.MethodGet, "/", nil, true)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var v statuspage.OverviewView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	require.NotNil(t, v.NeedsAttention, "an empty list, not null")
	return v.NeedsAttention
}

// problems lists the items as "name: problem [actions]".
func problems(items []statuspage.AttentionItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Name + ": " + it.Problem
		for _, a := range it.Actions {
			out[i] += " [" + a.Name + "]"
		}
	}
	return out
}

func TestOverviewStartsWithWhatNeedsAttention(t *testing.T) {
	h, _, _ := newHandler(t, true)
	items := attention(t, h, "admin")
	assert.Equal(t, []string{
		"bad-1: quarantined [release]",
		"term-1: terminal [release]",
		"wait-1: above SLA",
		"wait-2: above SLA",
		"rollout: plan failed [retry]",
	}, problems(items), "halted and above-SLA objects, the failed plan, each with what the viewer may do; the running plan without failures is not there")
	q := items[0]
	assert.Equal(t, "object", q.Kind)
	assert.Equal(t, "host", q.Controller)
	assert.Equal(t, "new", q.State)
	assert.Equal(t, "disk failed", q.Error)
	assert.Equal(t, 2, q.Repeats, "failures in a row")
	assert.Equal(t, "controllers/host/objects/bad-1", q.Path)
	assert.False(t, q.Since.IsZero(), "the age of the quarantine: its last error")
	p := items[4]
	assert.Equal(t, "plan", p.Kind)
	assert.Equal(t, "w2 failed", p.Error)
	assert.True(t, planAt.Equal(p.Since), "%s", p.Since)
	assert.Equal(t, "plans/rollout", p.Path)

	assert.Equal(t, []string{
		"bad-1: quarantined [release]", "term-1: terminal [release]", "wait-1: above SLA", "wait-2: above SLA", "rollout: plan failed",
	}, problems(attention(t, h, "alice")), "alice may release but not retry")
	assert.Equal(t, []string{
		"bad-1: quarantined", "term-1: terminal", "wait-1: above SLA", "wait-2: above SLA", "rollout: plan failed",
	}, problems(attention(t, h, "viewer")), "a viewer gets no action")

	ro, _, _ := newHandler(t, false)
	for _, it := range attention(t, ro, "admin") {
		assert.Empty(t, it.Actions, "read-only: %s", it.Name)
	}

	code, body := get(t, h, "/", false)
	require.Equal(t, http.StatusOK, code)
	block := strings.Index(body, `id="attention"`)
	require.Positive(t, block, body)
	assert.Less(t, block, strings.Index(body, "<h2>Controllers</h2>"), "the block comes first")
	assert.Contains(t, body, "Needs attention")
	assert.Contains(t, body, `<a href="./controllers/host/objects/bad-1">host bad-1</a>`)
	assert.Contains(t, body, `<input type="hidden" name="return" value="overview">`)
	assert.Contains(t, body, `action="./plans/rollout/retry"`)
}

func TestOverviewSaysWhenNothingNeedsAttention(t *testing.T) {
	h, err := statuspage.New(statuspage.Options{Title: "calm"})
	require.NoError(t, err)
	var v statuspage.OverviewView
	getJSON(t, h, "/", &v)
	assert.Empty(t, v.NeedsAttention)
	code, body := get(t, h, "/", false)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "Nothing needs attention.")
	assert.NotContains(t, body, "<h2>Needs attention</h2>")
}

func TestRunningPlanWithFailedTargetsCanBeAbortedFromTheOverview(t *testing.T) {
	store := converge.NewMemStore()
	r, err := plan.NewRunner(store, plan.RunnerConfig{})
	require.NoError(t, err)
	require.NoError(t, r.Create(t.Context(), &plan.Document{
		Spec: plan.Plan{ID: "wide", Commands: []plan.Command{{Kind: "update",
			Targets: []plan.CommandTargets{{Group: "workers", Discovery: plan.CommandDiscovery{Static: []string{"w1", "w2", "w3"}}}}}}},
		Status: &plan.Status{State: plan.StateSchedulable, Commands: []plan.CommandStatus{{
			Kind: "update", State: plan.StateSchedulable, Started: planAt,
			Targets: map[string][]plan.TargetStatus{"workers": {
				{Name: "w1", State: plan.TargetCompleted, LastUpdatedTimestamp: planAt},
				{Name: "w2", State: plan.TargetApplyFailed, Reason: "connection refused", LastUpdatedTimestamp: planAt},
				{Name: "w3", State: plan.TargetSent, LastUpdatedTimestamp: planAt},
			}},
		}}},
	}))
	h, err := statuspage.New(statuspage.Options{Plans: r, PlanIDs: statuspage.StorePlanIDs(store), Actions: true, Authorizer: testAuthorizer})
	require.NoError(t, err)
	items := attention(t, h, "bob")
	assert.Equal(t, []string{"wide: targets failed [abort]"}, problems(items))
	assert.Equal(t, "workers/w2: connection refused", items[0].Error, "the first failed target's reason")

	a := items[0].Actions[0]
	rec := as(h, "bob", http.MethodPost, "/"+a.Path, url.Values{"csrf": {a.Token}, "reason": {"too many failures"}, "return": {"overview"}}, false)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	assert.Equal(t, "../../", rec.Header().Get("Location"), "back to the overview")
	hist, err := r.History(t.Context(), "wide")
	require.NoError(t, err)
	last := hist[len(hist)-1]
	assert.Equal(t, "abort requested: too many failures", last.Reason)
	assert.Equal(t, "bob", last.By, "the authorizer's who")
}

// Every action of the page stores who did it, as the Authorizer named
// the viewer, in the history of what it changed.
func TestActionsStoreWhoDidThem(t *testing.T) {
	h, c, r := newHandler(t, true)
	post := func(who, path string, form url.Values) *http.Response {
		var token string
		for _, it := range attention(t, h, who) {
			for _, a := range it.Actions {
				if "/"+a.Path == path {
					token = a.Token
				}
			}
		}
		require.NotEmpty(t, token, "%s is offered %s", who, path)
		form.Set("csrf", token)
		form.Set("return", "overview")
		return as(h, who, http.MethodPost, path, form, false).Result()
	}
	res := post("alice", "/controllers/host/objects/bad-1/release", url.Values{})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	assert.Equal(t, "../../../../", res.Header.Get("Location"))
	hist, err := c.History(t.Context(), "bad-1")
	require.NoError(t, err)
	require.NotEmpty(t, hist)
	var released *converge.HistoryEntry
	for i := range hist {
		if hist[i].Reason == controller.ReasonReleased {
			released = &hist[i]
		}
	}
	require.NotNil(t, released, "%+v", hist)
	assert.Equal(t, "alice", released.By)

	before, err := r.History(context.Background(), "rollout")
	require.NoError(t, err)
	res = post("admin", "/plans/rollout/retry", url.Values{})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	ph, err := r.History(context.Background(), "rollout")
	require.NoError(t, err)
	require.Greater(t, len(ph), len(before))
	assert.Equal(t, "retry", ph[len(before)].Reason)
	for _, e := range ph[len(before):] {
		assert.Equal(t, "admin", e.By, e.Reason)
	}

	code, body := get(t, h, "/controllers/host/objects/bad-1", false)
	require.Equal(t, http.StatusOK, code)
	assert.Regexp(t, `released</td><td>alice</td>`, body, "the page shows who")
	assert.Contains(t, body, "quarantined: disk failed", "the quarantine is in the history")
}

func TestPagesShowAsOfAndAges(t *testing.T) {
	now := planAt.Add(3*time.Minute + 20*time.Second)
	h, _, _ := newHandlerWith(t, false, func(o *statuspage.Options) { o.Now = func() time.Time { return now } })
	for _, path := range []string{"/", "/plans", "/plans/rollout", "/controllers/host", "/controllers/host/objects/bad-1", "/nothing"} {
		t.Run(path, func(t *testing.T) {
			_, body := get(t, h, path, false)
			assert.Contains(t, body, `as of <time id="asof" datetime="2026-11-23T10:03:20Z">`)
		})
	}
	_, body := get(t, h, "/plans/rollout", false)
	assert.Contains(t, body, `<time datetime="2026-11-23T10:00:00Z" title="2026-11-23T10:00:00Z">3 min ago</time>`, "the plan's age")
	var v statuspage.OverviewView
	getJSON(t, h, "/", &v)
	assert.True(t, now.Equal(v.AsOf), "%s", v.AsOf)
	for _, path := range []string{"/plans", "/plans/rollout", "/controllers/host", "/controllers/host/states/ready", "/controllers/host/objects/bad-1"} {
		t.Run("json"+path, func(t *testing.T) {
			var v struct {
				AsOf time.Time `json:"asOf"`
			}
			code, body := get(t, h, path, true)
			require.Equal(t, http.StatusOK, code, body)
			require.NoError(t, json.Unmarshal([]byte(body), &v), body)
			assert.True(t, now.Equal(v.AsOf), "%s: asOf %s", path, v.AsOf)
		})
	}
}

func TestPagesRefreshUntilTurnedOff(t *testing.T) {
	h, _, _ := newHandlerWith(t, false, func(o *statuspage.Options) { o.Refresh = 15 * time.Second })
	_, body := get(t, h, "/controllers/host/states/ready?q=ready", false)
	assert.Contains(t, body, `<meta http-equiv="refresh" content="15">`)
	assert.Contains(t, body, `<a id="refresh" href="?q=ready&amp;refresh=off">stop refreshing</a>`, "the same page, filters kept")

	_, body = get(t, h, "/controllers/host/states/ready?q=ready&refresh=off", false)
	assert.NotContains(t, body, `http-equiv="refresh"`)
	assert.Contains(t, body, `<a id="refresh" href="?q=ready">refresh automatically</a>`)
	assert.Contains(t, body, `href="../../../controllers/host/objects/ready-1?refresh=off"`, "links keep it off")
	assert.Contains(t, body, `<input type="hidden" name="refresh" value="off">`, "the filter keeps it off")

	rec := as(h, "admin", http.MethodPost, "/plans/rollout/retry", url.Values{}, false)
	require.Equal(t, http.StatusForbidden, rec.Code, "actions are off")
	assert.NotContains(t, rec.Body.String(), `http-equiv="refresh"`, "the answer to a POST does not reload itself")

	never, _, _ := newHandlerWith(t, false, func(o *statuspage.Options) { o.Refresh = -1 })
	_, body = get(t, never, "/", false)
	assert.NotContains(t, body, `http-equiv="refresh"`)
	assert.NotContains(t, body, `id="refresh"`)

	def, _, _ := newHandler(t, false)
	_, body = get(t, def, "/", false)
	assert.Contains(t, body, `<meta http-equiv="refresh" content="30">`, "DefaultRefresh")
}

func TestLongListsArePagedAndFiltered(t *testing.T) {
	h, _, _ := newHandlerWith(t, false, func(o *statuspage.Options) { o.PageSize = 2 })
	keys := func(v statuspage.StateView) []string {
		out := []string{}
		for _, o := range v.Objects {
			out = append(out, o.Key)
		}
		return out
	}
	var v statuspage.StateView
	getJSON(t, h, "/controllers/host/states/ready", &v)
	assert.Equal(t, []string{"<script>alert(1)</script>", "ready-1"}, keys(v))
	assert.Equal(t, statuspage.Paging{Page: 1, Pages: 3, Total: 5, PageSize: 2, Next: "?page=2"}, v.Paging)
	v = statuspage.StateView{}
	getJSON(t, h, "/controllers/host/states/ready?page=3", &v)
	assert.Equal(t, []string{"ready-a/b"}, keys(v))
	assert.Equal(t, "?page=2", v.Prev)
	assert.Empty(t, v.Next)

	v = statuspage.StateView{}
	getJSON(t, h, "/controllers/host/states/ready?q=READY-", &v)
	assert.Equal(t, []string{"ready-1", "ready-2"}, keys(v), "text on the key, any case")
	assert.Equal(t, 4, v.Total)
	assert.Equal(t, "READY-", v.Query)

	v = statuspage.StateView{}
	getJSON(t, h, "/controllers/host/objects?status=halted", &v)
	assert.Equal(t, []string{"bad-1", "term-1"}, keys(v))
	v = statuspage.StateView{}
	getJSON(t, h, "/controllers/host/objects?state=waiting&q=2", &v)
	assert.Equal(t, []string{"wait-2"}, keys(v))
	v = statuspage.StateView{}
	getJSON(t, h, "/controllers/host/objects?status=above-sla", &v)
	assert.Equal(t, []string{"wait-1", "wait-2"}, keys(v))
	assert.Equal(t, []string{"new", "waiting", "ready"}, v.States)

	_, body := get(t, h, "/controllers/host/states/ready?page=2", false)
	assert.Contains(t, body, `5 found; page 2 of 3 <a rel="prev" href="?page=1">previous</a> <a rel="next" href="?page=3">next</a>`)

	var pv statuspage.PlansView
	getJSON(t, h, "/plans?state=ApplyFailed", &pv)
	require.Len(t, pv.Plans, 1)
	assert.Equal(t, "rollout", pv.Plans[0].ID)
	assert.Equal(t, []string{"ApplyFailed", "SchedulableWait"}, pv.States)
	pv = statuspage.PlansView{}
	getJSON(t, h, "/plans?q=can", &pv)
	require.Len(t, pv.Plans, 1)
	assert.Equal(t, "canary", pv.Plans[0].ID)

	for _, path := range []string{"/controllers/host/states/ready?page=0", "/controllers/host/objects?page=x", "/controllers/host/objects?status=sick", "/plans?page=-1"} {
		t.Run(path, func(t *testing.T) {
			code, body := get(t, h, path, true)
			require.Equal(t, http.StatusBadRequest, code, body)
			var ev statuspage.ErrorView
			require.NoError(t, json.Unmarshal([]byte(body), &ev))
			assert.Contains(t, ev.Error, "statuspage: query parameter ")
		})
	}
}

func TestControllerPageListsAPageOfEachAndLinksToTheRest(t *testing.T) {
	h, _, _ := newHandlerWith(t, false, func(o *statuspage.Options) { o.PageSize = 1 })
	var v statuspage.ControllerView
	getJSON(t, h, "/controllers/host", &v)
	assert.Len(t, v.AboveSLAObjects, 1)
	assert.Equal(t, 2, v.AboveSLA)
	_, body := get(t, h, "/controllers/host", false)
	assert.Contains(t, body, `showing 1 of 2: <a href="../controllers/host/objects?status=above-sla">all of them</a>`)
}

func TestUnknownPagesAnswerInTheFormAsked(t *testing.T) {
	h, _, _ := newHandler(t, true)
	rec := as(h, "admin", http.MethodGet, "/no/such/page", nil, true)
	require.Equal(t, http.StatusNotFound, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var ev statuspage.ErrorView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &ev), rec.Body.String())
	assert.Equal(t, statuspage.ErrorView{Status: http.StatusNotFound, Error: "statuspage: no page at /no/such/page"}, ev)

	rec = as(h, "admin", http.MethodGet, "/plans/rollout/retry", nil, true)
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Equal(t, "POST", rec.Header().Get("Allow"))
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &ev), rec.Body.String())
	assert.Equal(t, http.StatusMethodNotAllowed, ev.Status)

	rec = as(h, "admin", http.MethodGet, "/no/such/page", nil, false)
	require.Equal(t, http.StatusNotFound, rec.Code)
	assert.Contains(t, rec.Header().Get("Content-Type"), "text/html")
}

func TestPlanPageShowsProgressAndEveryFailedHost(t *testing.T) {
	h, _, _ := newHandler(t, false)
	var v statuspage.PlanView
	getJSON(t, h, "/plans/rollout", &v)
	require.Len(t, v.CommandViews, 1)
	cmd := v.CommandViews[0]
	assert.Equal(t, []statuspage.PlanTargetFailure{{Group: "workers", Name: "w2", State: "SignalApplyFailed", Reason: "disk full", At: cmd.FailedTargets[0].At}}, cmd.FailedTargets)
	require.Len(t, cmd.Groups, 1)
	g := cmd.Groups[0]
	assert.Equal(t, [3]int{2, 1, 1}, [3]int{g.Total, g.Completed, g.Failed})
	_, body := get(t, h, "/plans/rollout", false)
	assert.Contains(t, body, `<progress max="2" value="1"></progress> 1/2 completed`)
	assert.Contains(t, body, `<li class="bad">workers/w2 SignalApplyFailed: disk full</li>`)
	assert.Contains(t, body, `workers <span class="muted">1/2 completed, 1 failed</span>`)
	code, body := get(t, h, "/", false)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `<a href="./plans">plans</a>`, "plans are reachable from every page")
	assert.Contains(t, body, `href="./plans/rollout"`)
}

// Identical consecutive entries of a history are one row, counted, with
// the first and last time.
func TestIdenticalConsecutiveFailuresAreGrouped(t *testing.T) {
	store := converge.NewMemStore()
	c, err := controller.New(controller.Config{Kind: "host", Store: store,
		Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
			return controller.NoChange(), nil
		})})
	require.NoError(t, err)
	require.NoError(t, c.Add(t.Context(), "h1", "new", nil))
	rec, err := store.Get(t.Context(), "host/h1")
	require.NoError(t, err)
	var hist []converge.HistoryEntry
	for i := range 8 {
		hist = append(hist, converge.HistoryEntry{At: planAt.Add(time.Duration(i) * time.Minute), From: "new", To: "new", Reason: "terminal error: connection refused"})
	}
	hist = append(hist, converge.HistoryEntry{At: planAt.Add(9 * time.Minute), From: "new", To: "new", Reason: "released", By: "alice"},
		converge.HistoryEntry{At: planAt.Add(10 * time.Minute), From: "new", To: "new", Reason: "terminal error: connection refused"})
	_, err = store.Put(t.Context(), converge.StoreRecord{Key: rec.Key, Version: rec.Version, Value: rec.Value}, hist...)
	require.NoError(t, err)
	now := planAt.Add(20 * time.Minute)
	h, err := statuspage.New(statuspage.Options{Controllers: []statuspage.Controller{{Controller: c}}, Now: func() time.Time { return now }})
	require.NoError(t, err)
	_, body := get(t, h, "/controllers/host/objects/h1", false)
	assert.Equal(t, 1, strings.Count(body, "×8"), body)
	assert.Contains(t, body, `first <time datetime="2026-11-23T10:00:00Z" title="2026-11-23T10:00:00Z">20 min ago</time>, last <time datetime="2026-11-23T10:07:00Z" title="2026-11-23T10:07:00Z">13 min ago</time>`)
	assert.Equal(t, 2, strings.Count(body, "connection refused"), "the run of 8 as one row, and the one after the release: %s", body)
}
