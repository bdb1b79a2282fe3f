package autopilot_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planAutoBus returns a bus whose nodes answer every signal after delay (in
// the bubble's fake time), with the state answer returns for it.
func planAutoBus(delay time.Duration, answer func(node string, s autopilot.Signal) (plan.TargetState, string), nodes ...autopilot.Host) *autopilot.Bus {
	bus := autopilot.NewBus(nodes...)
	bus.OnSignal = func(node string, s autopilot.Signal) {
		state, reason := plan.TargetCompleted, ""
		if answer != nil {
			state, reason = answer(node, s)
		}
		time.AfterFunc(delay, func() { _ = bus.Respond(node, state, reason) })
	}
	return bus
}

// planDeliveries counts deliveries per "node signalID".
func planDeliveries(bus *autopilot.Bus) map[string]int {
	out := map[string]int{}
	for _, d := range bus.Sent() {
		out[d.Node+" "+d.Signal.ID]++
	}
	return out
}

func planCreate(t *testing.T, r *plan.Runner, doc *plan.Document) {
	t.Helper()
	require.NoError(t, r.Create(context.Background(), doc))
}

// TestPlanRunnerAutopilot runs the autopilot example through the Store and
// checks the stored history of transitions.
func TestPlanRunnerAutopilot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := converge.NewMemStore()
		bus := planAutoBus(30*time.Second, nil, planNodes()...)
		var steps []plan.Step
		r := planRunner(t, store, bus, plan.RunnerConfig{OnStep: func(id string, s plan.Step, _ *plan.Status) {
			assert.Equal(t, "id123", id)
			steps = append(steps, s)
		}})
		planCreate(t, r, planDoc(t, "testdata/plan/autopilot-plan.yaml"))
		start := time.Now()
		st, err := r.Run(context.Background(), "id123")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		// Three targets, one after the other, 30 s each, polled every second.
		assert.GreaterOrEqual(t, time.Since(start), 90*time.Second)
		assert.Less(t, time.Since(start), 95*time.Second)
		assert.Equal(t, map[string]int{"worker0 id123/0/0": 1, "controller0 id123/1/0": 1, "worker0 id123/1/0": 1}, planDeliveries(bus))

		doc, _, err := r.Get(context.Background(), "id123")
		require.NoError(t, err)
		assert.Equal(t, st, doc.Status)
		hist, err := r.History(context.Background(), "id123")
		require.NoError(t, err)
		stored, err := store.History(context.Background(), plan.KeyPrefix+"id123")
		require.NoError(t, err)
		assert.Equal(t, stored, hist, "a plan is stored under plan.KeyPrefix and its ID")
		require.NoError(t, err)
		var plan []string
		for _, h := range hist {
			if h.Subject == nil {
				plan = append(plan, h.From+">"+h.To+": "+h.Reason)
			}
		}
		assert.Equal(t, []string{">NewPlan: plan created", "NewPlan>SchedulableWait: started: 2 commands",
			"SchedulableWait>Completed: all 2 commands completed"}, plan,
			"the plan's entries say what happened; its moves between SchedulableWait and Schedulable, one pair per target, are left out")
		assert.Contains(t, hist, converge.HistoryEntry{At: hist[len(hist)-1].At, From: "SchedulableWait", To: "Completed", Reason: "command 1 (k0supdate)",
			Subject: &converge.HistorySubject{Command: 1}})
		assert.NotEmpty(t, steps)
		assert.True(t, steps[len(steps)-1].Done)

		// A completed plan runs no more.
		st2, err := r.Run(context.Background(), "id123")
		require.NoError(t, err)
		assert.Equal(t, st, st2)
		assert.Len(t, bus.Sent(), 3)
	})
}

