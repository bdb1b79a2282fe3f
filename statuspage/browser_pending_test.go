package statuspage_test

import (
	"bytes"
	"context"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/statuspage"
	"github.com/convergekit/converge/statuspage/statuspagetest"
)

// TestBrowserShowsAPendingReboot opens, in a real browser, the page of a
// device whose kernel item asked for a reboot that has not happened: the
// overview's Needs attention names it with its revision, and the
// target's page shows it, drawn in the page's red.
func TestBrowserShowsAPendingReboot(t *testing.T) {
	d := newDevice()
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
		Build:  d.build,
		BootID: func(context.Context) (string, error) { return "boot-1", nil },
	})
	require.NoError(t, err)
	tg := statuspage.WatchTarget(r, statuspage.TargetOptions[string]{Name: "device"})
	defer tg.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	runFirstPass(ctx, t, r, converge.TargetPassFinished)

	h, err := statuspage.New(statuspage.Options{Title: "device agent", Targets: []*statuspage.Target{tg}, Dot: "-"})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	bctx := statuspagetest.Browser(ctx, t)

	var row, pending, table string
	var shot []byte
	require.NoError(t, chromedp.Run(bctx,
		chromedp.EmulateViewport(1200, 900),
		chromedp.Navigate(srv.URL+"/?refresh=off"),
		chromedp.WaitVisible("tr.attention-item", chromedp.ByQuery),
		chromedp.Text("tr.attention-item", &row, chromedp.ByQuery),
		chromedp.Navigate(srv.URL+"/targets/device?refresh=off"),
		chromedp.WaitVisible("table.pending-actions", chromedp.ByQuery),
		chromedp.Text(".pending-action", &pending, chromedp.ByQuery),
		chromedp.Text("table.pending-actions", &table, chromedp.ByQuery),
		chromedp.Screenshot("table.pending-actions", &shot, chromedp.ByQuery),
	))
	assert.Regexp(t, `device\s+reboot required \(revision 1\)\s+reboot asked by dir: kernel v1`, row)
	assert.Equal(t, "reboot required", pending)
	// The age is the wall clock's since the pass (a loaded machine may take
	// seconds to get here): "just now", or a few seconds ago.
	assert.Regexp(t, `reboot required\s+(just now|\d+ s ago)\s+1\s+dir\s+kernel v1`, table)

	dir := os.Getenv(screenshotDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pending-actions.png"), shot, 0o644))
	img, err := png.Decode(bytes.NewReader(shot))
	require.NoError(t, err)
	assert.Greater(t, img.Bounds().Dx(), 300, "the table holds its columns")
	assert.Greater(t, redShare(img), 0.002, "the pending reboot is drawn in the page's red")
}
