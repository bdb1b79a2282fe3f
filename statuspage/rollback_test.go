package statuspage_test

import (
	"context"
	"errors"
	"net/http"
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

// appRelease builds a target that is one release of an app; releases
// named "bad..." never start.
func appRelease() converge.TargetBuildFunc[string] {
	app := &convergetest.Item{Key: "app", Refuse: func(target string) error {
		if strings.HasPrefix(target, "bad") {
			return errors.New("crash loop")
		}
		return nil
	}}
	return func(_ context.Context, target string) ([]converge.TargetStage, error) {
		app.Goal = target
		g := converge.NewGraph()
		g.Add(app.Node(), converge.Present)
		return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
	}
}

func TestRolledBackTargetNeedsAttentionUntilANewTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		build := appRelease()
		r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{Build: build, RollbackAfter: 2,
			Backoff: converge.Backoff{Base: time.Second, Max: time.Second}})
		require.NoError(t, err)
		tg := statuspage.WatchTarget(r, statuspage.TargetOptions[string]{Name: "device"})
		t.Cleanup(tg.Close)
		h, err := statuspage.New(statuspage.Options{Targets: []*statuspage.Target{tg}, Dot: "-"})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		stopped := make(chan error, 1)
		go func() { stopped <- r.Run(ctx) }()

		rolledBack := func() []statuspage.AttentionItem {
			var ov statuspage.OverviewView
			getJSON(t, h, "/", &ov)
			var out []statuspage.AttentionItem
			for _, it := range ov.NeedsAttention {
				if it.Problem == statuspage.ProblemRolledBack {
					out = append(out, it)
				}
			}
			return out
		}

		require.NoError(t, r.SetTarget(t.Context(), "v1"))
		synctest.Wait()
		require.NoError(t, r.SetTarget(t.Context(), "bad-v2"))
		time.Sleep(time.Minute)
		synctest.Wait()

		items := rolledBack()
		require.Len(t, items, 1)
		assert.Equal(t, "device", items[0].Name)
		assert.Equal(t, uint64(2), items[0].Revision)
		assert.Equal(t, 2, items[0].Repeats)
		assert.Contains(t, items[0].Error, "revision 2 rolled back to revision 1")
		assert.Contains(t, items[0].Error, "crash loop")
		var v statuspage.TargetView
		getJSON(t, h, "/targets/device", &v)
		require.NotNil(t, v.RolledBack)
		assert.Equal(t, uint64(3), v.RolledBack.Revision)
		code, page := get(t, h, "/targets/device", false)
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, page, "revision 2 rolled back to revision 1")
		code, page = get(t, h, "/", false)
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, page, statuspage.ProblemRolledBack)

		require.NoError(t, r.SetTarget(t.Context(), "v4"))
		synctest.Wait()
		assert.Empty(t, rolledBack(), "a new target clears it")
		var after statuspage.TargetView
		getJSON(t, h, "/targets/device", &after)
		assert.Nil(t, after.RolledBack)
		cancel()
		require.NoError(t, <-stopped)
	})
}
