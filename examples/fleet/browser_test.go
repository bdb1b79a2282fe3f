package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/statuspage"
	"github.com/convergekit/converge/statuspage/statuspagetest"
)

// TestFleetStatusPageInABrowser opens the fleet example's own status page
// in headless Chromium once the fleet has converged: the overview shows
// the controller's states and counts, a state's list links to one host,
// the host's page shows its history, and the same page read as JSON
// parses.
func TestFleetStatusPageInABrowser(t *testing.T) {
	var checked bool
	require.NoError(t, run(t.Context(), &discard{}, fleetOptions{autoRelease: true, hooks: pageHooks{
		converged: func(page http.Handler) {
			checked = true
			browseFleetPage(t, page)
		},
	}}))
	assert.True(t, checked, "the page was opened once the fleet converged")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func browseFleetPage(t *testing.T, page http.Handler) {
	t.Helper()
	srv := httptest.NewServer(page)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	bctx := statuspagetest.Browser(ctx, t)

	var states, location, key, history string
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible("table.states", chromedp.ByQuery),
		chromedp.Text("table.states", &states, chromedp.ByQuery),
	))
	assert.Regexp(t, regexp.MustCompile(`ready\s+500\b`), states, "the overview shows every host ready")

	require.NoError(t, chromedp.Run(bctx,
		chromedp.Click(`a[href$="states/ready"]`, chromedp.ByQuery),
		chromedp.WaitVisible("table.objects", chromedp.ByQuery),
		chromedp.Click(`a.object[href$="objects/host-013"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#key", chromedp.ByQuery),
		chromedp.Location(&location),
		chromedp.Text("#key", &key, chromedp.ByQuery),
		chromedp.Text("table.history", &history, chromedp.ByQuery),
	))
	assert.Equal(t, srv.URL+"/controllers/host/objects/host-013", location)
	assert.Equal(t, "host-013", key)
	assert.Regexp(t, `provisioning\s+installing`, history, "the host's history shows its way to ready")

	// The page the browser landed on, asked for as JSON (the page's
	// Content-Security-Policy keeps its own scripts from fetching).
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, location, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var v statuspage.ObjectView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	assert.Equal(t, "host-013", v.Key)
	assert.Equal(t, "ready", v.State)
	assert.NotEmpty(t, v.History)
}
