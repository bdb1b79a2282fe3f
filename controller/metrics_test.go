package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

func TestMetricsAreNamedLikeControllerRuntime(t *testing.T) {
	all := controller.AllMetrics()
	require.Len(t, all, 21)
	names := map[string]bool{}
	for _, m := range all {
		t.Run(m.Name, func(t *testing.T) {
			assert.False(t, names[m.Name], "declared once")
			names[m.Name] = true
			assert.True(t, strings.HasPrefix(m.Name, "converge_controller_"))
			assert.NotEmpty(t, m.Help)
			require.NotEmpty(t, m.Labels)
			assert.Equal(t, "controller", m.Labels[0], "the controller's kind comes first")
			assert.NotContains(t, m.Labels, "key", "never an object key")
			switch m.Kind {
			case converge.MetricCounter:
				assert.True(t, strings.HasSuffix(m.Name, "_total"))
			case converge.MetricHistogram:
				assert.True(t, strings.HasSuffix(m.Name, "_seconds"))
			case converge.MetricGauge:
				assert.False(t, strings.HasSuffix(m.Name, "_total"))
			default:
				t.Fatalf("kind %v", m.Kind)
			}
		})
	}
}

// lifecycleHandler moves "new" objects to "provisioning", fails there
// twice per object before moving on to "ready", and gives up on objects
// in "doomed" with a terminal error.
func lifecycleHandler() controller.Handler {
	var mu sync.Mutex
	fails := map[string]int{}
	return controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
		switch o.State {
		case "new":
			return controller.Transition("provisioning"), nil
		case "provisioning":
			mu.Lock()
			defer mu.Unlock()
			if fails[o.Key] < 2 {
				fails[o.Key]++
				return controller.Result{}, errors.New("disk not ready")
			}
			return controller.Transition("ready"), nil
		case "doomed":
			return controller.Result{}, controller.Terminal(errors.New("no such image"))
		}
		return controller.NoChange(), nil
	})
}

// runLifecycle runs a controller of kind "vm" with lifecycleHandler and
// cfg's Owner, Metrics and Logger on the objects (key, state, key,
// state, ...) for ten minutes of the bubble's clock, until every run
// settled, and returns the function that stops it.
func runLifecycle(t *testing.T, cfg controller.Config, objects ...string) (stop func() error) {
	t.Helper()
	ctx := context.Background()
	cfg.Kind, cfg.Handler = "vm", lifecycleHandler()
	cfg.Backoff = converge.Backoff{Base: time.Second, Max: time.Minute}
	c, err := controller.New(cfg)
	require.NoError(t, err)
	for i := 0; i+1 < len(objects); i += 2 {
		require.NoError(t, c.Add(ctx, objects[i], controller.State(objects[i+1]), nil))
	}
	stop = startController(t, c)
	time.Sleep(10 * time.Minute)
	synctest.Wait()
	return stop
}

func TestMetricsFollowTheLifecycleInEachMode(t *testing.T) {
	inEachMode(t, func(t *testing.T, owner string) {
		m := newCtrlMetrics()
		stop := runLifecycle(t, controller.Config{Owner: owner, Metrics: m}, "a", "new", "b", "new", "d", "doomed")
		lastOK := time.Now()
		require.NoError(t, stop())

		assert.Equal(t, 5, m.value(controller.MetricReconciles, "vm", "error"), "four failures and a terminal error")
		assert.GreaterOrEqual(t, m.value(controller.MetricReconciles, "vm", "success"), 4, "two transitions per object")
		last := m.Value(controller.MetricLastSuccess.Name, "vm")
		assert.Positive(t, last)
		assert.LessOrEqual(t, last, float64(lastOK.UnixNano())/1e9)
		assert.Equal(t, 0, m.in("new"))
		assert.Equal(t, 0, m.in("provisioning"))
		assert.Equal(t, 2, m.in("ready"))
		assert.Equal(t, 1, m.in("doomed"))
		assert.Equal(t, 2, m.value(controller.MetricStateEntered, "vm", "provisioning"))
		assert.Equal(t, 2, m.value(controller.MetricStateExited, "vm", "provisioning"))
		inProvisioning := m.observed(controller.MetricTimeInState, "vm", "provisioning")
		require.Len(t, inProvisioning, 2)
		for _, s := range inProvisioning {
			assert.GreaterOrEqual(t, s, 3.0, "two backoffs of at least a second and a half each")
		}
		assert.Len(t, m.observed(controller.MetricHandlerDuration, "vm", "provisioning"), 6, "two objects, three runs each")
		assert.Equal(t, 5, m.errs("provisioning")+m.errs("doomed"), "four failures and a terminal error")
		assert.Equal(t, 1, m.value(controller.MetricTerminalErrors, "vm", "doomed"))
		assert.Equal(t, 0, m.value(controller.MetricTerminalErrors, "vm", "provisioning"))
		assert.Equal(t, 4, m.value(controller.MetricRetries, "vm"), "a terminal error is not retried")
		assert.Equal(t, 1, m.haltedIn(controller.HaltTerminal, "doomed"))
		assert.GreaterOrEqual(t, m.value(controller.MetricQueueAdds, "vm"), 3+2+4, "first runs, transitions, retries")
		assert.Equal(t, 0, m.value(controller.MetricQueueDepth, "vm"), "nothing waits at the end")
	})
}

