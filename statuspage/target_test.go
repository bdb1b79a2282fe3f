package statuspage_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/statuspage"
)

// device is a target of two items, "dir" and "file" after it.
type device struct{ dir, file *convergetest.Item }

func newDevice() *device {
	return &device{dir: &convergetest.Item{Key: "dir"}, file: &convergetest.Item{Key: "file"}}
}

// kernel is an item that asks for a reboot when it changes.
type kernel struct{ *convergetest.Item }

func (k kernel) Apply(ctx context.Context, current, target string) (string, error) {
	converge.RequireAction(ctx, converge.ActionReboot, "kernel "+target)
	return k.Item.Apply(ctx, current, target)
}

func (d *device) build(_ context.Context, goal string) ([]converge.TargetStage, error) {
	d.dir.Goal, d.file.Goal = goal, goal
	g := converge.NewGraph()
	g.Add(converge.Wrap[string](kernel{d.dir}), converge.Present)
	g.Add(d.file.Node(), converge.Present, "dir")
	return []converge.TargetStage{{Name: "host", Graph: g}}, nil
}

// runDevice runs, in a synctest bubble, a reconciler of d at target "v1"
// (a minute of backoff after a failed pass), watched with its graph by a
// page, until the first pass ended; stop ends the run.
func runDevice(t *testing.T, d *device) (r *converge.TargetReconciler[string], h *statuspage.Handler, stop func()) {
	t.Helper()
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
		Build:   d.build,
		Backoff: converge.Backoff{Base: time.Minute, Max: time.Minute},
	})
	require.NoError(t, err)
	tg := statuspage.WatchTarget(r, statuspage.TargetOptions[string]{Name: "device", Build: d.build})
	h, err = statuspage.New(statuspage.Options{Targets: []*statuspage.Target{tg}, Dot: "-"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	require.NoError(t, r.SetTarget(ctx, "v1"))
	go func() { stopped <- r.Run(ctx) }()
	synctest.Wait()
	return r, h, func() {
		cancel()
		require.NoError(t, <-stopped)
		tg.Close()
	}
}

func TestTargetShowsPassesFailuresAndLocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		d.file.FailAt(converge.PhaseApply, 1, converge.ErrLocked)
		_, h, stop := runDevice(t, d)
		defer stop()

		watched := time.Now()
		var v statuspage.TargetView
		getJSON(t, h, "/targets/device", &v)
		assert.Equal(t, uint64(1), v.Revision)
		assert.True(t, v.AsOf.Equal(watched), "as of: %s", v.AsOf)
		assert.True(t, v.Since.Equal(watched), "the counts are since WatchTarget: %s", v.Since)
		assert.True(t, v.Graph)
		assert.True(t, v.Locked, "the first pass stopped at the update lock")
		assert.Equal(t, 1, v.Failed)
		assert.Equal(t, 1, v.FailuresInARow)
		require.NotNil(t, v.LastPass)
		assert.Equal(t, statuspage.PassFailed, v.LastPass.Result)
		assert.Equal(t, 60.0, v.LastPass.RetrySeconds)
		require.Len(t, v.Failures, 1)
		assert.Contains(t, v.Failures[0].Error, "update lock held")
		code, body := get(t, h, "/targets/device", false)
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, "held: the last pass stopped at it")
		assert.Contains(t, body, "update lock held")
		assert.Contains(t, body, "since "+watched.UTC().Format(time.RFC3339)+", when this page started counting; not kept across restarts")

		time.Sleep(2 * time.Minute) // the backoff, on synctest's clock
		synctest.Wait()
		v = statuspage.TargetView{} // decode afresh: omitted fields would keep their old values
		getJSON(t, h, "/targets/device", &v)
		assert.False(t, v.Locked)
		assert.Equal(t, 1, v.Finished)
		assert.Equal(t, 0, v.FailuresInARow)
		require.NotNil(t, v.LastPass)
		assert.Equal(t, statuspage.PassFinished, v.LastPass.Result)
		assert.Equal(t, 2, v.LastPass.Pass)
		assert.Positive(t, v.Changes)
		require.Len(t, v.Actions, 1)
		assert.Equal(t, statuspage.ActionRequiredView{At: v.Actions[0].At, Pass: 1, Item: "dir", Action: "reboot", Reason: "kernel v1"}, v.Actions[0])
		var ov statuspage.OverviewView
		getJSON(t, h, "/", &ov)
		require.Len(t, ov.Targets, 1)
		assert.True(t, v.AsOf.Equal(ov.AsOf), "as of: %s", v.AsOf)
		assert.Zero(t, ov.Targets[0].AsOf, "the overview says as of once, not per target")
		require.NotNil(t, v.Waterfall, "the target's page has the time line of its last pass")
		assert.Nil(t, ov.Targets[0].Waterfall, "the overview has none")
		assert.Equal(t, 2, v.Waterfall.Pass)
		assert.Equal(t, statuspage.PassFinished, v.Waterfall.Result)
		var rows []string
		for _, r := range v.Waterfall.Rows {
			rows = append(rows, fmt.Sprintf("%s#%d %s %s", r.Stage, r.Round, r.Item, r.Outcome))
		}
		assert.Equal(t, []string{"host#1 dir unchanged", "host#1 file changed", "host#2 dir unchanged", "host#2 file unchanged"}, rows,
			"every walk of the pass, the one that changed nothing too")
		v.AsOf, v.Waterfall = time.Time{}, nil
		assert.Equal(t, v, ov.Targets[0])
		code, body = get(t, h, "/", false)
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, `<a href="./targets/device">device</a>`)
		code, body = get(t, h, "/targets/device", false)
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, "reboot asked by dir in pass #1: kernel v1")

		var gv statuspage.GraphView
		getJSON(t, h, "/targets/device/graph", &gv)
		assert.True(t, gv.AsOf.Equal(time.Now()), "as of: %s", gv.AsOf)
		assert.False(t, gv.SVG)
		require.Len(t, gv.Stages, 1)
		assert.Equal(t, []statuspage.GraphItem{
			{ID: "dir", Presence: "present", Outcome: "unchanged"},
			{ID: "file", Presence: "present", Dependencies: []string{"dir"}, Outcome: "changed"},
		}, gv.Stages[0].Items)
		assert.Contains(t, gv.Stages[0].Mermaid, "flowchart")
		code, body = get(t, h, "/targets/device/graph", false)
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, "after dir")
		assert.NotContains(t, body, "<img", "no SVG without dot")
	})
}

