package converge_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// pair is a target of two items in a row, "a" (slow) then "b", both set
// to spec.App, in one stage.
type pair struct {
	a, b *convergetest.Item
}

func newPair(latency time.Duration) *pair {
	return &pair{a: &convergetest.Item{Key: "a", Latency: latency}, b: &convergetest.Item{Key: "b"}}
}

func (p *pair) build(_ context.Context, s spec) ([]converge.TargetStage, error) {
	g := converge.NewGraph()
	goal := func(converge.DepStates) (string, error) { return s.App, nil }
	p.a.GoalFunc, p.b.GoalFunc = goal, goal
	g.Add(p.a.Node(), converge.Present)
	g.Add(p.b.Node(), converge.Present, "a")
	return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
}

func TestReconcileNewTargetPreemptsAtItemBoundary(t *testing.T) {
	// Parallelism 1 runs the walk's one-worker path, 0 its parallel one.
	for _, par := range []int{1, 0} {
		t.Run(fmt.Sprintf("parallelism %d", par), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				p := newPair(10 * time.Second)
				var mu sync.Mutex
				var walkEvents []converge.Event
				r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: p.build,
					Walk: converge.WalkerConfig{Parallelism: par, Observer: converge.ObserverFunc(func(e converge.Event) {
						mu.Lock()
						walkEvents = append(walkEvents, e)
						mu.Unlock()
					})}})
				require.NoError(t, r.SetTarget(ctx, spec{App: "v1"}))
				rev1 := r.Revision()
				stop := runReconciler(t, r)
				time.Sleep(5 * time.Second) // a is applying v1
				require.NoError(t, r.SetTarget(ctx, spec{App: "v2"}))
				rev2 := r.Revision()
				assert.Equal(t, rev1+1, rev2)
				time.Sleep(5 * time.Second)
				synctest.Wait()
				assert.Equal(t, "v1", p.a.Current(), "a's Apply was not cut in the middle")
				assert.Empty(t, p.b.Current(), "b never started for the old target")
				time.Sleep(time.Minute)
				require.NoError(t, stop())

				assert.Equal(t, "v2", p.a.Current())
				assert.Equal(t, "v2", p.b.Current())
				assert.Equal(t, 1, p.b.Calls("Apply"), "b was applied once, for the new target")
				assert.Empty(t, ev.of(converge.TargetPassFailed), "a preempted pass is not a failure")
				pre := ev.of(converge.TargetPassPreempted)
				require.Len(t, pre, 1)
				assert.Equal(t, rev1, pre[0].Revision)
				fin := ev.of(converge.TargetPassFinished)
				require.Len(t, fin, 1)
				assert.Equal(t, rev2, fin[0].Revision)
				assert.Equal(t, pre[0].Pass+1, fin[0].Pass)
				for _, e := range ev.of(converge.TargetStateChanged) {
					assert.Equal(t, e.Revision, e.Report.Revision, "the report carries its event's revision")
					want := map[uint64]string{rev1: "v1", rev2: "v2"}[e.Revision]
					for _, res := range e.Report.Items {
						if res.Outcome == converge.OutcomeChanged {
							assert.Equal(t, want, res.After, "a revision %d event reports only its own target", e.Revision)
						}
					}
				}
				mu.Lock()
				defer mu.Unlock()
				var old []string
				for _, e := range walkEvents {
					if e.Revision == rev1 && (e.Kind == converge.EventDone || e.Kind == converge.EventSkipped) {
						old = append(old, string(e.ID)+" "+e.Kind.String())
					}
				}
				assert.Equal(t, []string{"a done", "b skipped"}, old, "the old target's walk: a finished, b did not start")
			})
		})
	}
}

