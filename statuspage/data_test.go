package statuspage_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/statuspage"
)

func TestObjectDataIsHiddenUnlessShowData(t *testing.T) {
	c := fleet(t)
	for _, show := range []bool{false, true} {
		t.Run(fmt.Sprint("ShowData=", show), func(t *testing.T) {
			h, err := statuspage.New(statuspage.Options{
				Controllers: []statuspage.Controller{{Controller: c, States: []controller.State{stateNew, stateWaiting, stateReady}}},
				ShowData:    show,
			})
			require.NoError(t, err)
			var v statuspage.ObjectView
			getJSON(t, h, "/controllers/host/objects/ready-1", &v)
			_, html := get(t, h, "/controllers/host/objects/ready-1", false)
			_, raw := get(t, h, "/controllers/host/objects/ready-1", true)
			if show {
				assert.JSONEq(t, `{"password":"`+statuspage.MaskSecret+`"}`, string(v.Data), "shown, its secret masked")
				assert.Contains(t, html, statuspage.MaskSecret)
				assert.NotContains(t, raw, "hunter2")
				assert.NotContains(t, html, "hunter2")
				return
			}
			assert.Empty(t, v.Data)
			assert.NotContains(t, raw, "hunter2")
			assert.NotContains(t, html, "hunter2")
		})
	}
}

// fakeDot writes a stand-in for Graphviz dot into a new directory: it
// counts its runs in the file "runs", fails when another run is under
// way (the directory "running" exists), and draws an empty SVG.
func fakeDot(t *testing.T) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "dot")
	script := fmt.Sprintf(`#!/bin/sh
echo run >> %[1]q/runs
mkdir %[1]q/running || { echo "another dot runs" >&2; exit 3; }
cat >/dev/null
sleep 0.2
rmdir %[1]q/running
echo '<svg xmlns="http://www.w3.org/2000/svg"></svg>'
`, dir)
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path, dir
}

// dotRuns counts the runs of the fakeDot in dir.
func dotRuns(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "runs"))
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "run\n")
}

func TestGraphRunsOneDotAtATimeAndCachesPerRevision(t *testing.T) {
	dot, dir := fakeDot(t)
	const stages = 3
	build := func(ctx context.Context, goal string) ([]converge.TargetStage, error) {
		var out []converge.TargetStage
		for i := range stages {
			d := newDevice()
			d.dir.Key, d.file.Key = converge.ID(fmt.Sprintf("dir-%d", i)), converge.ID(fmt.Sprintf("file-%d", i))
			g := converge.NewGraph()
			g.Add(d.dir.Node(), converge.Present)
			g.Add(d.file.Node(), converge.Present, d.dir.Key)
			out = append(out, converge.TargetStage{Name: fmt.Sprintf("stage-%d", i), Graph: g})
		}
		return out, nil
	}
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{Build: build})
	require.NoError(t, err)
	require.NoError(t, r.SetTarget(t.Context(), "v1"))
	tg := statuspage.WatchTarget(r, statuspage.TargetOptions[string]{Build: build})
	defer tg.Close()
	h, err := statuspage.New(statuspage.Options{Targets: []*statuspage.Target{tg}, Dot: dot})
	require.NoError(t, err)

	// Every stage asked for three times at once.
	fetchAll := func() {
		var wg sync.WaitGroup
		for i := range 3 * stages {
			wg.Go(func() {
				req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("/targets/target/graph.svg?stage=%d", i%stages), nil)
				if !assert.NoError(t, err) {
					return
				}
				rec := newRecorder(h, req)
				assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				assert.Contains(t, rec.Body.String(), "<svg")
			})
		}
		wg.Wait()
	}
	fetchAll()
	assert.Equal(t, stages, dotRuns(t, dir), "each stage drawn once")
	fetchAll()
	assert.Equal(t, stages, dotRuns(t, dir), "the same revision is not drawn again")

	require.NoError(t, r.SetTarget(t.Context(), "v2"))
	fetchAll()
	assert.Equal(t, 2*stages, dotRuns(t, dir), "a new revision is drawn again")
}
