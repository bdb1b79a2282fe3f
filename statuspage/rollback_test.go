package statuspage_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/statuspage"
)

// appRelease is an Item[string] whose releases named "bad..." never apply.
type appRelease struct {
	mu   sync.Mutex
	goal string
	run  string
}

func (a *appRelease) ID() converge.ID { return "app" }
func (a *appRelease) StateCurrent(context.Context, converge.DepStates) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.run, nil
}
func (a *appRelease) StateGoal(context.Context, converge.DepStates) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.goal, nil
}
func (a *appRelease) Check(_ context.Context, cur, target string) (converge.Decision, error) {
	if cur == target {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (a *appRelease) Apply(_ context.Context, cur, target string) (string, error) {
	if strings.HasPrefix(target, "bad") {
		return cur, errors.New("crash loop")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.run = target
	return target, nil
}
func (a *appRelease) ApplyDry(_ context.Context, _, target string) (string, error) {
	return target, nil
}

func (a *appRelease) build(_ context.Context, target string) ([]converge.TargetStage, error) {
	a.mu.Lock()
	a.goal = target
	a.mu.Unlock()
	g := converge.NewGraph()
	g.Add(converge.Wrap[string](a), converge.Present)
	return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
}

func TestRolledBackTargetNeedsAttentionUntilANewTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app := &appRelease{}
		r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{Build: app.build, RollbackAfter: 2,
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
