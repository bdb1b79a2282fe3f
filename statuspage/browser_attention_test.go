package statuspage_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/statuspage/statuspagetest"
)

// screenshotDirEnv names a directory where the browser test keeps its
// screenshots for a person to look at; unset, they go to a temporary
// directory that the test removes.
const screenshotDirEnv = "CONVERGE_SCREENSHOT_DIR"

// TestBrowserShowsNeedsAttentionFirst opens the overview of a fleet with
// a quarantined object in a real browser: the Needs attention block is
// the first thing under the title, it names the object, its problem and
// its last error, offers the release, and is drawn (its screenshot has
// the block's red border).
func TestBrowserShowsNeedsAttentionFirst(t *testing.T) {
	h, _, _ := newHandler(t, true)
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	bctx := statuspagetest.Browser(ctx, t)

	var first, rows, release string
	var quarantined []string
	var shot, page []byte
	require.NoError(t, chromedp.Run(bctx,
		chromedp.EmulateViewport(1200, 900),
		chromedp.Navigate(srv.URL+"/?refresh=off"),
		chromedp.WaitVisible("#attention", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("h1").nextElementSibling.id`, &first),
		chromedp.Text("table.attention", &rows, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("tr.attention-item")].filter(r => r.querySelector(".problem").textContent.startsWith("quarantined")).map(r => r.cells[0].textContent + " | " + r.cells[2].textContent)`, &quarantined),
		chromedp.Evaluate(`[...document.querySelectorAll("#attention button")].map(b => b.textContent).join(",")`, &release),
		chromedp.Screenshot("#attention", &shot, chromedp.ByQuery),
		chromedp.FullScreenshot(&page, 100), // 100: PNG
	))
	assert.Equal(t, "attention", first, "the block comes right after the title")
	assert.Contains(t, rows, "quarantined")
	assert.Contains(t, rows, "disk failed")
	assert.Equal(t, []string{"host bad-1 new | disk failed"}, quarantined, "the quarantined object, its state and last error")
	assert.Equal(t, "release,release,retry", release, "release beside the halted objects, retry beside the failed plan")

	dir := os.Getenv(screenshotDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "needs-attention.png"), shot, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "overview.png"), page, 0o644))
	t.Logf("screenshots in %s", dir)

	img, err := png.Decode(bytes.NewReader(shot))
	require.NoError(t, err)
	b := img.Bounds()
	assert.Greater(t, b.Dx(), 400, "the block spans the page")
	assert.Greater(t, b.Dy(), 100, "the block holds its rows")
	assert.Greater(t, redShare(img), 0.002, "the block is drawn with its red border and problems")
}

// redShare is the share of the pixels of img that are the page's red
// (#a00, give or take antialiasing).
func redShare(img image.Image) float64 {
	b := img.Bounds()
	red := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 > 140 && g>>8 < 40 && bl>>8 < 40 {
				red++
			}
		}
	}
	return float64(red) / float64(b.Dx()*b.Dy())
}
