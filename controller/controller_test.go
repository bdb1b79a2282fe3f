package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/convergetest"
)

// ctrlMetrics records what a Controller reports, checking every call
// against the metric's declaration (convergetest.Metrics panics on
// misuse), and reads it back by descriptor.
type ctrlMetrics struct{ convergetest.Metrics }

func newCtrlMetrics() *ctrlMetrics { return &ctrlMetrics{} }

// value returns the counter or gauge of a series, as an int.
func (r *ctrlMetrics) value(m *converge.Metric, labels ...string) int {
	return int(r.Value(m.Name, labels...))
}

// observed returns the values a histogram series observed.
func (r *ctrlMetrics) observed(m *converge.Metric, labels ...string) []float64 {
	return r.Observations(m.Name, labels...)
}

// in returns the gauge of objects of kind "vm" in state.
func (r *ctrlMetrics) in(state controller.State) int {
	return r.value(controller.MetricObjects, "vm", string(state))
}

// errs returns the errors counted for kind "vm" in state.
func (r *ctrlMetrics) errs(state controller.State) int {
	return r.value(controller.MetricErrors, "vm", string(state))
}

// haltedIn returns the gauge of objects of kind "vm" in state halted for
// cause.
func (r *ctrlMetrics) haltedIn(cause controller.Halt, s controller.State) int {
	return r.value(controller.MetricHalted, "vm", string(s), string(cause))
}

// startController runs c until the returned stop function is called, which
// returns Run's error.
func startController(t *testing.T, c *controller.Controller) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestControllerConfigValidate(t *testing.T) {
	h := controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
		return controller.NoChange(), nil
	})
	tests := []struct {
		name  string
		cfg   controller.Config
		field string
	}{
		{"no kind", controller.Config{Handler: h}, "Kind"},
		{"slash in kind", controller.Config{Kind: "a/b", Handler: h}, "Kind"},
		{"no handler", controller.Config{Kind: "k"}, "Handler"},
		{"negative workers", controller.Config{Kind: "k", Handler: h, Workers: -1}, "Workers"},
		{"negative resync", controller.Config{Kind: "k", Handler: h, Resync: -1}, "Resync"},
		{"jitter above 1", controller.Config{Kind: "k", Handler: h, ResyncJitter: 2}, "ResyncJitter"},
		{"negative shutdown", controller.Config{Kind: "k", Handler: h, ShutdownTimeout: -1}, "ShutdownTimeout"},
		{"negative lease", controller.Config{Kind: "k", Handler: h, LeaseTTL: -1}, "LeaseTTL"},
		{"negative renew deadline", controller.Config{Kind: "k", Handler: h, RenewDeadline: -1}, "RenewDeadline"},
		{"renew deadline at the lease", controller.Config{Kind: "k", Handler: h, LeaseTTL: time.Second, RenewDeadline: time.Second}, "RenewDeadline"},
		{"renew deadline above the default lease", controller.Config{Kind: "k", Handler: h, RenewDeadline: controller.DefaultLeaseTTL}, "RenewDeadline"},
		{"zero sla", controller.Config{Kind: "k", Handler: h, SLA: map[controller.State]time.Duration{"x": 0}}, "SLA"},
		{"bad backoff", controller.Config{Kind: "k", Handler: h, Backoff: converge.Backoff{Jitter: 3}}, "Backoff.Jitter"},
		{"negative quarantine", controller.Config{Kind: "k", Handler: h, QuarantineAfter: -1}, "QuarantineAfter"},
		{"negative state quarantine", controller.Config{Kind: "k", Handler: h, QuarantineAfterIn: map[controller.State]int{"x": -2}}, "QuarantineAfterIn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := controller.New(tt.cfg)
			require.ErrorIs(t, err, converge.ErrInvalidConfig)
			var ce *converge.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.field, ce.Field)
		})
	}
	c, err := controller.New(controller.Config{Kind: "k", Handler: h})
	require.NoError(t, err)
	assert.Equal(t, "k", c.Kind())
}

func TestControllerAddRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	c, err := controller.New(controller.Config{Kind: "vm", Handler: controller.HandlerFunc(
		func(context.Context, controller.Object) (controller.Result, error) {
			return controller.NoChange(), nil
		})})
	require.NoError(t, err)
	tests := []struct {
		name  string
		key   string
		state controller.State
		data  json.RawMessage
		want  error
	}{
		{"empty key", "", "new", nil, controller.ErrObjectInvalid},
		{"empty state", "a", "", nil, controller.ErrObjectInvalid},
		{"bad data", "a", "new", json.RawMessage(`{`), controller.ErrObjectInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Add(ctx, tt.key, tt.state, tt.data)
			require.ErrorIs(t, err, tt.want)
			var oe *controller.ObjectError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, "vm", oe.Kind)
		})
	}
	require.NoError(t, c.Add(ctx, "a", "new", nil))
	require.ErrorIs(t, c.Add(ctx, "a", "new", nil), controller.ErrObjectExists)
	require.ErrorIs(t, c.Request(ctx, "zz", "delete"), controller.ErrObjectNotFound)
	assert.Equal(t, 1, c.Len())
}

// lifecycle is a handler that moves objects new -> provisioning -> ready.
func lifecycle(ctx context.Context, o controller.Object) (controller.Result, error) {
	switch o.State {
	case "new":
		return controller.Transition("provisioning").Because("accepted"), nil
	case "provisioning":
		return controller.Transition("ready").WithData(json.RawMessage(`{"ip":"10.0.0.7"}`)), nil
	default:
		return controller.NoChange(), nil
	}
}

func TestControllerTransitionsRunAtOnceAndAreStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		m := newCtrlMetrics()
		c, err := controller.New(controller.Config{
			Kind: "vm", Handler: controller.HandlerFunc(lifecycle), Store: store, Metrics: m,
		})
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, c.Add(ctx, "a", "new", json.RawMessage(`{"size":1}`)))
		stop := startController(t, c)
		synctest.Wait()

		o, ok := c.Get("a")
		require.True(t, ok)
		assert.Equal(t, controller.State("ready"), o.State)
		assert.Equal(t, start, o.Since, "transitions ran at once, without waiting for a periodic pass")
		assert.JSONEq(t, `{"ip":"10.0.0.7"}`, string(o.Data))

		h, err := c.History(ctx, "a")
		require.NoError(t, err)
		assert.Equal(t, []converge.HistoryEntry{
			{At: start, To: "new", Reason: "added"},
			{At: start, From: "new", To: "provisioning", Reason: "accepted"},
			{At: start, From: "provisioning", To: "ready"},
		}, h)

		rec, err := store.Get(ctx, "vm/a")
		require.NoError(t, err)
		assert.Equal(t, o.Version, rec.Version)
		var stored controller.Object
		require.NoError(t, json.Unmarshal(rec.Value, &stored))
		assert.Equal(t, controller.State("ready"), stored.State)
		assert.True(t, stored.Since.Equal(start))
		assert.JSONEq(t, fmt.Sprintf(`{"state":"ready","since":%q,"data":{"ip":"10.0.0.7"}}`, start.Format(time.RFC3339Nano)), string(rec.Value))

		require.NoError(t, stop())
		assert.Equal(t, 1, m.in("ready"))
		assert.Equal(t, 0, m.in("new"))
		assert.Equal(t, 1, m.value(controller.MetricStateEntered, "vm", "provisioning"))
		assert.Equal(t, 1, m.value(controller.MetricStateExited, "vm", "provisioning"))
		assert.Len(t, m.observed(controller.MetricTimeInState, "vm", "provisioning"), 1)
		runs := 0
		for _, s := range []string{"new", "provisioning", "ready"} {
			runs += len(m.observed(controller.MetricHandlerDuration, "vm", s))
		}
		assert.Equal(t, 3, runs)
	})
}

func TestControllerResumesFromStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		stuck := controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
			if o.State == "new" {
				return controller.Transition("provisioning"), nil
			}
			return controller.Wait("no capacity"), nil
		})
		c1, err := controller.New(controller.Config{Kind: "vm", Handler: stuck, Store: store})
		require.NoError(t, err)
		require.NoError(t, c1.Add(ctx, "a", "new", nil))
		stop := startController(t, c1)
		synctest.Wait()
		require.NoError(t, stop())
		o, _ := c1.Get("a")
		assert.Equal(t, "no capacity", o.Reason)

		// A new process over the same store picks up where the last stopped.
		c2, err := controller.New(controller.Config{Kind: "vm", Handler: controller.HandlerFunc(lifecycle), Store: store})
		require.NoError(t, err)
		stop = startController(t, c2)
		synctest.Wait()
		require.NoError(t, stop())
		o, ok := c2.Get("a")
		require.True(t, ok)
		assert.Equal(t, controller.State("ready"), o.State)
		assert.Empty(t, o.Reason)
		assert.Len(t, c2.Objects(), 1)
		require.ErrorIs(t, c2.Run(ctx), controller.ErrRunning)
	})
}

func TestControllerPeriodicPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var runs []time.Time
		c, err := controller.New(controller.Config{Kind: "vm", Handler: controller.HandlerFunc(
			func(context.Context, controller.Object) (controller.Result, error) {
				mu.Lock()
				runs = append(runs, time.Now())
				mu.Unlock()
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(context.Background(), "a", "ready", nil))
		start := time.Now()
		stop := startController(t, c)
		time.Sleep(5 * time.Minute)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, start, runs[0])
		require.GreaterOrEqual(t, len(runs), 9)
		require.LessOrEqual(t, len(runs), 11)
		jittered := false
		for i := 1; i < len(runs); i++ {
			gap := runs[i].Sub(runs[i-1])
			assert.GreaterOrEqual(t, gap, 30*time.Second)
			assert.LessOrEqual(t, gap, 33*time.Second)
			jittered = jittered || gap != 30*time.Second
		}
		assert.True(t, jittered, "passes are spread by jitter")
	})
}

func TestControllerRequeueAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int32
		c, err := controller.New(controller.Config{Kind: "vm", Handler: controller.HandlerFunc(
			func(context.Context, controller.Object) (controller.Result, error) {
				runs.Add(1)
				return controller.Wait("polling").After(time.Second), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(context.Background(), "a", "ready", nil))
		stop := startController(t, c)
		time.Sleep(10*time.Second + time.Millisecond)
		require.NoError(t, stop())
		assert.Equal(t, int32(11), runs.Load())
	})
}

func TestControllerBackoffGrowsCapsAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var runs []time.Time
		failing := true
		m := newCtrlMetrics()
		c, err := controller.New(controller.Config{
			Kind: "vm", Metrics: m,
			Backoff: converge.Backoff{Base: time.Second, Max: 8 * time.Second},
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				runs = append(runs, time.Now())
				if failing {
					return controller.Result{}, errors.New("cloud API down")
				}
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(context.Background(), "a", "provisioning", nil))
		stop := startController(t, c)
		time.Sleep(40 * time.Second)
		mu.Lock()
		var gaps []time.Duration
		for i := 1; i < len(runs); i++ {
			gaps = append(gaps, runs[i].Sub(runs[i-1]))
		}
		assert.Equal(t, []time.Duration{1, 2, 4, 8, 8, 8, 8}, scale(gaps, time.Second), "doubling up to the cap")
		failing = false
		mu.Unlock()
		time.Sleep(8 * time.Second) // the next retry succeeds
		mu.Lock()
		failing = true
		n := len(runs)
		mu.Unlock()
		require.NoError(t, c.Enqueue(t.Context(), "a"))
		synctest.Wait()
		time.Sleep(time.Second + time.Millisecond)
		mu.Lock()
		assert.Equal(t, n+2, len(runs), "after a success the backoff starts again at Base")
		assert.Equal(t, time.Second, runs[n+1].Sub(runs[n]))
		mu.Unlock()
		require.NoError(t, stop())
		assert.Equal(t, 10, m.errs("provisioning"), "8 failures, one success, 2 failures")
	})
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / unit
	}
	return out
}