func TestGraphIsSVGWhenDotIsThere(t *testing.T) {
	dot, err := exec.LookPath("dot")
	if err != nil {
		t.Skip("Graphviz dot is not on PATH: install graphviz to test the SVG graph")
	}
	d := newDevice()
	d.dir.Key = "<dir>"
	d.file.Key = "file"
	build := func(ctx context.Context, goal string) ([]converge.TargetStage, error) {
		g := converge.NewGraph()
		g.Add(d.dir.Node(), converge.Present)
		g.Add(d.file.Node(), converge.Present, "<dir>")
		return []converge.TargetStage{{Name: "host", Graph: g}}, nil
	}
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{Build: build})
	require.NoError(t, err)
	require.NoError(t, r.SetTarget(t.Context(), "v1"))
	tg := statuspage.WatchTarget(r, statuspage.TargetOptions[string]{Build: build})
	defer tg.Close()
	h, err := statuspage.New(statuspage.Options{Targets: []*statuspage.Target{tg}, Dot: dot})
	require.NoError(t, err)

	code, body := get(t, h, "/targets/target/graph", false)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `<img alt="graph of stage host" src="graph.svg?stage=0">`)
	assert.Contains(t, body, "&lt;dir&gt;")

	req, err := http.NewRequest(http.MethodGet, "/targets/target/graph.svg?stage=0", nil)
	require.NoError(t, err)
	rec := newRecorder(h, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, "image/svg+xml", rec.Header().Get("Content-Type"))
	svg := rec.Body.String()
	assert.True(t, strings.Contains(svg, "<svg"), svg)
	assert.Contains(t, svg, "&lt;dir&gt;", "dot escapes the IDs")
	assert.NotContains(t, svg, "<dir>")

	req, err = http.NewRequest(http.MethodGet, "/targets/target/graph.svg?stage=1", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, newRecorder(h, req).Code)
}

// Failed passes in a row with the same error are one entry of
// TargetView.Failures, counted; the target is on the overview's Needs
// attention list while its last pass failed.
func TestTargetGroupsIdenticalFailuresAndNeedsAttention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		errRefused := errors.New("connection refused")
		d.file.FailAt(converge.PhaseApply, 3, errRefused)
		r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
			Build:   d.build,
			Backoff: converge.Backoff{Base: time.Minute, Max: time.Minute},
		})
		require.NoError(t, err)
		tg := statuspage.WatchTarget(r, statuspage.TargetOptions[string]{Name: "device"})
		defer tg.Close()
		h, err := statuspage.New(statuspage.Options{Targets: []*statuspage.Target{tg}, Dot: "-"})
		require.NoError(t, err)

		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		require.NoError(t, r.SetTarget(ctx, "v1"))
		first := time.Now()
		go func() { stopped <- r.Run(ctx) }()
		synctest.Wait()
		time.Sleep(150 * time.Second) // two more failures, a minute apart
		synctest.Wait()

		var v statuspage.TargetView
		getJSON(t, h, "/targets/device", &v)
		require.Equal(t, 3, v.Failed)
		require.Len(t, v.Failures, 1, "three identical failures are one entry")
		f := v.Failures[0]
		assert.Equal(t, 3, f.Repeats)
		assert.Equal(t, 3, f.Pass, "the newest of them")
		assert.True(t, f.FirstAt.Equal(first), "first seen %s", f.FirstAt)
		assert.Contains(t, f.Error, "connection refused")
		_, body := get(t, h, "/targets/device", false)
		assert.Equal(t, 1, strings.Count(body, `<b class="repeats">×3</b>`), body)

		// The kernel item asked for a reboot, which is pending too.
		var ov statuspage.OverviewView
		getJSON(t, h, "/", &ov)
		require.Equal(t, []string{"device: " + statuspage.ProblemPassFailed, "device: " + statuspage.ProblemActionPending}, problems(ov.NeedsAttention))
		it := ov.NeedsAttention[0]
		assert.Equal(t, statuspage.AttentionItem{Kind: "target", Name: "device", Problem: statuspage.ProblemPassFailed,
			Error: f.Error, Since: f.At, Repeats: 3, Path: "targets/device"}, it)

		time.Sleep(time.Minute) // the next pass succeeds
		synctest.Wait()
		ov = statuspage.OverviewView{}
		getJSON(t, h, "/", &ov)
		assert.Equal(t, []string{"device: " + statuspage.ProblemActionPending}, problems(ov.NeedsAttention), "its last pass finished")
		cancel()
		require.NoError(t, <-stopped)
	})
}