// TestPlanRunnerTimeouts lets targets and commands time out on the runner's
// own timers, in fake time.
func TestPlanRunnerTimeouts(t *testing.T) {
	tests := []struct {
		name    string
		cmd     func(*plan.Command)
		want    time.Duration
		reason  string
		partial bool
	}{
		{name: "target", cmd: func(c *plan.Command) { c.TargetTimeout = 5 * time.Minute }, want: 5 * time.Minute,
			reason: `node "worker1" did not complete within 5m0s`, partial: true},
		{name: "command", cmd: func(c *plan.Command) { c.Timeout = 7 * time.Minute }, want: 7 * time.Minute,
			reason: "command did not complete within 7m0s", partial: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// worker0 answers in a minute; worker1 never does.
				bus := autopilot.NewBus(planWrk("worker0"), planWrk("worker1"))
				bus.OnSignal = func(node string, s autopilot.Signal) {
					if node == "worker0" {
						time.AfterFunc(time.Minute, func() { _ = bus.Respond(node, plan.TargetCompleted, "") })
					}
				}
				r := planRunner(t, converge.NewMemStore(), bus, plan.RunnerConfig{PollInterval: 10 * time.Second})
				cmd := planCmd("update", planGroup("workers", 2, "worker0", "worker1"))
				tc.cmd(&cmd)
				planCreate(t, r, planOf(cmd))
				start := time.Now()
				st, err := r.Run(context.Background(), "p1")
				var pe *plan.Error
				require.ErrorAs(t, err, &pe)
				require.ErrorIs(t, err, plan.ErrFailed)
				assert.Equal(t, plan.StateTimedOut, pe.State)
				assert.Equal(t, 0, pe.Command)
				elapsed := time.Since(start)
				assert.GreaterOrEqual(t, elapsed, tc.want)
				assert.Less(t, elapsed, tc.want+11*time.Second, "noticed within a poll interval")
				assert.Equal(t, tc.reason, st.Commands[0].Reason)
				assert.Equal(t, plan.TargetCompleted, st.Commands[0].Target("workers", "worker0").State)
				tg := st.Commands[0].Target("workers", "worker1")
				assert.Equal(t, plan.TargetTimedOut, tg.State)
				assert.Equal(t, tc.reason, tg.Reason)
			})
		})
	}
}

// TestPlanRunnerConcurrencyLimits checks controllers one at a time, then
// workers two at a time, never more and never workers before controllers.
func TestPlanRunnerConcurrencyLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		inflight := map[string]int{}
		maxIn := map[string]int{}
		ctlDone := 0
		var order []string
		nodes := []autopilot.Host{planCtl("c0"), planCtl("c1"), planCtl("c2")}
		for i := range 5 {
			nodes = append(nodes, planWrk(fmt.Sprintf("w%d", i)))
		}
		bus := autopilot.NewBus(nodes...)
		bus.OnSignal = func(node string, s autopilot.Signal) {
			mu.Lock()
			inflight[s.Group]++
			maxIn[s.Group] = max(maxIn[s.Group], inflight[s.Group])
			order = append(order, node)
			if s.Group == "workers" {
				assert.Equal(t, 3, ctlDone, "worker %s signalled before every controller completed", node)
			}
			mu.Unlock()
			// Nodes take different times, so completions interleave.
			d := time.Duration(10+len(node)*7+int(node[1]-'0')*13) * time.Second
			time.AfterFunc(d, func() {
				mu.Lock()
				inflight[s.Group]--
				if s.Group == "controllers" {
					ctlDone++
				}
				mu.Unlock()
				_ = bus.Respond(node, plan.TargetCompleted, "")
			})
		}
		r := planRunner(t, converge.NewMemStore(), bus, plan.RunnerConfig{})
		planCreate(t, r, planOf(planCmd("update",
			planGroup("workers", 2, "w0", "w1", "w2", "w3", "w4"),
			planGroup("controllers", 0, "c0", "c1", "c2"))))
		st, err := r.Run(context.Background(), "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		assert.Equal(t, map[string]int{"controllers": 1, "workers": 2}, maxIn)
		assert.Equal(t, []string{"c0", "c1", "c2"}, order[:3])
		assert.ElementsMatch(t, []string{"w0", "w1", "w2", "w3", "w4"}, order[3:])
		assert.Len(t, bus.Sent(), 8)
	})
}

