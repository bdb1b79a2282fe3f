package statuspage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/statuspage"
	"github.com/convergekit/converge/statuspage/statuspagetest"
)

func TestBrowserShowsStatesAndFollowsAnObjectsHistory(t *testing.T) {
	h, _, _ := newHandler(t, false)
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	bctx := statuspagetest.Browser(ctx, t)

	var title, states, location, key, history string
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible("table.states", chromedp.ByQuery),
		chromedp.Title(&title),
		chromedp.Text("table.states", &states, chromedp.ByQuery),
	))
	assert.Equal(t, "test fleet", title)
	for _, row := range []string{`new\s+2\s+0\s+2`, `waiting\s+2\s+2\s+0`, `ready\s+5\s+0\s+0`} {
		assert.Regexp(t, regexp.MustCompile(row), states, "the page shows the controller's states and counts")
	}

	require.NoError(t, chromedp.Run(bctx,
		chromedp.Click(`a[href$="states/ready"]`, chromedp.ByQuery),
		chromedp.WaitVisible("table.objects", chromedp.ByQuery),
		chromedp.Click(`a.object[href$="objects/ready-a%2Fb"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#key", chromedp.ByQuery),
		chromedp.Location(&location),
		chromedp.Text("#key", &key, chromedp.ByQuery),
		chromedp.Text("table.history", &history, chromedp.ByQuery),
	))
	assert.Equal(t, srv.URL+"/controllers/host/objects/ready-a%2Fb", location)
	assert.Equal(t, "ready-a/b", key)
	assert.Regexp(t, `new\s+ready\s+agent reported`, history, "the object's history")

	// The browser asks for the same page as JSON: every request it sends
	// from now on is paused and continued with the Accept header set.
	chromedp.ListenTarget(bctx, func(ev any) {
		if ev, ok := ev.(*fetch.EventRequestPaused); ok {
			go func() {
				headers := []*fetch.HeaderEntry{{Name: "Accept", Value: "application/json"}}
				for k, v := range ev.Request.Headers {
					if !strings.EqualFold(k, "Accept") {
						headers = append(headers, &fetch.HeaderEntry{Name: k, Value: fmt.Sprint(v)})
					}
				}
				_ = chromedp.Run(bctx, fetch.ContinueRequest(ev.RequestID).WithHeaders(headers))
			}()
		}
	})
	var body string
	require.NoError(t, chromedp.Run(bctx,
		fetch.Enable(),
		chromedp.Navigate(location),
		chromedp.Text("body", &body, chromedp.ByQuery),
	))
	var v statuspage.ObjectView
	require.NoError(t, json.Unmarshal([]byte(body), &v), body)
	assert.Equal(t, "ready-a/b", v.Key)
	assert.Equal(t, "ready", v.State)
	require.Len(t, v.History, 2)
	assert.Equal(t, "agent reported", v.History[1].Reason)
}
