package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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

// modes are the two ways a controller runs: alone, with its own queue,
// and as a replica (Owner set), with the store as the queue.
var modes = []struct{ name, owner string }{
	{"single", ""},
	{"replica", "replica-a"},
}

// inEachMode runs test in a synctest bubble once per mode, with the
// controller's Owner.
func inEachMode(t *testing.T, test func(t *testing.T, owner string)) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { test(t, mode.owner) })
		})
	}
}

// storedObject returns the object stored under key, as the store has it.
func storedObject(t *testing.T, store converge.Store, key string) controller.Object {
	t.Helper()
	rec, err := store.Get(context.Background(), key)
	require.NoError(t, err)
	var o controller.Object
	require.NoError(t, json.Unmarshal(rec.Value, &o))
	return o
}

func TestTerminalWrapsItsCause(t *testing.T) {
	cause := &fs.PathError{Op: "open", Path: "/images/web.tar", Err: fs.ErrNotExist}
	err := controller.Terminal(cause)
	require.ErrorIs(t, err, controller.ErrTerminal)
	require.ErrorIs(t, err, fs.ErrNotExist)
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "/images/web.tar", pe.Path)
	assert.Equal(t, cause.Error(), err.Error(), "the message is the cause's, once")
	wrapped := fmt.Errorf("provision: %w", err)
	require.ErrorIs(t, wrapped, controller.ErrTerminal, "still terminal when wrapped again")
	require.ErrorIs(t, controller.Terminal(nil), controller.ErrTerminal)
	require.NotErrorIs(t, cause, controller.ErrTerminal)
}

func TestTerminalErrorStopsRetriesUntilWoken(t *testing.T) {
	errNoImage := errors.New("no such image")
	for _, wake := range []string{"enqueue", "request"} {
		t.Run(wake, func(t *testing.T) {
			inEachMode(t, func(t *testing.T, owner string) {
				ctx := context.Background()
				store := converge.NewMemStore()
				m := newCtrlMetrics()
				var runs atomic.Int32
				var fixed atomic.Bool
				c, err := controller.New(controller.Config{
					Kind: "vm", Store: store, Owner: owner, Metrics: m,
					Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
						if o.State == "ready" {
							return controller.NoChange(), nil
						}
						runs.Add(1)
						if !fixed.Load() {
							return controller.Result{}, controller.Terminal(fmt.Errorf("image %q: %w", "web:1", errNoImage))
						}
						return controller.Transition("ready"), nil
					})})
				require.NoError(t, err)
				require.NoError(t, c.Add(ctx, "a", "provisioning", nil))
				start := time.Now()
				stop := startController(t, c)
				time.Sleep(time.Hour)
				synctest.Wait()
				assert.Equal(t, int32(1), runs.Load(), "a terminal error is not retried")

				o := storedObject(t, store, "vm/a")
				assert.Equal(t, controller.HaltTerminal, o.Halted, "the stored object says why it stopped")
				require.NotNil(t, o.LastError)
				assert.True(t, start.Equal(o.LastError.At), "failed at %s", o.LastError.At)
				assert.Contains(t, o.LastError.Error, `image "web:1": no such image`)
				assert.Equal(t, 1, o.Failures)
				view, ok := c.Get("a")
				require.True(t, ok)
				assert.Equal(t, controller.HaltTerminal, view.Halted)
				assert.Equal(t, 1, m.haltedIn(controller.HaltTerminal, "provisioning"), "the metrics count it")
				assert.Equal(t, 1, m.errs("provisioning"))

				fixed.Store(true)
				if wake == "enqueue" {
					require.NoError(t, c.Enqueue(ctx, "a"))
				} else {
					require.NoError(t, c.Request(ctx, "a", "retry"))
				}
				synctest.Wait()
				assert.Equal(t, int32(2), runs.Load(), "woken by the %s", wake)
				o = storedObject(t, store, "vm/a")
				assert.Equal(t, controller.State("ready"), o.State)
				assert.Empty(t, o.Halted)
				assert.Equal(t, 0, m.haltedIn(controller.HaltTerminal, "provisioning"))
				require.NoError(t, stop())
			})
		})
	}
}