// TestPlanRunnerRetry fails a plan on one worker, retries it, and checks
// that only that worker is signalled again.
func TestPlanRunnerRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := planAutoBus(time.Second, func(node string, s autopilot.Signal) (plan.TargetState, string) {
			if node == "w1" && s.Attempt == 0 {
				return plan.TargetApplyFailed, "disk full"
			}
			return plan.TargetCompleted, ""
		}, planWrk("w0"), planWrk("w1"), planWrk("w2"), planCtl("controller0"))
		store := converge.NewMemStore()
		r := planRunner(t, store, bus, plan.RunnerConfig{})
		planCreate(t, r, planOf(
			planCmd("update", planGroup("controllers", 1, "controller0")),
			planCmd("update", planGroup("workers", 3, "w0", "w1", "w2"))))
		ctx := context.Background()

		require.ErrorIs(t, r.Retry(ctx, "p1"), plan.ErrNotFailed, "not started")
		st, err := r.Run(ctx, "p1")
		var pe *plan.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, plan.StateApplyFailed, pe.State)
		assert.Equal(t, 1, pe.Command)
		assert.Equal(t, plan.TargetApplyFailed, st.Commands[1].Target("workers", "w1").State)
		assert.Equal(t, "disk full", st.Commands[1].Target("workers", "w1").Reason)

		// Running a failed plan again does nothing.
		_, err = r.Run(ctx, "p1")
		require.ErrorIs(t, err, plan.ErrFailed)
		sentBefore := len(bus.Sent())

		require.NoError(t, r.Retry(ctx, "p1"))
		doc, _, err := r.Get(ctx, "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateSchedulableWait, doc.Status.State)
		w1 := doc.Status.Commands[1].Target("workers", "w1")
		assert.Equal(t, plan.TargetPending, w1.State)
		assert.Equal(t, 1, w1.Attempt)
		assert.Empty(t, w1.Reason)

		st, err = r.Run(ctx, "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		again := bus.Sent()[sentBefore:]
		require.Len(t, again, 1, "only the failed worker is signalled again")
		assert.Equal(t, "w1", again[0].Node)
		assert.Equal(t, "p1/1/1", again[0].Signal.ID)
		assert.Equal(t, map[string]int{"controller0 p1/0/0": 1, "w0 p1/1/0": 1, "w1 p1/1/0": 1, "w1 p1/1/1": 1, "w2 p1/1/0": 1}, planDeliveries(bus))
		require.ErrorIs(t, r.Retry(ctx, "p1"), plan.ErrNotFailed, "completed")

		hist, err := r.History(ctx, "p1")
		require.NoError(t, err)
		retried := false
		for _, h := range hist {
			retried = retried || (h.From == "ApplyFailed" && h.To == "SchedulableWait" && h.Reason == "retry")
		}
		assert.True(t, retried, "the retry is in the history: %+v", hist)
		assert.True(t, planHistoryHas(hist, "SignalApplyFailed", "SignalPending", "retry command 1 (update) target workers/w1 attempt 0: disk full"),
			"the failed target's reason is in the history: %+v", hist)
	})
}

// TestPlanRunnerRetryAfterNewPlan retries a plan that failed in NewPlan
// (restricted) once the restriction is lifted.
func TestPlanRunnerRetryAfterNewPlan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := planAutoBus(time.Second, nil, planNodes()...)
		store := converge.NewMemStore()
		restricted := &autopilot.CommandHandler{Sender: bus, Restrict: []string{"controller"}}
		r1 := planRunner(t, store, bus, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{"update": restricted}})
		planCreate(t, r1, planOf(
			planCmd("update", planGroup("workers", 1, "worker0")),
			planCmd("update", planGroup("controllers", 1, "controller0"))))
		_, err := r1.Run(context.Background(), "p1")
		var pe *plan.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, plan.StateRestricted, pe.State)
		assert.Empty(t, bus.Sent(), "nothing is signalled when NewPlan fails")

		require.NoError(t, r1.Retry(context.Background(), "p1"))
		doc, _, err := r1.Get(context.Background(), "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateNewPlan, doc.Status.State)
		assert.Equal(t, plan.StateSchedulableWait, doc.Status.Commands[0].State, "the good command keeps its status")

		r2 := planRunner(t, store, bus, plan.RunnerConfig{})
		st, err := r2.Run(context.Background(), "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		assert.Len(t, bus.Sent(), 2)
	})
}

// planKillStore is a Store that dies (every call fails and the runner's
// context is cancelled) after a number of successful writes, like a process
// killed at that point.
type planKillStore struct {
	converge.Store
	mu     sync.Mutex
	left   int
	dead   bool
	cancel context.CancelFunc
}

var errPlanDead = errors.New("process killed")

// kill makes the store die now, as if the process were killed.
func (s *planKillStore) kill() {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
	s.cancel()
}

func (s *planKillStore) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return errPlanDead
	}
	return nil
}

func (s *planKillStore) Get(ctx context.Context, key string) (converge.StoreRecord, error) {
	if err := s.check(); err != nil {
		return converge.StoreRecord{}, err
	}
	return s.Store.Get(ctx, key)
}

