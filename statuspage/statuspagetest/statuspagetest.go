// Package statuspagetest starts a headless Chromium for tests that drive a
// status page in a real browser with chromedp. Chromium comes from the
// system (Debian's chromium package), never from a download.
package statuspagetest

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// RequireBrowserEnv is the environment variable that, set to 1, makes a
// browser test fail instead of skipping when no Chromium is installed (CI
// sets it).
const RequireBrowserEnv = "CONVERGE_REQUIRE_BROWSER"

// Chromium returns the path of chromium or chromium-browser on PATH. When
// there is none it skips the test with a message saying what to install,
// or fails it when RequireBrowserEnv is 1.
func Chromium(tb testing.TB) string {
	tb.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium or chromium-browser on PATH: install Debian's chromium package (apt-get install chromium) to run the browser test"
	if os.Getenv(RequireBrowserEnv) == "1" {
		tb.Fatal(msg + " (" + RequireBrowserEnv + "=1)")
	}
	tb.Skip(msg)
	return ""
}

// Browser starts a headless Chromium (see Chromium) for ctx and returns a
// chromedp context of one tab in it; the browser is stopped when the test
// ends or ctx is done. It runs without the sandbox, since tests often run
// as root.
func Browser(ctx context.Context, tb testing.TB) context.Context {
	tb.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium(tb)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	tb.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	return bctx
}