func TestMetricsSeriesStayBoundedHoweverManyObjects(t *testing.T) {
	// The series of 100,000 objects are the series of 10: no label
	// carries an object key.
	seriesOf := func(t *testing.T, n int, owner string) (int, *ctrlMetrics) {
		m := newCtrlMetrics()
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c, err := controller.New(controller.Config{
				Kind: "vm", Owner: owner, Metrics: m, Handler: lifecycleHandler(), Workers: 8,
				Backoff: converge.Backoff{Base: time.Second, Max: time.Minute}, HandlerHistory: -1,
				SLA:    map[controller.State]time.Duration{"provisioning": time.Second},
				Resync: time.Hour,
			})
			require.NoError(t, err)
			for i := range n {
				state := controller.State("new")
				if i%10 == 0 {
					state = "doomed"
				}
				require.NoError(t, c.Add(ctx, fmt.Sprintf("vm-%06d", i), state, nil))
			}
			stop := startController(t, c)
			time.Sleep(time.Minute) // past every backoff, before the periodic pass
			synctest.Wait()
			require.NoError(t, stop())
			assert.Equal(t, n-n/10, m.in("ready"))
		})
		return len(m.Series()), m
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			n := 100_000
			if mode.owner != "" || testing.Short() {
				n = 10_000 // a replica (or -short) proves it on fewer, quicker
			}
			few, _ := seriesOf(t, 10, mode.owner)
			many, m := seriesOf(t, n, mode.owner)
			assert.Equal(t, few, many, "%d objects, %d series", n, many)
			assert.Less(t, many, 40)
			for _, s := range m.Series() {
				for _, v := range s.Labels {
					assert.NotContains(t, v, "vm-", "no object key in %s", s)
				}
			}
		})
	}
}

func TestLoggerRecordsEveryOutcomeWithItsObject(t *testing.T) {
	inEachMode(t, func(t *testing.T, owner string) {
		var buf bytes.Buffer // the JSON handler serializes its writes
		logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		stop := runLifecycle(t, controller.Config{Owner: owner, Logger: logger}, "a", "new", "d", "doomed")
		require.NoError(t, stop())

		type record struct {
			Level, Msg, Controller, Key, State, Outcome, Next, Error string
		}
		var got []record
		for line := range strings.Lines(buf.String()) {
			var r record
			require.NoError(t, json.Unmarshal([]byte(line), &r))
			assert.Equal(t, "vm", r.Controller)
			got = append(got, r)
		}
		want := []record{
			{Level: "INFO", Msg: "controller: handled", Controller: "vm", Key: "a", State: "new", Outcome: "transition", Next: "provisioning"},
			{Level: "WARN", Msg: "controller: handled", Controller: "vm", Key: "a", State: "provisioning", Outcome: "error", Error: "disk not ready"},
			{Level: "INFO", Msg: "controller: handled", Controller: "vm", Key: "a", State: "provisioning", Outcome: "transition", Next: "ready"},
			{Level: "DEBUG", Msg: "controller: handled", Controller: "vm", Key: "a", State: "ready", Outcome: "no-change"},
			{Level: "ERROR", Msg: "controller: handled", Controller: "vm", Key: "d", State: "doomed", Outcome: "terminal", Error: "no such image"},
		}
		for _, w := range want {
			assert.Contains(t, got, w)
		}
	})
}

// observerMetrics is ctrlMetrics with an Observer method, as the
// prometheus module's Metrics has: it counts the series it is asked to
// resolve and the values recorded through what it returns; with fail, it
// rejects every series.
type observerMetrics struct {
	ctrlMetrics
	fail bool

	mu       sync.Mutex
	resolved map[string]int // "kind/state", or "metric:labels" for the others: Observer calls
	via      map[string]int // the same keys: values recorded through them
}