func TestControllerSLA(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newCtrlMetrics()
		var ready atomic.Bool
		c, err := controller.New(controller.Config{
			Kind: "vm", Metrics: m,
			SLA: map[controller.State]time.Duration{"provisioning": 90 * time.Second},
			Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
				if o.State == "provisioning" {
					if ready.Load() {
						return controller.Transition("ready"), nil
					}
					return controller.Wait("no capacity"), nil
				}
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "provisioning", nil))
		require.NoError(t, c.Add(ctx, "b", "ready", nil))
		stop := startController(t, c)
		above := func() int { return m.value(controller.MetricAboveSLA, "vm", "provisioning") }

		time.Sleep(90 * time.Second)
		synctest.Wait()
		assert.Empty(t, c.AboveSLA())
		assert.Equal(t, 0, above())

		time.Sleep(time.Millisecond)
		synctest.Wait()
		got := c.AboveSLA()
		require.Len(t, got, 1)
		assert.Equal(t, "a", got[0].Key)
		assert.Equal(t, 1, above(), "the breach is reported when the SLA runs out, not at the next periodic pass")

		ready.Store(true)
		require.NoError(t, c.Enqueue(t.Context(), "a"))
		synctest.Wait()
		assert.Empty(t, c.AboveSLA())
		assert.Equal(t, 0, above(), "leaving the state clears the breach")
		require.NoError(t, stop())
	})
}

func TestControllerRequestAndDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var seen []string
		var mu sync.Mutex
		m := newCtrlMetrics()
		c, err := controller.New(controller.Config{Kind: "vm", Metrics: m, Handler: controller.HandlerFunc(
			func(_ context.Context, o controller.Object) (controller.Result, error) {
				mu.Lock()
				seen = append(seen, o.Intents...)
				mu.Unlock()
				for _, in := range o.Intents {
					switch in {
					case "delete":
						if o.State == "stopped" {
							return controller.Deleted(), nil
						}
						return controller.Transition("stopped"), nil
					case "note":
						return controller.Wait("noted"), nil
					}
				}
				if o.State == "stopped" {
					return controller.Deleted(), nil
				}
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "running", nil))
		stop := startController(t, c)
		synctest.Wait()

		require.NoError(t, c.Request(ctx, "a", "note"))
		synctest.Wait()
		o, ok := c.Get("a")
		require.True(t, ok)
		assert.Empty(t, o.Intents, "intents are cleared once handled")
		assert.Equal(t, "noted", o.Reason)

		require.NoError(t, c.Request(ctx, "a", "delete"))
		synctest.Wait()
		_, ok = c.Get("a")
		assert.False(t, ok)
		h, err := c.History(ctx, "a")
		require.NoError(t, err)
		require.Len(t, h, 3)
		assert.Equal(t, converge.HistoryEntry{At: time.Now(), From: "stopped", Reason: "deleted"}, h[2])
		mu.Lock()
		assert.Equal(t, []string{"note", "delete"}, seen)
		mu.Unlock()
		require.NoError(t, stop())
		assert.Equal(t, 0, m.in("running")+m.in("stopped"))
	})
}

func TestControllerHandlerPanicIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		m := newCtrlMetrics()
		c, err := controller.New(controller.Config{Kind: "vm", Metrics: m, Handler: controller.HandlerFunc(
			func(_ context.Context, o controller.Object) (controller.Result, error) {
				if n.Add(1) == 1 {
					panic("bug")
				}
				if o.State == "new" {
					return controller.Transition("done"), nil
				}
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(context.Background(), "a", "new", nil))
		stop := startController(t, c)
		time.Sleep(time.Second)
		require.NoError(t, stop())
		o, _ := c.Get("a")
		assert.Equal(t, controller.State("done"), o.State)
		assert.Equal(t, 1, m.errs("new"))
	})
}

