package statuspage_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/statuspage"
	"github.com/convergekit/converge/statuspage/statuspagetest"
)

// limitedFleet runs a replica of the kind "fw" with a limit of one
// handler at once in "updating" and an entry rate of one an hour into
// "rebooting", until one object holds the slot, two wait for it, one
// object entered "rebooting" and one waits to enter it. The handlers of
// "updating" run until the test ends.
func limitedFleet(t *testing.T) *controller.Controller {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	c, err := controller.New(controller.Config{
		Kind: "fw", Store: converge.NewMemStore(), Owner: "r1", Poll: 100 * time.Millisecond,
		ShutdownTimeout: 50 * time.Millisecond, // the handlers of "updating" run until cancelled
		Limits: map[controller.State]controller.Limit{
			"updating":  {Concurrent: 1},
			"rebooting": {Every: time.Hour},
		},
		Handler: controller.HandlerFunc(func(hctx context.Context, o controller.Object) (controller.Result, error) {
			switch o.State {
			case "updating":
				<-hctx.Done()
				return controller.Result{}, hctx.Err()
			case "new":
				return controller.Transition("rebooting"), nil
			}
			return controller.NoChange().After(time.Hour), nil
		}),
	})
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, c.Add(ctx, fmt.Sprintf("u%d", i), "updating", nil))
	}
	for i := range 2 {
		require.NoError(t, c.Add(ctx, fmt.Sprintf("n%d", i), "new", nil))
	}
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	require.Eventually(t, func() bool {
		l, err := c.Limits(ctx)
		return err == nil && len(l) == 2 && l[0].WaitingToEnter == 1 && l[1].InUse == 1 && l[1].WaitingForSlot == 2
	}, 30*time.Second, 20*time.Millisecond, "one runs, two wait for the slot, one waits to enter")
	return c
}

// TestControllerPageShowsLimits: a controller's page lists each limited
// state with its limit, the slots in use and the objects waiting for a
// slot or to enter the state, as HTML and as JSON; a controller without
// limits shows none.
func TestControllerPageShowsLimits(t *testing.T) {
	c := limitedFleet(t)
	h, err := statuspage.New(statuspage.Options{Controllers: []statuspage.Controller{{Controller: c}}})
	require.NoError(t, err)

	var v statuspage.ControllerView
	getJSON(t, h, "/controllers/fw", &v)
	assert.Equal(t, []statuspage.LimitView{
		{State: "rebooting", Limit: "1 per 1h0m0s", Every: "1h0m0s", InUse: 0, WaitingToEnter: 1},
		{State: "updating", Limit: "1 at once", Concurrent: 1, InUse: 1, WaitingForSlot: 2},
	}, v.Limits)

	code, body := get(t, h, "/controllers/fw", false)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `<table id="limits">`)
	assert.Regexp(t, `<tr class="limit"><td>rebooting</td><td>1 per 1h0m0s</td><td>-</td><td>-</td><td>1</td></tr>`, body)
	assert.Regexp(t, `<tr class="limit"><td>updating</td><td>1 at once</td><td>1/1</td><td>2</td><td>-</td></tr>`, body)

	plain, _, _ := newHandler(t, false)
	var pv statuspage.ControllerView
	getJSON(t, plain, "/controllers/host", &pv)
	assert.Empty(t, pv.Limits)
	_, body = get(t, plain, "/controllers/host", false)
	assert.NotContains(t, body, `id="limits"`)
}

// TestBrowserShowsLimits opens a limited controller's page in a real
// browser: its Limits table shows the slot in use and the objects
// waiting.
func TestBrowserShowsLimits(t *testing.T) {
	c := limitedFleet(t)
	h, err := statuspage.New(statuspage.Options{Controllers: []statuspage.Controller{{Controller: c}}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	bctx := statuspagetest.Browser(ctx, t)
	var rows []string
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(srv.URL+"/controllers/fw?refresh=off"),
		chromedp.WaitVisible("#limits", chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("#limits tr")].map(r => [...r.cells].map(c => c.textContent).join(" | "))`, &rows),
	))
	assert.Equal(t, []string{
		"state | limit | slots in use | waiting for a slot | waiting to enter",
		"rebooting | 1 per 1h0m0s | - | - | 1",
		"updating | 1 at once | 1/1 | 2 | -",
	}, rows)
}