func TestReconcileShutdownIsGraceful(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(10 * time.Second)
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: p.build, Walk: converge.WalkerConfig{Grace: time.Minute}})
		require.NoError(t, r.SetTarget(context.Background(), spec{App: "v1"}))
		stop := runReconciler(t, r)
		time.Sleep(time.Second) // a is applying
		start := time.Now()
		require.NoError(t, stop())
		assert.Equal(t, 9*time.Second, time.Since(start), "Run waited for the item in flight")
		assert.Equal(t, "v1", p.a.Current(), "a finished")
		assert.Empty(t, p.b.Current(), "b did not start")
		changed := ev.of(converge.TargetStateChanged)
		require.Len(t, changed, 1)
		assert.Equal(t, converge.InterruptGraceful, changed[0].Report.Interrupted)
		assert.Empty(t, ev.of(converge.TargetPassFailed), "stopping is not a failed pass")
	})
}

func TestReconcileSecondInterruptStopsRunAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(time.Hour)
		r, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: p.build, Walk: converge.WalkerConfig{Grace: time.Hour}})
		require.NoError(t, r.SetTarget(context.Background(), spec{App: "v1"}))
		ctx, interrupt := converge.WithInterrupt(context.Background())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		time.Sleep(time.Second)
		interrupt()
		time.Sleep(time.Minute)
		select {
		case err := <-done:
			t.Fatalf("Run returned %v during the grace period", err)
		default:
		}
		start := time.Now()
		interrupt()
		require.NoError(t, <-done)
		assert.Equal(t, start, time.Now())
		assert.Empty(t, p.a.Current(), "a was cancelled")
	})
}

// runThreeTargets runs r through targets v1, v2 and v3 in turn, each until
// nothing moves, and returns the function that stops it.
func runThreeTargets(t *testing.T, r *converge.TargetReconciler[spec]) (stop func() error) {
	t.Helper()
	for _, app := range []string{"v1", "v2", "v3"} {
		require.NoError(t, r.SetTarget(context.Background(), spec{Host: "on", App: app}))
		if stop == nil {
			stop = runReconciler(t, r)
		}
		synctest.Wait()
	}
	return stop
}

func TestReconcileBlockedSubscriberDoesNotStallLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		release := make(chan struct{})
		var mu sync.Mutex
		var blocked []converge.TargetEvent
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build})
		r.Subscribe(func(e converge.TargetEvent) {
			mu.Lock()
			blocked = append(blocked, e)
			mu.Unlock()
			<-release
		})
		stop := runThreeTargets(t, r)
		v, _ := d.app.get()
		assert.Equal(t, "v3", v, "the loop went on while a subscriber was blocked")
		assert.Len(t, ev.of(converge.TargetPassFinished), 3, "the other subscriber got every event")

		start := time.Now()
		require.NoError(t, stop())
		assert.Equal(t, converge.DefaultEventDrain, time.Since(start), "Run waited for the blocked subscriber no longer than EventDrain")

		close(release) // its callback returns: its goroutine ends (goleak checks)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		assert.Len(t, blocked, 1, "a subscriber abandoned at shutdown gets nothing more")
	})
}

func TestReconcileSlowSubscriberIsToldWhatItLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		release := make(chan struct{})
		var got []converge.TargetEvent
		r, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build, Walk: converge.WalkerConfig{EventBuffer: 2}})
		r.Subscribe(func(e converge.TargetEvent) {
			got = append(got, e)
			if len(got) == 1 {
				<-release
			}
		})
		stop := runThreeTargets(t, r)
		close(release)
		synctest.Wait()
		require.NoError(t, stop())

		require.LessOrEqual(t, len(got), 3, "the event it was busy with and the 2 newest")
		dropped := 0
		for _, e := range got {
			dropped += e.Dropped
		}
		// Three passes: host and apps changed, then apps changed twice; each
		// finished.
		assert.Equal(t, 3+2+2, len(got)+dropped, "what it lost is counted in the events it got")
		last := got[len(got)-1]
		assert.Equal(t, converge.TargetPassFinished, last.Kind)
		assert.Equal(t, r.Revision(), last.Revision)
	})
}