func (s *planKillStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return 0, errPlanDead
	}
	if s.left == 0 {
		// Killed now: this write is lost, whatever the step already did.
		s.dead = true
		s.mu.Unlock()
		s.cancel()
		return 0, errPlanDead
	}
	s.left--
	s.mu.Unlock()
	return s.Store.Put(ctx, rec, h...)
}

func (s *planKillStore) Claim(ctx context.Context, key, owner string, ttl time.Duration) (converge.Lease, error) {
	if err := s.check(); err != nil {
		return converge.Lease{}, err
	}
	return s.Store.Claim(ctx, key, owner, ttl)
}

func (s *planKillStore) Release(ctx context.Context, l converge.Lease) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.Store.Release(ctx, l)
}

// TestPlanRunnerCrashResume kills a runner after every possible number of
// stored transitions (including between signalling a node and storing that
// it was signalled) and checks that a fresh runner on the same Store finishes
// the plan without signalling any target twice.
func TestPlanRunnerCrashResume(t *testing.T) {
	for kill := 0; ; kill++ {
		killed := false
		t.Run(fmt.Sprintf("killed after %d writes", kill), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := converge.NewMemStore()
				bus := planAutoBus(500*time.Millisecond, nil, planNodes()...)
				setup := planRunner(t, mem, bus, plan.RunnerConfig{})
				planCreate(t, setup, planDoc(t, "testdata/plan/autopilot-plan.yaml"))

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				dying := &planKillStore{Store: mem, left: kill, cancel: cancel}
				r1 := planRunner(t, dying, bus, plan.RunnerConfig{Owner: "runner-1", LeaseTTL: time.Minute})
				st, err := r1.Run(ctx, "id123")
				if err == nil {
					// The plan needs fewer writes than kill: every point was covered.
					assert.Equal(t, plan.StateCompleted, st.State)
					return
				}
				killed = true
				require.ErrorIs(t, err, context.Canceled)
				killedAt := time.Now()

				r2 := planRunner(t, mem, bus, plan.RunnerConfig{Owner: "runner-2", LeaseTTL: time.Minute})
				st, err = r2.Run(context.Background(), "id123")
				require.NoError(t, err)
				assert.Equal(t, plan.StateCompleted, st.State)
				assert.GreaterOrEqual(t, time.Since(killedAt), time.Minute, "the new runner waits for the dead one's claim to expire")
				for k, n := range planDeliveries(bus) {
					assert.Equal(t, 1, n, "signal %s delivered %d times", k, n)
				}
				assert.Len(t, bus.Sent(), 3)
				recs, err := mem.List(context.Background(), "")
				require.NoError(t, err)
				assert.Len(t, recs, 2, "the plan is its head and one base; bases left by the dead runner are gone")
			})
		})
		if !killed || t.Failed() {
			require.Greater(t, kill, 5, "the plan stores a write per transition")
			return
		}
	}
}

// planStaleStore writes behind the runner's back once, so the runner's next
// write is stale.
type planStaleStore struct {
	converge.Store
	once  sync.Once
	stale atomic.Int32
}

func (s *planStaleStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	if rec.Version > 1 {
		s.once.Do(func() {
			cur, err := s.Store.Get(ctx, rec.Key)
			if err == nil {
				_, _ = s.Store.Put(ctx, cur) // same value, next version
			}
		})
	}
	v, err := s.Store.Put(ctx, rec, h...)
	if errors.Is(err, converge.ErrStoreStale) {
		s.stale.Add(1)
	}
	return v, err
}

// TestPlanRunnerStaleWrite checks that a stale write is not stored and the
// step is redone on the fresh status, without signalling twice.
func TestPlanRunnerStaleWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := planAutoBus(time.Second, nil, planNodes()...)
		store := &planStaleStore{Store: converge.NewMemStore()}
		r := planRunner(t, store, bus, plan.RunnerConfig{})
		planCreate(t, r, planDoc(t, "testdata/plan/autopilot-plan.yaml"))
		st, err := r.Run(context.Background(), "id123")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		assert.Equal(t, int32(1), store.stale.Load())
		assert.Len(t, bus.Sent(), 3)
	})
}

