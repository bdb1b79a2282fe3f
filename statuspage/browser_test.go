package statuspage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
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

// waterfallDevice is a device of two stages whose first pass changes the
// host's configuration, pulls an image and starts a database, then starts
// the web container, which exits at once, so the proxy that depends on it waits.
func waterfallDevice() converge.TargetBuildFunc[string] {
	item := func(id string, latency time.Duration, value string) *convergetest.Item {
		return &convergetest.Item{Key: converge.ID(id), Latency: latency, Value: value}
	}
	dir := item("dir:/etc/app", 0, "v1")
	config := item("file:/etc/app/config.yaml", 40*time.Millisecond, "")
	sysctl := item("sysctl:net.ipv4.ip_forward", 0, "v1")
	image := item("image:registry.example/web:1.4", 150*time.Millisecond, "")
	network := item("network:apps", 0, "v1")
	db := item("container:db", 80*time.Millisecond, "")
	web := item("container:web", 30*time.Millisecond, "")
	web.FailAt(converge.PhaseVerify, -1, errors.New("container exited: port 8080 already in use"))
	proxy := item("container:proxy", 20*time.Millisecond, "")
	return func(_ context.Context, goal string) ([]converge.TargetStage, error) {
		for _, it := range []*convergetest.Item{dir, config, sysctl, image, network, db, web, proxy} {
			it.Goal = goal
		}
		host := converge.NewGraph()
		host.Add(dir.Node(), converge.Present)
		host.Add(config.Node(), converge.Present, dir.Key)
		host.Add(sysctl.Node(), converge.Present)
		apps := converge.NewGraph()
		apps.Add(image.Node(), converge.Present)
		apps.Add(network.Node(), converge.Present)
		apps.Add(db.Node(), converge.Present, network.Key)
		apps.Add(web.Node(), converge.Present, image.Key, db.Key)
		apps.Add(proxy.Node(), converge.Present, web.Key)
		return []converge.TargetStage{{Name: "host", Graph: host}, {Name: "apps", Graph: apps}}, nil
	}
}

// TestBrowserShowsTheLastPassAsAWaterfall runs a device's first pass, in
// which an item fails and another waits for it, and opens the target's
// page in a real browser: the pass is drawn as a waterfall, one bar per
// item of each walk, the failed one red, with a title on every bar; a
// screenshot of it is kept (pass-waterfall.png, in CONVERGE_SCREENSHOT_DIR
// when set).
func TestBrowserShowsTheLastPassAsAWaterfall(t *testing.T) {
	build := waterfallDevice()
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
		Name:    "device",
		Build:   build,
		Backoff: converge.Backoff{Base: time.Hour, Max: time.Hour},
	})
	require.NoError(t, err)
	tg := statuspage.WatchTarget(r, statuspage.TargetOptions[string]{Name: "device", Build: build})
	defer tg.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	runFirstPass(ctx, t, r, converge.TargetPassFailed)

	h, err := statuspage.New(statuspage.Options{Title: "device", Targets: []*statuspage.Target{tg}, Dot: "-"})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	bctx := statuspagetest.Browser(ctx, t)
	var heading string
	var bars, titles []string
	var failedFill string
	var shot []byte
	require.NoError(t, chromedp.Run(bctx,
		chromedp.EmulateViewport(1200, 900),
		chromedp.Navigate(srv.URL+"/targets/device?refresh=off"),
		chromedp.WaitVisible("#waterfall svg.waterfall", chromedp.ByQuery),
		chromedp.Text("#waterfall h2", &heading, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("#waterfall g.bar")].map(g => g.getAttribute("class").slice(4) + " " + g.querySelector("text").textContent)`, &bars),
		chromedp.Evaluate(`[...document.querySelectorAll("#waterfall g.bar > title")].map(t => t.textContent)`, &titles),
		chromedp.Evaluate(`getComputedStyle(document.querySelector("#waterfall g.bar.failed rect")).fill`, &failedFill),
		chromedp.Screenshot("#waterfall", &shot, chromedp.ByQuery),
	))
	assert.Contains(t, heading, "Last pass")
	require.Len(t, bars, 11, "one bar per item of each walk: host twice, apps once")
	assert.ElementsMatch(t, []string{
		"unchanged dir:/etc/app host #1", "unchanged sysctl:net.ipv4.ip_forward host #1", "changed file:/etc/app/config.yaml host #1",
	}, bars[:3], "the host stage: the walk that changed it")
	assert.ElementsMatch(t, []string{
		"unchanged dir:/etc/app host #2", "unchanged sysctl:net.ipv4.ip_forward host #2", "unchanged file:/etc/app/config.yaml host #2",
	}, bars[3:6], "then the one that found nothing to do")
	assert.ElementsMatch(t, []string{
		"changed image:registry.example/web:1.4 apps #1", "unchanged network:apps apps #1", "changed container:db apps #1",
		"failed container:web apps #1", "waiting container:proxy apps #1",
	}, bars[6:], "the apps stage: the walk that failed")
	assert.Equal(t, "waiting container:proxy apps #1", bars[len(bars)-1], "the item that did not run comes last in its walk")
	assert.Equal(t, "rgb(170, 0, 0)", failedFill, "the failed item is drawn red")
	require.Len(t, titles, len(bars), "every bar has a title")
	assert.Regexp(t, `^container:web \(apps #1\): failed, at [\d.]+ ms for [\d.]+ ms, failed in verify, apply at [\d.]+ ms for [\d.]+ ms$`,
		titles[slices.IndexFunc(bars, func(b string) bool { return strings.HasPrefix(b, "failed") })])

	dir := os.Getenv(screenshotDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pass-waterfall.png"), shot, 0o644))
	t.Logf("screenshot in %s", dir)
	img, err := png.Decode(bytes.NewReader(shot))
	require.NoError(t, err)
	assert.Greater(t, img.Bounds().Dx(), 900, "the waterfall spans the page")
	assert.Greater(t, img.Bounds().Dy(), 11*18, "the waterfall holds its rows")
	assert.Greater(t, redShare(img), 0.0005, "the failed item is drawn red")
}

// runFirstPass sets r's target to "v1" and runs r until its first pass
// ended with an event of kind end, then stops it.
func runFirstPass(ctx context.Context, t *testing.T, r *converge.TargetReconciler[string], end converge.TargetEventKind) {
	t.Helper()
	ended := make(chan struct{}, 1)
	unsubscribe := r.Subscribe(func(ev converge.TargetEvent) {
		if ev.Kind == end {
			select {
			case ended <- struct{}{}:
			default:
			}
		}
	})
	defer unsubscribe()
	require.NoError(t, r.SetTarget(ctx, "v1"))
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(runCtx) }()
	var timedOut bool
	select {
	case <-ended:
	case <-ctx.Done():
		timedOut = true
	}
	stop()
	require.NoError(t, <-stopped)
	require.False(t, timedOut, "the first pass did not end")
}
