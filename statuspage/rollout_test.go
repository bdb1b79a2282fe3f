package statuspage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	fleetpkg "github.com/convergekit/converge/fleet"
	"github.com/convergekit/converge/statuspage"
	"github.com/convergekit/converge/statuspage/statuspagetest"
)

// pausedRollout runs a rollout of 40 devices whose second wave has a
// failing device: it stops paused at that wave's error threshold. The
// devices are simulated by storing their reports through the server.
func pausedRollout(t *testing.T) *fleetpkg.Server {
	t.Helper()
	ctx := context.Background()
	srv, err := fleetpkg.NewServer(fleetpkg.Config{Store: converge.NewMemStore(), Rate: -1,
		Logger: slog.New(slog.DiscardHandler), RolloutPoll: 10 * time.Millisecond, RolloutOwner: "page"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	items := []converge.DesiredItem{{ID: "app", Presence: converge.Present}}
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("pi-%02d", i)
		ids = append(ids, id)
		_, err := srv.Enrol(ctx, id, map[string]string{"site": "lyon"})
		require.NoError(t, err)
	}
	_, err = srv.CreateRollout(ctx, fleetpkg.RolloutSpec{ID: "firmware-2", Selector: "site=lyon", Items: items,
		Payload: json.RawMessage(`{"version":"2"}`), Waves: []fleetpkg.Wave{
			{Name: "canary", Count: 2},
			{Name: "quarter", Percent: 25, ErrorThreshold: 5},
			{Name: "the rest"},
		}})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { _ = srv.RunRollouts(rctx) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, id := range ids {
			st, err := srv.DeviceStatus(ctx, id)
			require.NoError(c, err)
			if st.Target == 0 || st.Reported == st.Target {
				continue
			}
			state := `"present"`
			if id == "pi-05" {
				state = `"creating-failed","message":"no space left on device"`
			}
			_, err = srv.StoreReport(ctx, id, fmt.Appendf(nil, `{"revision":%d,"items":[{"id":"app","state":%s}]}`, st.Target, state))
			require.NoError(c, err)
		}
		ro, err := srv.Rollout(ctx, "firmware-2")
		require.NoError(c, err)
		assert.Equal(c, fleetpkg.RolloutPaused, ro.State)
		assert.Equal(c, 9, ro.Waves[1].Ready)
	}, 30*time.Second, 20*time.Millisecond)
	return srv
}

func TestOverviewShowsRollouts(t *testing.T) {
	srv := pausedRollout(t)
	h, err := statuspage.New(statuspage.Options{Title: "fleet", Rollouts: srv.Rollouts})
	require.NoError(t, err)
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Accept", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var v statuspage.OverviewView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	require.Len(t, v.Rollouts, 1)
	ro := v.Rollouts[0]
	assert.Equal(t, fleetpkg.RolloutPaused, ro.State)
	assert.Equal(t, []fleetpkg.WaveState{fleetpkg.WaveCompleted, fleetpkg.WaveRunning, fleetpkg.WavePending},
		[]fleetpkg.WaveState{ro.Waves[0].State, ro.Waves[1].State, ro.Waves[2].State})
	require.Len(t, v.NeedsAttention, 1)
	item := v.NeedsAttention[0]
	assert.Equal(t, "rollout", item.Kind)
	assert.Equal(t, statuspage.ProblemRolloutPaused, item.Problem)
	assert.Equal(t, "quarter reached its error threshold: 1 of 10 devices failed (threshold 5%)", item.Error)

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body := rec.Body.String()
	assert.Contains(t, body, `id="rollout-firmware-2"`)
	assert.Contains(t, body, "quarter reached its error threshold")
	assert.Regexp(t, `<td>quarter</td><td>running</td><td>10</td><td>0</td><td>0</td><td class="ok">9</td><td class="bad">1</td>`, body)

	// Without Options.Rollouts the page has no rollout section.
	h, err = statuspage.New(statuspage.Options{Title: "fleet"})
	require.NoError(t, err)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	assert.NotContains(t, rec.Body.String(), "Rollouts")
}

// TestBrowserShowsRolloutPausedAtItsErrorThreshold opens the overview of a
// fleet whose rollout stopped at a wave's error threshold in a real
// browser, and keeps a screenshot of the rollout's section
// (rollout-paused.png, in CONVERGE_SCREENSHOT_DIR when set).
func TestBrowserShowsRolloutPausedAtItsErrorThreshold(t *testing.T) {
	srv := pausedRollout(t)
	h, err := statuspage.New(statuspage.Options{Title: "fleet", Rollouts: srv.Rollouts})
	require.NoError(t, err)
	web := httptest.NewServer(h)
	defer web.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	bctx := statuspagetest.Browser(ctx, t)
	var state, reason, waves, attention string
	var shot []byte
	require.NoError(t, chromedp.Run(bctx,
		chromedp.EmulateViewport(1200, 900),
		chromedp.Navigate(web.URL+"/?refresh=off"),
		chromedp.WaitVisible("#rollout-firmware-2", chromedp.ByQuery),
		chromedp.Text("#rollout-firmware-2 .rollout-state", &state, chromedp.ByQuery),
		chromedp.Text("#rollout-firmware-2 .rollout-reason", &reason, chromedp.ByQuery),
		chromedp.Text("#rollout-firmware-2 table.waves", &waves, chromedp.ByQuery),
		chromedp.Text("#attention", &attention, chromedp.ByQuery),
		chromedp.Screenshot("#rollout-firmware-2", &shot, chromedp.ByQuery),
	))
	assert.Equal(t, "paused", state)
	assert.Equal(t, "quarter reached its error threshold: 1 of 10 devices failed (threshold 5%)", reason)
	assert.Regexp(t, `canary\s+completed\s+2\s+0\s+0\s+2\s+0`, waves)
	assert.Regexp(t, `quarter\s+running\s+10\s+0\s+0\s+9\s+1`, waves)
	assert.Regexp(t, `the rest\s+pending\s+28\s+28\s+0\s+0\s+0`, waves)
	assert.Contains(t, attention, "rollout paused")

	dir := os.Getenv(screenshotDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rollout-paused.png"), shot, 0o644))
	t.Logf("screenshot in %s", dir)
	img, err := png.Decode(bytes.NewReader(shot))
	require.NoError(t, err)
	assert.Greater(t, img.Bounds().Dy(), 100, "the section holds its waves")
	assert.Greater(t, redShare(img), 0.001, "the state and the reason are drawn red")
}