func TestQuarantineAfterFailuresInAState(t *testing.T) {
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		store := converge.NewMemStore()
		var broken atomic.Bool
		broken.Store(true)
		var mu sync.Mutex
		runs := map[string]int{}
		runsOf := func(k string) int { mu.Lock(); defer mu.Unlock(); return runs[k] }
		newC := func(m converge.Metrics) *controller.Controller {
			c, err := controller.New(controller.Config{
				Kind: "vm", Store: store, Owner: owner, Metrics: m,
				Backoff:           converge.Backoff{Base: time.Second, Max: time.Minute},
				QuarantineAfter:   3,
				QuarantineAfterIn: map[controller.State]int{"installing": 5, "ready": 0},
				Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
					mu.Lock()
					runs[o.Key]++
					mu.Unlock()
					if broken.Load() {
						return controller.Result{}, errors.New("disk failed")
					}
					if o.State != "ready" {
						return controller.Transition("ready"), nil
					}
					return controller.NoChange(), nil
				})})
			require.NoError(t, err)
			return c
		}
		m := newCtrlMetrics()
		c := newC(m)
		require.NoError(t, c.Add(ctx, "p", "provisioning", nil))
		require.NoError(t, c.Add(ctx, "i", "installing", nil))
		require.NoError(t, c.Add(ctx, "r", "ready", nil))
		stop := startController(t, c)
		time.Sleep(time.Hour)
		synctest.Wait()
		assert.Equal(t, 3, runsOf("p"), "the default: quarantined after 3 failures in a row")
		assert.Equal(t, 5, runsOf("i"), "the state's own limit")
		assert.Greater(t, runsOf("r"), 50, "0 for a state: never quarantined")

		q, err := c.Quarantined(ctx)
		require.NoError(t, err)
		require.Len(t, q, 2)
		assert.Equal(t, []string{"i", "p"}, []string{q[0].Key, q[1].Key})
		assert.Equal(t, controller.HaltQuarantined, q[1].Halted)
		assert.Equal(t, 3, q[1].Retries)
		require.NotNil(t, q[1].LastError)
		assert.Equal(t, "disk failed", q[1].LastError.Error)
		assert.Equal(t, 1, m.haltedIn(controller.HaltQuarantined, "provisioning"))
		assert.Equal(t, 1, m.haltedIn(controller.HaltQuarantined, "installing"))

		require.NoError(t, c.Enqueue(ctx, "p"))
		synctest.Wait()
		assert.Equal(t, 3, runsOf("p"), "an Enqueue does not release a quarantine")
		require.NoError(t, stop())

		// A restarted controller keeps the quarantine: it is stored.
		m2 := newCtrlMetrics()
		c2 := newC(m2)
		stop = startController(t, c2)
		time.Sleep(time.Hour)
		synctest.Wait()
		assert.Equal(t, 3, runsOf("p"), "still quarantined after a restart")
		q, err = c2.Quarantined(ctx)
		require.NoError(t, err)
		assert.Len(t, q, 2)
		assert.Equal(t, 1, m2.haltedIn(controller.HaltQuarantined, "provisioning"), "a restarted controller's metrics count it")

		broken.Store(false)
		require.NoError(t, c2.Release(ctx, "p"))
		synctest.Wait()
		assert.Equal(t, 5, runsOf("p"), "released: handled at once, then again in its new state")
		o := storedObject(t, store, "vm/p")
		assert.Equal(t, controller.State("ready"), o.State)
		assert.Empty(t, o.Halted)
		q, err = c2.Quarantined(ctx)
		require.NoError(t, err)
		require.Len(t, q, 1)
		assert.Equal(t, "i", q[0].Key)
		assert.Equal(t, 0, m2.haltedIn(controller.HaltQuarantined, "provisioning"))
		require.ErrorIs(t, c2.Release(ctx, "missing"), controller.ErrObjectNotFound)
		require.NoError(t, stop())
	})
}

