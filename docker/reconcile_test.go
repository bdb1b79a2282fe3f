package docker_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// runLoop starts a target reconciler for p on eng, fed by engine events,
// and returns a channel of pass outcomes (nil for a finished pass) and a
// stop function.
func runLoop(t *testing.T, eng docker.Engine, p docker.Project) (*converge.TargetReconciler[docker.Project], <-chan error, func()) {
	t.Helper()
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[docker.Project]{Build: docker.TargetBuild(eng)})
	require.NoError(t, err)
	passes := make(chan error, 100)
	unsub := r.Subscribe(func(e converge.TargetEvent) {
		switch e.Kind {
		case converge.TargetPassFinished:
			passes <- nil
		case converge.TargetPassFailed:
			passes <- e.Err
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, r.SetTarget(ctx, p))
	stopWatch, err := docker.WatchEvents(ctx, eng, p.Name, func(docker.Event) { r.Trigger() })
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		_ = r.Run(ctx)
		close(done)
	}()
	return r, passes, func() {
		stopWatch()
		cancel()
		<-done
		unsub()
	}
}

func TestFaultsUnderReconcileLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.FailWrites(0.3, 42)
		p := load(t, threeServices)
		r, passes, stop := runLoop(t, f, *p)
		defer stop()
		// waitFor reads pass outcomes until a pass finishes with cond true.
		waitFor := func(cond func() bool) (failures int) {
			for err := range passes {
				if err == nil && cond() {
					return failures
				}
				if err != nil {
					require.ErrorIs(t, err, dockertest.ErrTransient)
					failures++
				}
			}
			return failures
		}
		all := []string{"shop-db=running", "shop-web=running", "shop-worker=running"}
		n := waitFor(func() bool { return assert.ObjectsAreEqual(all, names(f.Containers())) })
		t.Logf("up: %d failed passes before convergence", n)

		// A new target under faults: db recreated, no temporary container left.
		oldDB, _ := f.Container("shop-db")
		p2 := load(t, strings.Replace(threeServices, "MODE: primary", "MODE: replica", 1))
		require.NoError(t, r.SetTarget(t.Context(), *p2))
		n = waitFor(func() bool {
			db, _ := f.Container("shop-db")
			return db.ID != oldDB.ID && assert.ObjectsAreEqual(all, names(f.Containers()))
		})
		t.Logf("change: %d failed passes before convergence", n)

		// A kill is reported by an engine event; the loop brings it back.
		f.Kill("shop-web")
		waitFor(func() bool { return assert.ObjectsAreEqual(all, names(f.Containers())) })
		for _, c := range f.Containers() {
			assert.NotContains(t, c.Name, "tmp", "no orphan temporary container")
		}
	})
}
