package converge_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// interruptGraph is two independent slow items and one that waits for
// the first: a walk interrupted while the slow ones apply has two items in
// flight and one not started.
func interruptGraph(latency time.Duration) (*converge.Graph, []*convergetest.Item) {
	a := &convergetest.Item{Key: "a", Goal: "x", Latency: latency}
	b := &convergetest.Item{Key: "b", Goal: "x", Latency: latency}
	c := &convergetest.Item{Key: "c", Goal: "x"}
	g := converge.NewGraph()
	g.Add(a.Node(), converge.Present)
	g.Add(b.Node(), converge.Present)
	g.Add(c.Node(), converge.Present, "a")
	return g, []*convergetest.Item{a, b, c}
}

// applyAsync runs w.Apply(ctx, g) and returns a function that waits for
// its result.
func applyAsync(w *converge.Walker, ctx context.Context, g *converge.Graph) func() (*converge.Report, error) {
	var rep *converge.Report
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		rep, err = w.Apply(ctx, g)
	}()
	return func() (*converge.Report, error) { <-done; return rep, err }
}

func TestApplyGracefulInterruptLetsRunningItemsFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 2, Grace: time.Minute})
		require.NoError(t, err)
		g, items := interruptGraph(10 * time.Second)
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		wait := applyAsync(w, ctx, g)
		time.Sleep(time.Second) // a and b are applying
		cancel()
		rep, err := wait()
		assert.Equal(t, 10*time.Second, time.Since(start), "the walk waited for the items in flight, not for the grace period")
		require.ErrorIs(t, err, converge.ErrNotRun)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, converge.InterruptGraceful, rep.Interrupted)
		assert.Equal(t, []converge.ID{"a", "b"}, rep.IDs(converge.OutcomeChanged), "the items in flight finished")
		assert.Equal(t, []converge.ID{"c"}, rep.IDs(converge.OutcomeNotRun))
		assert.Equal(t, "x", items[0].Current())
		assert.Zero(t, items[2].Calls("StateCurrent"))
		assert.Contains(t, rep.Summary(), "interrupted, graceful")
	})
}

func TestApplyInterruptStopsAtOnce(t *testing.T) {
	tests := []struct {
		name string
		// grace is WalkerConfig.Grace; second, when true, interrupts twice.
		grace  time.Duration
		second bool
		// took is how long the walk ran after the first interrupt.
		took time.Duration
	}{
		{name: "no grace", grace: 0, took: 0},
		{name: "grace runs out", grace: 5 * time.Second, took: 5 * time.Second},
		{name: "second interrupt", grace: time.Hour, second: true, took: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 2, Grace: tt.grace})
				require.NoError(t, err)
				g, _ := interruptGraph(time.Hour)
				ctx, interrupt := converge.WithInterrupt(t.Context())
				wait := applyAsync(w, ctx, g)
				time.Sleep(time.Second)
				interrupt()
				start := time.Now()
				if tt.second {
					time.Sleep(2 * time.Second)
					interrupt()
				}
				rep, err := wait()
				assert.Equal(t, tt.took, time.Since(start))
				require.ErrorIs(t, err, context.Canceled)
				assert.Equal(t, converge.InterruptImmediate, rep.Interrupted)
				assert.Equal(t, []converge.ID{"a", "b"}, rep.IDs(converge.OutcomeFailed), "the items in flight saw their context cancelled")
				ra, _ := rep.Item("a")
				assert.ErrorIs(t, ra.Err, context.Canceled)
				assert.Equal(t, []converge.ID{"c"}, rep.IDs(converge.OutcomeWaiting), "c waits for a, which failed")
			})
		})
	}
}

func TestApplyCancellingParentOfInterruptIsImmediate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 2, Grace: time.Hour})
		require.NoError(t, err)
		g, _ := interruptGraph(time.Hour)
		parent, cancel := context.WithCancel(t.Context())
		ctx, interrupt := converge.WithInterrupt(parent)
		defer interrupt()
		wait := applyAsync(w, ctx, g)
		time.Sleep(time.Second)
		start := time.Now()
		cancel()
		rep, _ := wait()
		assert.Equal(t, start, time.Now())
		assert.Equal(t, converge.InterruptImmediate, rep.Interrupted)
	})
}

func TestApplyNotInterruptedSaysNone(t *testing.T) {
	w, err := converge.NewWalker(converge.WalkerConfig{Grace: time.Minute})
	require.NoError(t, err)
	g, _ := interruptGraph(0)
	ctx, interrupt := converge.WithInterrupt(t.Context())
	rep, err := w.Apply(ctx, g)
	interrupt()
	interrupt()
	require.NoError(t, err)
	assert.Equal(t, converge.InterruptNone, rep.Interrupted)
	assert.NotContains(t, rep.Summary(), "interrupted")
}

func TestApplyWithForceReachesItems(t *testing.T) {
	g := converge.NewGraph()
	l := &lockItem{id: "app", goal: "v1", locked: true}
	g.Add(converge.Wrap[string](l), converge.Present)
	_, err := converge.Apply(t.Context(), g)
	require.ErrorIs(t, err, converge.ErrLocked)
	rep, err := converge.Apply(converge.WithForce(t.Context()), g)
	require.NoError(t, err)
	assert.Equal(t, []converge.ID{"app"}, rep.IDs(converge.OutcomeChanged))
}