func TestHandlerSeesStoredFailuresAndHistory(t *testing.T) {
	type seen struct {
		state             controller.State
		failures, retries int
		history           []string
	}
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		store := converge.NewMemStore()
		var mu sync.Mutex
		var got []seen
		// In state a the handler fails twice, waits once (a
		// success), fails, then takes another path: b, c, d.
		script := []error{errors.New("1"), errors.New("2"), nil, errors.New("3")}
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Owner: owner,
			Backoff:         converge.Backoff{Base: time.Second, Max: time.Second},
			QuarantineAfter: 3, HandlerHistory: 2,
			Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				s := seen{state: o.State, failures: o.Failures, retries: o.Retries}
				for _, h := range o.History {
					s.history = append(s.history, h.From+">"+h.To)
				}
				got = append(got, s)
				switch o.State {
				case "a":
					if n := len(got) - 1; n < len(script) {
						if script[n] == nil {
							return controller.Wait("retrying").After(time.Second), nil
						}
						return controller.Result{}, script[n]
					}
					return controller.Transition("b"), nil
				case "b":
					return controller.Transition("c"), nil
				case "c":
					return controller.Transition("d"), nil
				}
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "x", "a", nil))
		stop := startController(t, c)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []seen{
			{"a", 0, 0, []string{">a"}},
			{"a", 1, 1, []string{">a"}},
			{"a", 2, 2, []string{">a"}},
			{"a", 2, 0, []string{">a"}}, // the wait was a success: no longer in a row
			{"a", 3, 1, []string{">a"}}, // 3 failures, not in a row: not quarantined
			{"b", 0, 0, []string{">a", "a>b"}},
			{"c", 0, 0, []string{"a>b", "b>c"}},
			{"d", 0, 0, []string{"b>c", "c>d"}}, // the newest HandlerHistory transitions
		}, got[:min(len(got), 8)])
	})
}

func TestFailureCountSurvivesRestart(t *testing.T) {
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		store := converge.NewMemStore()
		var mu sync.Mutex
		var retries []int
		newC := func() *controller.Controller {
			c, err := controller.New(controller.Config{
				Kind: "vm", Store: store, Owner: owner, Poll: 100 * time.Millisecond,
				Backoff: converge.Backoff{Base: time.Second, Max: time.Second},
				Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
					mu.Lock()
					defer mu.Unlock()
					retries = append(retries, o.Retries)
					return controller.Result{}, errors.New("cloud down")
				})})
			require.NoError(t, err)
			return c
		}
		c := newC()
		require.NoError(t, c.Add(ctx, "x", "a", nil))
		stop := startController(t, c)
		time.Sleep(1500 * time.Millisecond) // runs at 0s and 1s
		require.NoError(t, stop())
		c2 := newC()
		stop = startController(t, c2)
		time.Sleep(800 * time.Millisecond) // the third run, once due
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []int{0, 1, 2}, retries, "the count in a row is read back from the store")
		assert.Equal(t, 3, storedObject(t, store, "vm/x").Failures)
	})
}

func TestSLAEventsOncePerBreach(t *testing.T) {
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		store := converge.NewMemStore()
		var mu sync.Mutex
		var events []controller.SLAEvent
		var leave atomic.Bool
		newC := func(owner string) *controller.Controller {
			c, err := controller.New(controller.Config{
				Kind: "vm", Store: store, Owner: owner,
				SLA: map[controller.State]time.Duration{"provisioning": 90 * time.Second},
				OnSLA: func(ev controller.SLAEvent) {
					mu.Lock()
					defer mu.Unlock()
					events = append(events, ev)
				},
				Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
					switch {
					case len(o.Intents) > 0:
						return controller.Deleted(), nil
					case o.State == "provisioning" && leave.Load():
						return controller.Transition("ready"), nil
					case o.State == "provisioning":
						return controller.Wait("no capacity"), nil
					}
					return controller.NoChange(), nil
				})})
			require.NoError(t, err)
			return c
		}
		// Replicas: two of them share the store, and the events.
		owners := []string{""}
		if owner != "" {
			owners = []string{"replica-a", "replica-b"}
		}
		// start runs a controller per owner and returns the first
		// (for Enqueue and Request) and a function that stops them.
		start := func() (*controller.Controller, func()) {
			var stops []func() error
			var first *controller.Controller
			for _, o := range owners {
				c := newC(o)
				if first == nil {
					first = c
				}
				stops = append(stops, startController(t, c))
			}
			return first, func() {
				for _, s := range stops {
					require.NoError(t, s())
				}
			}
		}
		got := func() []string {
			mu.Lock()
			defer mu.Unlock()
			var out []string
			for _, ev := range events {
				out = append(out, fmt.Sprintf("%s %s %v", ev.Key, ev.State, ev.Breached))
			}
			return out
		}
		adder := newC(owners[0])
		require.NoError(t, adder.Add(ctx, "x", "provisioning", nil))
		require.NoError(t, adder.Add(ctx, "y", "provisioning", nil))
		begin := time.Now()
		_, stop := start()
		time.Sleep(90 * time.Second)
		synctest.Wait()
		assert.Empty(t, got(), "not above the SLA yet")
		// A replica looks again when the SLA runs out, at its next
		// Poll (a second).
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		assert.ElementsMatch(t, []string{"x provisioning true", "y provisioning true"}, got(), "once, when the SLA runs out")
		mu.Lock()
		ev := events[0]
		mu.Unlock()
		assert.Equal(t, "vm", ev.Kind)
		assert.Equal(t, 90*time.Second, ev.SLA)
		assert.Greater(t, ev.TimeInState, 90*time.Second)
		assert.LessOrEqual(t, ev.TimeInState, 91*time.Second+time.Millisecond)
		assert.Equal(t, begin.Add(ev.TimeInState), ev.At)
		assert.True(t, storedObject(t, store, "vm/x").SLABreached, "the breach is stored")

		time.Sleep(10 * time.Minute)
		synctest.Wait()
		assert.Len(t, got(), 2, "periodic passes do not report the breach again")
		stop()
		c, stop := start()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		assert.Len(t, got(), 2, "nor does a restart")

		leave.Store(true)
		require.NoError(t, c.Enqueue(ctx, "x"))
		synctest.Wait()
		require.NoError(t, c.Request(ctx, "y", "delete"))
		synctest.Wait()
		assert.Equal(t, []string{"x provisioning false", "y provisioning false"}, got()[2:], "once more when it leaves the state or is deleted")
		stop()
	})
}