// TestPlanRunnerFatalErrors checks the errors that end a run at once, and
// the checks of Create and plan.NewRunner.
func TestPlanRunnerFatalErrors(t *testing.T) {
	ctx := context.Background()
	bus := autopilot.NewBus(planNodes()...)
	store := converge.NewMemStore()
	r := planRunner(t, store, bus, plan.RunnerConfig{})

	_, err := r.Run(ctx, "missing")
	require.ErrorIs(t, err, converge.ErrStoreNotFound)

	planCreate(t, r, planOf(plan.Command{Kind: "nobody", Targets: []plan.CommandTargets{planGroup("workers", 1, "worker0")}}))
	_, err = r.Run(ctx, "p1")
	require.ErrorIs(t, err, plan.ErrUnknownCommand)

	require.ErrorIs(t, r.Create(ctx, planOf(planCmd("update", planGroup("workers", 1, "worker0")))), converge.ErrStoreStale, "same ID twice")
	require.ErrorIs(t, r.Create(ctx, &plan.Document{Spec: plan.Plan{Commands: []plan.Command{planCmd("update")}}}), plan.ErrInvalid, "no ID")
	bad := planOf(planCmd("update", planGroup("workers", 1, "worker0")))
	bad.Spec.ID = "p2"
	bad.Status = &plan.Status{Commands: []plan.CommandStatus{{Kind: "other"}}}
	require.ErrorIs(t, r.Create(ctx, bad), plan.ErrStatusMismatch)
	_, _, err = r.Get(ctx, "p2")
	require.ErrorIs(t, err, converge.ErrStoreNotFound, "nothing written")

	for _, cfg := range []plan.RunnerConfig{
		{PollInterval: -1}, {LeaseTTL: -time.Second}, {CommandTimeout: -1}, {TargetTimeout: -1},
		{Handlers: map[string]plan.CommandHandler{"x": nil}},
	} {
		_, err := plan.NewRunner(store, cfg)
		require.ErrorIs(t, err, converge.ErrInvalidConfig, "%+v", cfg)
	}
}

// TestPlanRunnerCancel checks that Run stops promptly when cancelled while
// waiting for targets.
func TestPlanRunnerCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := autopilot.NewBus(planNodes()...) // nodes never answer
		r := planRunner(t, converge.NewMemStore(), bus, plan.RunnerConfig{})
		planCreate(t, r, planOf(planCmd("update", planGroup("workers", 1, "worker0"))))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := r.Run(ctx, "p1")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		doc, _, err := r.Get(context.Background(), "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.TargetSent, doc.Status.Commands[0].Target("workers", "worker0").State)
	})
}

// planFlakySender fails its first probes.
type planFlakySender struct {
	autopilot.Sender
	fails atomic.Int32
}

var errPlanFlaky = errors.New("connection refused")

func (s *planFlakySender) Probe(ctx context.Context, node string) (autopilot.Host, error) {
	if s.fails.Add(-1) >= 0 {
		return autopilot.Host{}, errPlanFlaky
	}
	return s.Sender.Probe(ctx, node)
}

// TestPlanRunnerTransientErrors checks that handler errors are reported and
// retried after the poll interval, without changing the stored status.
func TestPlanRunnerTransientErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := planAutoBus(time.Second, nil, planNodes()...)
		flaky := &planFlakySender{Sender: bus}
		flaky.fails.Store(2)
		var errs []error
		store := converge.NewMemStore()
		r := planRunner(t, store, flaky, plan.RunnerConfig{PollInterval: 5 * time.Second, OnError: func(id string, err error) {
			assert.Equal(t, "p1", id)
			errs = append(errs, err)
		}})
		planCreate(t, r, planOf(planCmd("update", planGroup("workers", 1, "worker0"))))
		start := time.Now()
		st, err := r.Run(context.Background(), "p1")
		require.NoError(t, err)
		assert.Equal(t, plan.StateCompleted, st.State)
		assert.GreaterOrEqual(t, time.Since(start), 10*time.Second)
		require.Len(t, errs, 2)
		for _, e := range errs {
			require.ErrorIs(t, e, errPlanFlaky)
			var ce *plan.CommandError
			require.ErrorAs(t, e, &ce)
			assert.Equal(t, plan.StateNewPlan, ce.State)
		}
		hist, err := r.History(context.Background(), "p1")
		require.NoError(t, err)
		assert.Equal(t, "NewPlan", hist[1].From, "no write before NewPlan succeeded")
		assert.Equal(t, start.Add(10*time.Second), hist[1].At)
	})
}