func TestWalkIDInReportEventsAndErrors(t *testing.T) {
	var walks []converge.WalkID
	var events []converge.Event
	w, err := converge.NewWalker(converge.WalkerConfig{Observer: converge.ObserverFunc(func(e converge.Event) {
		events = append(events, e)
	})})
	require.NoError(t, err)
	for range 2 {
		events = nil
		g := converge.NewGraph()
		g.Add((&convergetest.Item{Key: "ok", Goal: "x"}).Node(), converge.Present)
		g.Add((&convergetest.Item{Key: "bad", Goal: "x"}).FailAt(converge.PhaseApply, -1, nil).Node(), converge.Present)
		rep, err := w.Apply(t.Context(), g)
		require.Error(t, err)
		require.NotEmpty(t, rep.Walk)
		walks = append(walks, rep.Walk)
		require.NotEmpty(t, events)
		for _, e := range events {
			assert.Equal(t, rep.Walk, e.Walk, "event %d", e.Seq)
			assert.Zero(t, e.Revision, "a walk of its own has no target revision")
		}
		var ie *converge.ItemError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, rep.Walk, ie.Walk)
		assert.NotContains(t, err.Error(), string(rep.Walk), "the message does not repeat the walk")
	}
	assert.NotEqual(t, walks[0], walks[1], "every walk has an ID of its own")
}

// walkSeer records the walk each of its methods ran in.
type walkSeer struct {
	mu   sync.Mutex
	seen map[string]converge.WalkID
	set  bool
}

func (w *walkSeer) see(ctx context.Context, method string) {
	id, ok := converge.CurrentWalk(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if ok {
		w.seen[method] = id
	}
}
func (w *walkSeer) ID() converge.ID { return "seer" }
func (w *walkSeer) StateCurrent(ctx context.Context, _ converge.DepStates) (bool, error) {
	w.see(ctx, "StateCurrent")
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.set, nil
}
func (w *walkSeer) StateGoal(ctx context.Context, _ converge.DepStates) (bool, error) {
	w.see(ctx, "StateGoal")
	return true, nil
}
func (w *walkSeer) Check(ctx context.Context, c, t bool) (converge.Decision, error) {
	w.see(ctx, "Check")
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (w *walkSeer) Apply(ctx context.Context, _, t bool) (bool, error) {
	w.see(ctx, "Apply")
	w.mu.Lock()
	defer w.mu.Unlock()
	w.set = t
	return t, nil
}
func (w *walkSeer) ApplyDry(ctx context.Context, _, t bool) (bool, error) { return t, nil }

// TestCurrentWalk: every method of an item sees the ID of the walk that
// runs it, and no other context carries one.
func TestCurrentWalk(t *testing.T) {
	_, ok := converge.CurrentWalk(context.Background())
	assert.False(t, ok)
	w := &walkSeer{seen: map[string]converge.WalkID{}}
	g := converge.NewGraph()
	g.Add(converge.Wrap[bool](w), converge.Present)
	rep, err := converge.Apply(context.Background(), g)
	require.NoError(t, err)
	want := map[string]converge.WalkID{"StateCurrent": rep.Walk, "StateGoal": rep.Walk, "Check": rep.Walk, "Apply": rep.Walk}
	assert.Equal(t, want, w.seen)
	rep2, err := converge.Apply(context.Background(), g)
	require.NoError(t, err)
	assert.NotEqual(t, rep.Walk, rep2.Walk)
	assert.Equal(t, rep2.Walk, w.seen["StateCurrent"], "the second walk")
}

// TestApplyOneWorkerInterrupt interrupts a walk of one worker, which runs
// without a lock (the walk's solo path), while "a" applies: the interrupt
// reaches it all the same, a graceful one lets "a" finish and an immediate
// one cancels it, and nothing else starts.
func TestApplyOneWorkerInterrupt(t *testing.T) {
	tests := []struct {
		name        string
		grace       time.Duration
		interrupted converge.Interrupt
		// a is a's outcome; c is c's, which waits for a.
		a, c converge.Outcome
	}{
		{name: "graceful", grace: time.Minute, interrupted: converge.InterruptGraceful,
			a: converge.OutcomeChanged, c: converge.OutcomeNotRun},
		{name: "immediate", grace: 0, interrupted: converge.InterruptImmediate,
			a: converge.OutcomeFailed, c: converge.OutcomeWaiting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 1, Grace: tt.grace})
				require.NoError(t, err)
				g, items := interruptGraph(10 * time.Second)
				ctx, interrupt := converge.WithInterrupt(t.Context())
				defer interrupt()
				wait := applyAsync(w, ctx, g)
				time.Sleep(time.Second)
				require.Equal(t, 1, items[0].Calls("Apply"), "a is applying")
				interrupt()
				rep, err := wait()
				require.ErrorIs(t, err, context.Canceled)
				assert.Equal(t, tt.interrupted, rep.Interrupted)
				ra, _ := rep.Item("a")
				assert.Equal(t, tt.a, ra.Outcome)
				rb, _ := rep.Item("b")
				assert.Equal(t, converge.OutcomeNotRun, rb.Outcome, "b never started")
				assert.Zero(t, items[1].Calls("StateCurrent"))
				rc, _ := rep.Item("c")
				assert.Equal(t, tt.c, rc.Outcome)
				assert.Zero(t, items[2].Calls("StateCurrent"))
			})
		})
	}
}