func TestReplicaLeaseKeptWhileHandlerRunsAndFreedOnStop(t *testing.T) {
	const ttl = 10 * time.Second
	stores := []struct {
		name  string
		store func() converge.Queue
	}{
		{"MemStore", func() converge.Queue { return converge.NewMemStore() }},
		{"convergetest.Store", func() converge.Queue { return &convergetest.Store{} }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				store := st.store()
				running := make(chan controller.State, 2)
				c, err := controller.New(controller.Config{
					Kind: "vm", Store: store, Owner: "replica-a", LeaseTTL: ttl, ShutdownTimeout: time.Hour,
					Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
						running <- o.State
						time.Sleep(3 * ttl) // three lease durations, ignoring ctx
						if o.State == "new" {
							return controller.Transition("done"), nil
						}
						return controller.NoChange(), nil
					})})
				require.NoError(t, err)
				require.NoError(t, c.Add(ctx, "long", "new", nil))
				stop := startController(t, c)
				require.Equal(t, controller.State("new"), <-running)
				time.Sleep(3*ttl - time.Second)
				_, err = store.Claim(ctx, "vm/long", "replica-b", ttl)
				require.ErrorIs(t, err, converge.ErrClaimHeld, "the lease is renewed while the handler runs")
				got, err := store.ClaimDue(ctx, "vm/", "replica-b", ttl, 10)
				require.NoError(t, err)
				assert.Empty(t, got)

				// The handler's write after three lease durations is fenced
				// by its lease, and accepted.
				require.Equal(t, controller.State("done"), <-running)
				assert.Equal(t, controller.State("done"), storedObject(t, store, "vm/long").State)

				// Stop while the handler runs again: Run waits for it, then
				// gives the lease back, so another owner claims at once.
				require.NoError(t, stop())
				l, err := store.Claim(ctx, "vm/long", "replica-b", ttl)
				require.NoError(t, err, "the lease is released when Run returns")
				require.NoError(t, store.Release(ctx, l))
			})
		})
	}
}

func TestHaltedObjectStillReportsSLA(t *testing.T) {
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		var mu sync.Mutex
		var events []controller.SLAEvent
		var runs atomic.Int32
		c, err := controller.New(controller.Config{
			Kind: "vm", Owner: owner,
			SLA: map[controller.State]time.Duration{"provisioning": time.Minute},
			OnSLA: func(ev controller.SLAEvent) {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, ev)
			},
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				runs.Add(1)
				return controller.Result{}, controller.Terminal(errors.New("quota exceeded"))
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "provisioning", nil))
		stop := startController(t, c)
		time.Sleep(time.Hour)
		synctest.Wait()
		require.NoError(t, stop())
		assert.Equal(t, int32(1), runs.Load(), "halted at the first run")
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, events, 1, "the halted object is still looked at when its SLA runs out")
		assert.True(t, events[0].Breached)
		assert.Equal(t, "a", events[0].Key)
		o, _ := c.Get("a")
		assert.Equal(t, controller.HaltTerminal, o.Halted, "and stays halted")
	})
}