func (m *observerMetrics) Observer(d *converge.Metric, labels ...string) (func(float64), error) {
	key := strings.Join(labels, "/")
	if d != controller.MetricHandlerDuration {
		key = d.Name + ":" + key
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resolved[key]++
	if m.fail {
		return nil, errors.New("rejected")
	}
	kept := append([]string(nil), labels...)
	return func(v float64) {
		m.mu.Lock()
		m.via[key]++
		m.mu.Unlock()
		m.ctrlMetrics.Observe(d, v, kept...)
	}, nil
}

func TestHandlerRunsAreTimedThroughAnObserverResolvedOncePerState(t *testing.T) {
	tests := []struct {
		name string
		fail bool
	}{
		{"the metrics' observer", false},
		{"Observe when the observer is refused", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inEachMode(t, func(t *testing.T, owner string) {
				m := &observerMetrics{fail: tt.fail, resolved: map[string]int{}, via: map[string]int{}}
				stop := runLifecycle(t, controller.Config{Owner: owner, Metrics: m}, "a", "new", "b", "new")
				require.NoError(t, stop())

				assert.Len(t, m.observed(controller.MetricHandlerDuration, "vm", "provisioning"), 6, "two objects, three runs each")
				require.Contains(t, m.resolved, "vm/provisioning")
				queued := controller.MetricQueueDuration.Name + ":vm"
				assert.Equal(t, 1, m.resolved[queued], "the queue duration's series resolved once")
				if !tt.fail {
					assert.Equal(t, len(m.observed(controller.MetricQueueDuration, "vm")), m.via[queued], "every queue duration through the observer")
				}
				delete(m.resolved, queued)
				for key, n := range m.resolved {
					assert.Equal(t, 1, n, "%s resolved once", key)
					state := strings.TrimPrefix(key, "vm/")
					runs := len(m.observed(controller.MetricHandlerDuration, "vm", state))
					if tt.fail {
						assert.Zero(t, m.via[key], "%s: nothing through a refused observer", key)
					} else {
						assert.Equal(t, runs, m.via[key], "%s: every run through the observer", key)
					}
				}
			})
		})
	}
}

// TestWorkersHandOverEveryRunBeforeTheyWait runs a controller on its
// own whose workers go from objects in one state to objects in another,
// across several hand-overs of what they hold (every 64 runs): while it
// idles, before Run returns, every run is in Metrics, each handler
// duration in its own state's series, and one queue duration per run.
func TestWorkersHandOverEveryRunBeforeTheyWait(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				m := &observerMetrics{resolved: map[string]int{}, via: map[string]int{}}
				// Runs far shorter than a millisecond: the workers hand over
				// by count, and before they wait.
				took := map[controller.State]time.Duration{"fast": time.Microsecond, "slow": 3 * time.Microsecond}
				c, err := controller.New(controller.Config{
					Kind: "vm", Workers: workers, Metrics: m, Resync: time.Hour,
					Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
						time.Sleep(took[o.State])
						return controller.NoChange(), nil
					}),
				})
				require.NoError(t, err)
				const n = 301
				for i := range n {
					state := controller.State("fast")
					if i%2 == 1 {
						state = "slow"
					}
					require.NoError(t, c.Add(ctx, fmt.Sprintf("vm-%03d", i), state, nil))
				}
				stop := startController(t, c)
				time.Sleep(time.Minute) // every object run once, long before the periodic pass
				synctest.Wait()

				fast := m.observed(controller.MetricHandlerDuration, "vm", "fast")
				slow := m.observed(controller.MetricHandlerDuration, "vm", "slow")
				assert.Len(t, fast, n/2+1)
				assert.Len(t, slow, n/2)
				for _, v := range fast {
					assert.InDelta(t, 1e-6, v, 1e-12, "a fast run in the fast series")
				}
				for _, v := range slow {
					assert.InDelta(t, 3e-6, v, 1e-12, "a slow run in the slow series")
				}
				assert.Equal(t, n/2+1, m.via["vm/fast"], "through the fast state's observer")
				assert.Equal(t, n/2, m.via["vm/slow"], "through the slow state's observer")
				assert.Len(t, m.observed(controller.MetricQueueDuration, "vm"), n, "one queue duration per run")
				assert.Equal(t, n, m.value(controller.MetricReconciles, "vm", "success"))
				assert.Positive(t, m.Value(controller.MetricLastSuccess.Name, "vm"))
				assert.Equal(t, 0, m.value(controller.MetricQueueDepth, "vm"))

				require.NoError(t, stop())
				assert.Len(t, m.observed(controller.MetricHandlerDuration, "vm", "fast"), n/2+1, "nothing more when Run returns")
				assert.Equal(t, n, m.value(controller.MetricReconciles, "vm", "success"))
			})
		})
	}
}