func TestControllerShutdown(t *testing.T) {
	tests := []struct {
		name      string
		work      time.Duration // how long the handler takes, ignoring ctx
		wantErr   error
		wantTaken time.Duration
	}{
		{"handlers finish within the deadline", 2 * time.Second, nil, 2 * time.Second},
		{"handlers cancelled at the deadline", time.Hour, controller.ErrShutdownTimeout, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var finished atomic.Int32
				started := make(chan struct{}, 10)
				c, err := controller.New(controller.Config{
					Kind: "vm", Workers: 2, ShutdownTimeout: 5 * time.Second,
					Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
						started <- struct{}{}
						select {
						case <-time.After(tt.work):
							finished.Add(1)
							return controller.Transition("done"), nil
						case <-ctx.Done():
							return controller.Result{}, ctx.Err()
						}
					})})
				require.NoError(t, err)
				for _, k := range []string{"a", "b", "c"} {
					require.NoError(t, c.Add(context.Background(), k, "new", nil))
				}
				stop := startController(t, c)
				<-started
				<-started
				begin := time.Now()
				err = stop()
				if tt.wantErr != nil {
					require.ErrorIs(t, err, tt.wantErr)
					assert.Equal(t, "controller: vm: handlers did not finish in time after 5s", err.Error(), "reads once")
				} else {
					require.NoError(t, err)
				}
				assert.Equal(t, tt.wantTaken, time.Since(begin))
				assert.Len(t, started, 0, "no new work is taken after shutdown starts")
				if tt.wantErr == nil {
					assert.Equal(t, int32(2), finished.Load())
					done := 0
					for _, o := range c.Objects() {
						if o.State == "done" {
							done++
						}
					}
					assert.Equal(t, 2, done, "transitions of running handlers are stored")
				}
			})
		})
	}
}

func TestControllerConcurrentEnqueue(t *testing.T) {
	// 8 goroutines enqueue 10,000 keys at random; no key is ever handled
	// twice at once, and every key is handled after its last enqueue.
	const keys = 10000
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var seq atomic.Int64
		busy := make([]atomic.Int32, keys)
		lastStart := make([]atomic.Int64, keys)
		lastEnqueue := make([]atomic.Int64, keys)
		var overlaps, runs atomic.Int64
		name := func(i int) string { return fmt.Sprintf("k%05d", i) }
		c, err := controller.New(controller.Config{
			Kind: "obj", Workers: 8, Resync: time.Hour,
			Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
				var i int
				_, _ = fmt.Sscanf(o.Key, "k%05d", &i)
				if busy[i].Add(1) != 1 {
					overlaps.Add(1)
				}
				lastStart[i].Store(seq.Add(1))
				runs.Add(1)
				busy[i].Add(-1)
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		for i := range keys {
			require.NoError(t, c.Add(ctx, name(i), "ready", nil))
		}
		stop := startController(t, c)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 7))
				for range 5000 {
					i := r.IntN(keys)
					lastEnqueue[i].Store(seq.Add(1))
					_ = c.Enqueue(t.Context(), name(i))
				}
			})
		}
		wg.Wait()
		synctest.Wait() // every worker idle, every queued key handled
		require.NoError(t, stop())
		assert.Zero(t, overlaps.Load())
		for i := range keys {
			require.Greater(t, lastStart[i].Load(), lastEnqueue[i].Load(), "key %d", i)
		}
		assert.GreaterOrEqual(t, runs.Load(), int64(keys))
	})
}

func TestControllerFaults(t *testing.T) {
	// Handler and store fail at random 30% of the time (and 10% of the
	// writes that succeed report an error anyway); every object still
	// reaches its final state, and its history has every transition once.
	const objects = 300
	states := []controller.State{"new", "scheduled", "provisioning", "ready"}
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &convergetest.Store{FailRate: 0.3, LostReplyRate: 0.1, Seed: 3}
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(1, 2))
		var handlerFailures atomic.Int32
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Workers: 8,
			Backoff: converge.Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5},
			Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
				mu.Lock()
				fail := rng.Float64() < 0.3
				mu.Unlock()
				if fail {
					handlerFailures.Add(1)
					return controller.Result{}, errors.New("transient")
				}
				for i, s := range states[:len(states)-1] {
					if o.State == s {
						return controller.Transition(states[i+1]), nil
					}
				}
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		for i := range objects {
			key := fmt.Sprintf("vm-%03d", i)
			for {
				err := c.Add(ctx, key, "new", nil)
				if err == nil || errors.Is(err, controller.ErrObjectExists) {
					break
				}
				require.ErrorIs(t, err, convergetest.ErrInjected)
			}
		}
		stop := startController(t, c)
		for range 600 {
			done := 0
			for _, o := range c.Objects() {
				if o.State == "ready" {
					done++
				}
			}
			if done == objects {
				break
			}
			time.Sleep(time.Second)
		}
		require.NoError(t, stop())
		store.SetFailRate(0, 0)
		assert.Positive(t, handlerFailures.Load())
		assert.Positive(t, store.Injected())
		recs, err := store.List(ctx, "vm/")
		require.NoError(t, err)
		require.Len(t, recs, objects)
		for _, rec := range recs {
			var o controller.Object
			require.NoError(t, json.Unmarshal(rec.Value, &o))
			require.Equal(t, controller.State("ready"), o.State, rec.Key)
			h, err := store.History(ctx, rec.Key)
			require.NoError(t, err)
			require.Len(t, h, len(states), rec.Key)
			for i, e := range h {
				assert.Equal(t, string(states[i]), e.To, rec.Key)
				if i > 0 {
					assert.Equal(t, string(states[i-1]), e.From, rec.Key)
					assert.False(t, e.At.Before(h[i-1].At))
				}
			}
		}
	})
}

func TestControllerRescanSeesOtherReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		newC := func() *controller.Controller {
			c, err := controller.New(controller.Config{
				Kind: "vm", Store: store, Resync: time.Minute, Handler: controller.HandlerFunc(lifecycle)})
			require.NoError(t, err)
			return c
		}
		a, b := newC(), newC()
		stopB := startController(t, b)
		synctest.Wait()
		require.NoError(t, a.Add(ctx, "x", "new", nil))
		synctest.Wait()
		_, ok := b.Get("x")
		assert.False(t, ok, "not seen before the next scan")
		time.Sleep(time.Minute)
		synctest.Wait()
		o, ok := b.Get("x")
		require.True(t, ok, "adopted at the scan")
		assert.Equal(t, controller.State("ready"), o.State, "and handled")

		rec, err := store.Get(ctx, "vm/x")
		require.NoError(t, err)
		require.NoError(t, store.Delete(ctx, "vm/x", rec.Version))
		time.Sleep(time.Minute)
		synctest.Wait()
		_, ok = b.Get("x")
		assert.False(t, ok, "removed by someone else: forgotten at the scan")
		require.NoError(t, stopB())
	})
}

// TestObjectErrorsReadOnce checks that an object's errors name the object
// once, with one "controller: " prefix, whatever they wrap.
func TestObjectErrorsReadOnce(t *testing.T) {
	ctx := context.Background()
	c, err := controller.New(controller.Config{Kind: "vm", Handler: controller.HandlerFunc(
		func(context.Context, controller.Object) (controller.Result, error) { return controller.NoChange(), nil })})
	require.NoError(t, err)
	require.NoError(t, c.Add(ctx, "a", "new", nil))
	for _, err := range []error{
		c.Add(ctx, "a", "new", nil),
		c.Request(ctx, "zz", "delete"),
		c.Add(ctx, "", "new", nil),
	} {
		require.Error(t, err)
		msg := err.Error()
		assert.Equal(t, 1, strings.Count(msg, "controller: "), "doubled prefix: %s", msg)
		assert.True(t, strings.HasPrefix(msg, "controller: vm "), msg)
	}
}
