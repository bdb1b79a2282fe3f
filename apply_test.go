package converge_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// probe is an untyped Node that records when its Apply starts and ends on a
// shared logical clock, and can be told to fail.
type probe struct {
	id    converge.ID
	clock *atomic.Int64
	fail  bool

	mu           sync.Mutex
	value        string
	goal         string
	start, end   int64
	applies      int
	checksBefore int
}

func (p *probe) ID() converge.ID { return p.id }
func (p *probe) StateCurrent(context.Context, converge.DepStates) (any, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.value, nil
}
func (p *probe) StateGoal(context.Context, converge.DepStates) (any, error)  { return p.goal, nil }
func (p *probe) StateClean(context.Context, converge.DepStates) (any, error) { return "", nil }
func (p *probe) Check(_ context.Context, c, t any) (converge.Decision, error) {
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (p *probe) Apply(_ context.Context, _, t any) (any, error) {
	p.mu.Lock()
	p.applies++
	p.start = p.clock.Add(1)
	p.mu.Unlock()
	runtimeYield()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.end = p.clock.Add(1)
	if p.fail {
		return nil, errors.New("probe failure")
	}
	p.value = t.(string)
	return t, nil
}
func (p *probe) ApplyDry(_ context.Context, _, t any) (any, error) { return t, nil }

func runtimeYield() {
	// Give other workers a chance to interleave without sleeping.
	for range 3 {
		runtime.Gosched()
	}
}

type randomGraph struct {
	g       *converge.Graph
	probes  []*probe
	deps    [][]int
	present []bool
}

// newRandomGraph builds a seeded random DAG of n items; each item depends on
// up to maxDeps earlier items. With mixed presence, an item is Absent with
// probability 1/3 and Present items only depend on Present ones.
func newRandomGraph(r *rand.Rand, n, maxDeps int, failRate float64, mixed bool) *randomGraph {
	rg := &randomGraph{g: converge.NewGraph()}
	clock := &atomic.Int64{}
	for k := range n {
		p := &probe{id: converge.ID(fmt.Sprintf("n%03d", k)), clock: clock, goal: "v", fail: r.Float64() < failRate}
		present := !mixed || r.IntN(3) > 0
		if !present {
			p.value = "old" // something to remove
		}
		var deps []int
		var ids []converge.ID
		if k > 0 {
			seen := map[int]bool{}
			for range r.IntN(maxDeps + 1) {
				d := r.IntN(k)
				if (present && !rg.present[d]) || seen[d] {
					continue
				}
				seen[d] = true
				deps = append(deps, d)
				ids = append(ids, rg.probes[d].id)
			}
		}
		presence := converge.Present
		if !present {
			presence = converge.Absent
		}
		rg.g.Add(p, presence, ids...)
		rg.probes = append(rg.probes, p)
		rg.deps = append(rg.deps, deps)
		rg.present = append(rg.present, present)
	}
	return rg
}

// preds returns, for the walk of an Apply, the items that must finish
// before k may start.
func (rg *randomGraph) preds(k int) []int {
	if rg.present[k] {
		return rg.deps[k]
	}
	var out []int
	for j, deps := range rg.deps {
		if rg.present[j] {
			continue
		}
		for _, d := range deps {
			if d == k {
				out = append(out, j)
				break
			}
		}
	}
	return out
}

func TestApplyPropertiesOnRandomDAGs(t *testing.T) {
	for seed := range 300 {
		r := rand.New(rand.NewPCG(uint64(seed), 42))
		n := 1 + r.IntN(60)
		mixed := seed%2 == 1
		failRate := []float64{0, 0.05, 0.2}[seed%3]
		par := 1 + r.IntN(8)
		rg := newRandomGraph(r, n, 3, failRate, mixed)
		w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: par})
		require.NoError(t, err)
		rep, werr := w.Apply(context.Background(), rg.g)
		require.NotNil(t, rep, "seed %d", seed)

		// Every item appears in the report exactly once, in insertion order.
		require.Len(t, rep.Items, n, "seed %d", seed)
		for k, it := range rep.Items {
			require.Equal(t, rg.probes[k].id, it.ID, "seed %d", seed)
		}
		failed := 0
		for k, it := range rep.Items {
			p := rg.probes[k]
			var blockers []converge.ID
			for _, d := range rg.preds(k) {
				switch rep.Items[d].Outcome {
				case converge.OutcomeFailed, converge.OutcomeWaiting:
					blockers = append(blockers, rg.probes[d].id)
				}
			}
			if len(blockers) > 0 {
				// A failure's dependents all wait, naming what they wait for.
				require.Equal(t, converge.OutcomeWaiting, it.Outcome, "seed %d item %s", seed, it.ID)
				require.ElementsMatch(t, blockers, it.WaitingFor, "seed %d item %s", seed, it.ID)
				require.Zero(t, p.applies, "seed %d: waiting item %s ran", seed, it.ID)
				continue
			}
			// Nothing else is lost: every unblocked item ran, once.
			require.Equal(t, 1, p.applies, "seed %d item %s", seed, it.ID)
			if p.fail {
				require.Equal(t, converge.OutcomeFailed, it.Outcome)
				require.Equal(t, converge.PhaseApply, it.Phase)
				failed++
			} else {
				require.Equal(t, converge.OutcomeChanged, it.Outcome, "seed %d item %s: %v", seed, it.ID, it.Err)
			}
			// No item starts before the items it waits for have finished.
			for _, d := range rg.preds(k) {
				require.Less(t, rg.probes[d].end, p.start, "seed %d: %s started before %s finished", seed, it.ID, rg.probes[d].id)
			}
		}
		if failed == 0 {
			require.NoError(t, werr, "seed %d", seed)
		} else {
			var ies []*converge.ItemError
			for _, it := range rep.Items {
				var ie *converge.ItemError
				if errors.As(it.Err, &ie) {
					ies = append(ies, ie)
				}
			}
			require.Len(t, ies, failed)
			require.Error(t, werr)
			var ie *converge.ItemError
			require.ErrorAs(t, werr, &ie)
		}
	}
}

func TestApplyBoundsParallelism(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var inflight, peak atomic.Int32
		g := converge.NewGraph()
		for i := range 10 {
			it := &gateItem{Item: convergetest.Item{Key: converge.ID(fmt.Sprint(i)), Goal: "x"}, inflight: &inflight, peak: &peak}
			g.Add(converge.Wrap[string](it), converge.Present)
		}
		w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 3})
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			rep, err := w.Apply(t.Context(), g)
			assert.NoError(t, err)
			assert.Equal(t, 10, rep.Count(converge.OutcomeChanged))
		}()
		synctest.Wait()
		assert.Equal(t, int32(3), inflight.Load(), "exactly Parallelism items run at once")
		<-done
		assert.Equal(t, int32(3), peak.Load())
	})
}

// gateItem holds Apply for a second of (fake) time and tracks concurrency.
type gateItem struct {
	convergetest.Item
	inflight, peak *atomic.Int32
}

func (g *gateItem) Apply(ctx context.Context, c, t string) (string, error) {
	n := g.inflight.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			break
		}
	}
	time.Sleep(time.Second) // fake time inside the synctest bubble
	g.inflight.Add(-1)
	return g.Item.Apply(ctx, c, t)
}

func TestApplyFailFast(t *testing.T) {
	g := converge.NewGraph()
	bad := (&convergetest.Item{Key: "bad", Goal: "x"}).FailAt(converge.PhaseApply, -1, nil)
	g.Add(bad.Node(), converge.Present)
	var others []*convergetest.Item
	for i := range 5 {
		it := &convergetest.Item{Key: converge.ID(fmt.Sprint("ok", i)), Goal: "x"}
		others = append(others, it)
		g.Add(it.Node(), converge.Present)
	}
	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 1, FailFast: true})
	require.NoError(t, err)
	rep, err := w.Apply(t.Context(), g)
	require.ErrorIs(t, err, convergetest.ErrInjected)
	require.ErrorIs(t, err, converge.ErrNotRun)
	assert.Equal(t, converge.OutcomeFailed, rep.Items[0].Outcome)
	for i, it := range others {
		assert.Equal(t, converge.OutcomeNotRun, rep.Items[i+1].Outcome)
		assert.ErrorIs(t, rep.Items[i+1].Err, converge.ErrNotRun)
		assert.Zero(t, it.Calls("StateCurrent"), "not-run items are not touched")
	}

	// Without fail-fast, independent branches go on.
	w, err = converge.NewWalker(converge.WalkerConfig{Parallelism: 1})
	require.NoError(t, err)
	rep, err = w.Apply(t.Context(), g)
	require.Error(t, err)
	require.NotErrorIs(t, err, converge.ErrNotRun)
	assert.Equal(t, 5, rep.Count(converge.OutcomeChanged))
}

func TestApplyCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		g := converge.NewGraph()
		first := &convergetest.Item{Key: "first", Goal: "x"}
		slow := &convergetest.Item{Key: "slow", Goal: "x", Latency: time.Hour}
		after := &convergetest.Item{Key: "after", Goal: "x"}
		g.Add(first.Node(), converge.Present)
		g.Add(slow.Node(), converge.Present, "first")
		g.Add(after.Node(), converge.Present, "slow")
		g.Add((&convergetest.Item{Key: "later", Goal: "x"}).Node(), converge.Present, "after")
		other := &convergetest.Item{Key: "other", Goal: "x"}
		g.Add(other.Node(), converge.Present, "first")

		var rep *converge.Report
		var err error
		done := make(chan struct{})
		w, werr := converge.NewWalker(converge.WalkerConfig{Parallelism: 1})
		require.NoError(t, werr)
		go func() {
			defer close(done)
			rep, err = w.Apply(ctx, g)
		}()
		synctest.Wait() // slow is now waiting in Apply
		require.Equal(t, 1, slow.Calls("Apply"))
		cancel()
		<-done

		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, converge.ErrNotRun)
		assert.Equal(t, converge.OutcomeChanged, rep.Items[0].Outcome)
		// The item in flight stopped through its context.
		assert.Equal(t, converge.OutcomeFailed, rep.Items[1].Outcome)
		assert.ErrorIs(t, rep.Items[1].Err, context.Canceled)
		// Its dependents wait for it; nothing else is lost.
		assert.Equal(t, converge.OutcomeWaiting, rep.Items[2].Outcome)
		assert.Equal(t, converge.OutcomeWaiting, rep.Items[3].Outcome)
		assert.Zero(t, after.Calls("StateCurrent"))
		// What was queued but not started is reported as not run.
		assert.Equal(t, converge.OutcomeNotRun, rep.Items[4].Outcome)
		assert.Zero(t, other.Calls("StateCurrent"))
	})
}

func TestApplyCancelledBeforeStartRunsNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	g := converge.NewGraph()
	a := &convergetest.Item{Key: "a", Goal: "x"}
	g.Add(a.Node(), converge.Present)
	rep, err := converge.Apply(ctx, g)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, converge.OutcomeNotRun, rep.Items[0].Outcome)
	assert.Zero(t, a.Calls("StateCurrent"))
}

func TestApplyPanicBecomesItemError(t *testing.T) {
	// Parallelism 1 runs the walk's one-worker path, 0 its parallel one.
	for _, par := range []int{1, 0} {
		for _, phase := range []converge.Phase{converge.PhaseDiscover, converge.PhaseGoal, converge.PhaseCheck, converge.PhaseApply} {
			t.Run(fmt.Sprintf("%s/parallelism %d", phase, par), func(t *testing.T) {
				g := converge.NewGraph()
				boom := (&convergetest.Item{Key: "boom", Goal: "x"}).PanicAt(phase, "kaboom")
				g.Add(boom.Node(), converge.Present)
				g.Add(fake("fine"), converge.Present)
				w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: par})
				require.NoError(t, err)
				rep, err := w.Apply(t.Context(), g)
				require.ErrorIs(t, err, converge.ErrPanic)
				var pe *converge.PanicError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, "kaboom", pe.Value)
				assert.Contains(t, string(pe.Stack), "convergetest")
				it, _ := rep.Item("boom")
				assert.Equal(t, phase, it.Phase)
				fine, _ := rep.Item("fine")
				assert.Equal(t, converge.OutcomeChanged, fine.Outcome)
			})
		}
	}
}

func TestApplyErrorPhases(t *testing.T) {
	sentinel := errors.New("boom")
	for _, phase := range []converge.Phase{converge.PhaseDiscover, converge.PhaseGoal, converge.PhaseCheck, converge.PhaseApply, converge.PhaseVerify} {
		t.Run(phase.String(), func(t *testing.T) {
			g := converge.NewGraph()
			it := (&convergetest.Item{Key: "it", Goal: "x"}).FailAt(phase, 1, sentinel)
			g.Add(it.Node(), converge.Present)
			rep, err := converge.Apply(t.Context(), g)
			require.ErrorIs(t, err, sentinel)
			var ie *converge.ItemError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, converge.ID("it"), ie.ID)
			assert.Equal(t, phase, ie.Phase)
			assert.Equal(t, phase, rep.Items[0].Phase)
			// The failure was transient: the next walk converges.
			_, err = converge.Apply(t.Context(), g)
			require.NoError(t, err)
		})
	}
}

func TestApplyVerifyCatchesItemThatNeverConverges(t *testing.T) {
	g := converge.NewGraph()
	stuck := &convergetest.Item{Key: "stuck", Goal: "x", Stuck: true}
	g.Add(stuck.Node(), converge.Present)
	rep, err := converge.Apply(t.Context(), g)
	require.ErrorIs(t, err, converge.ErrNotConverged)
	assert.Equal(t, converge.PhaseVerify, rep.Items[0].Phase)
	assert.Equal(t, 1, stuck.Calls("Apply"))

	// A dry run of the same item also refuses to promise convergence.
	rep, err = converge.ApplyDry(t.Context(), g)
	require.ErrorIs(t, err, converge.ErrNotConverged)
	assert.Equal(t, converge.PhaseVerify, rep.Items[0].Phase)
}

func TestApplyDryWritesNothingAndFeedsDependents(t *testing.T) {
	g := converge.NewGraph()
	base := &convergetest.Item{Key: "base", Goal: "10"}
	derived := &convergetest.Item{Key: "derived", GoalFunc: func(d converge.DepStates) (string, error) {
		v, err := converge.DepState[string](d, "base")
		return "from-" + v, err
	}}
	g.Add(base.Node(), converge.Present)
	g.Add(derived.Node(), converge.Present, "base")
	rep, err := converge.ApplyDry(t.Context(), g)
	require.NoError(t, err)
	assert.True(t, rep.Dry)
	assert.Equal(t, "", base.Current())
	assert.Equal(t, "", derived.Current())
	assert.Zero(t, base.Calls("Apply")+derived.Calls("Apply"))
	it, _ := rep.Item("derived")
	assert.Equal(t, converge.OutcomeWouldChange, it.Outcome)
	assert.Equal(t, "from-10", it.Target, "the goal was computed from the simulated state of base")
	assert.Equal(t, "from-10", it.After)
	assert.Contains(t, rep.Summary(), "apply (dry run): 2 items: 2 would-change")

	rep, err = converge.Apply(t.Context(), g)
	require.NoError(t, err)
	assert.Equal(t, "from-10", derived.Current())
	assert.Equal(t, 2, rep.Count(converge.OutcomeChanged))
}

func TestCleanRunsInReverseOrder(t *testing.T) {
	rec := &convergetest.Recorder{}
	g := converge.NewGraph()
	for _, spec := range []struct {
		id   converge.ID
		deps []converge.ID
	}{{"net", nil}, {"vol", nil}, {"db", []converge.ID{"net", "vol"}}, {"web", []converge.ID{"db", "net"}}} {
		g.Add((&convergetest.Item{Key: spec.id, Goal: "up", Value: "up", Recorder: rec}).Node(), converge.Present, spec.deps...)
	}
	rep, err := converge.Clean(t.Context(), g)
	require.NoError(t, err)
	assert.Equal(t, converge.ModeClean, rep.Mode)
	assert.Equal(t, 4, rep.Count(converge.OutcomeChanged))
	before := func(a, b converge.ID) {
		t.Helper()
		assert.Less(t, rec.Index(a, "apply-end"), rec.Index(b, "apply-start"), "%s must be removed before %s", a, b)
	}
	before("web", "db")
	before("web", "net")
	before("db", "net")
	before("db", "vol")

	// CleanDry removes nothing.
	g2 := converge.NewGraph()
	keep := &convergetest.Item{Key: "keep", Value: "v", Goal: "v"}
	g2.Add(keep.Node(), converge.Present)
	w, _ := converge.NewWalker(converge.WalkerConfig{})
	rep, err = w.CleanDry(t.Context(), g2)
	require.NoError(t, err)
	assert.Equal(t, "v", keep.Current())
	assert.Equal(t, converge.OutcomeWouldChange, rep.Items[0].Outcome)
}

func TestCleanRefusesItemsWithoutStateClean(t *testing.T) {
	g := converge.NewGraph()
	g.Add(noClean{fake("a")}, converge.Present)
	rep, err := converge.Clean(t.Context(), g)
	assert.Nil(t, rep)
	require.ErrorIs(t, err, converge.ErrNoClean)
	var ge *converge.GraphError
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, converge.ID("a"), ge.ID)
}

func TestApplyAbsentItemsWaitForDependents(t *testing.T) {
	rec := &convergetest.Recorder{}
	g := converge.NewGraph()
	db := &convergetest.Item{Key: "db", Value: "up", Recorder: rec}
	app := (&convergetest.Item{Key: "app", Value: "up", Recorder: rec}).FailAt(converge.PhaseApply, 1, nil)
	keep := &convergetest.Item{Key: "keep", Goal: "x", Recorder: rec}
	g.Add(db.Node(), converge.Absent)
	g.Add(app.Node(), converge.Absent, "db")
	g.Add(keep.Node(), converge.Present)

	rep, err := converge.Apply(t.Context(), g)
	require.ErrorIs(t, err, convergetest.ErrInjected)
	it, _ := rep.Item("db")
	assert.Equal(t, converge.OutcomeWaiting, it.Outcome)
	assert.Equal(t, []converge.ID{"app"}, it.WaitingFor, "an absent item waits for its dependents")
	assert.Equal(t, "up", db.Current())
	kept, _ := rep.Item("keep")
	assert.Equal(t, converge.OutcomeChanged, kept.Outcome)

	rep, err = converge.Apply(t.Context(), g)
	require.NoError(t, err)
	assert.Less(t, rec.Index("app", "apply-end"), rec.Index("db", "apply-start"))
	assert.Equal(t, "", db.Current())
	assert.Equal(t, converge.Absent, rep.Items[0].Presence)
}

// unknownItem cannot know its state until it has been applied once.
type unknownItem struct {
	convergetest.Item
	applied atomic.Bool
}

func (u *unknownItem) StateCurrent(ctx context.Context, d converge.DepStates) (string, error) {
	if !u.applied.Load() {
		return "", fmt.Errorf("predecessor not ready: %w", converge.ErrStateUnknown)
	}
	return u.Item.StateCurrent(ctx, d)
}

func (u *unknownItem) Apply(ctx context.Context, c, t string) (string, error) {
	u.applied.Store(true)
	return u.Item.Apply(ctx, c, t)
}

func TestApplyUnknownCurrentStateIsApplied(t *testing.T) {
	u := &unknownItem{Item: convergetest.Item{Key: "u", Goal: "x", Value: "x"}}
	g := converge.NewGraph()
	g.Add(converge.Wrap[string](u), converge.Present)
	rep, err := converge.Apply(t.Context(), g)
	require.NoError(t, err)
	it := rep.Items[0]
	assert.True(t, it.Unknown)
	assert.Nil(t, it.Before)
	assert.Equal(t, converge.Required(converge.WorkUnitsUnknown), it.Decision)
	assert.Equal(t, converge.OutcomeChanged, it.Outcome)
	assert.Zero(t, u.Calls("Check")-1, "only the verify check ran")
}

// rebootItem asks for a reboot when it changes something.
type rebootItem struct{ convergetest.Item }

func (r *rebootItem) Apply(ctx context.Context, c, t string) (string, error) {
	converge.RequireAction(ctx, converge.ActionReboot, "boot config changed")
	return r.Item.Apply(ctx, c, t)
}

func TestApplyCollectsRequiredActions(t *testing.T) {
	g := converge.NewGraph()
	g.Add(converge.Wrap[string](&rebootItem{convergetest.Item{Key: "boot", Goal: "x"}}), converge.Present)
	rep, err := converge.Apply(t.Context(), g)
	require.NoError(t, err)
	require.Equal(t, []converge.RequiredAction{{ID: "boot", Action: converge.ActionReboot, Reason: "boot config changed"}}, rep.Actions())
	assert.Contains(t, rep.Summary(), "reboot")
	// Outside a walk the helpers do nothing.
	converge.RequireAction(context.Background(), converge.ActionShutdown, "x")
	converge.ReportProgress(context.Background(), 1, 2)
}

func TestApplyEventsOrder(t *testing.T) {
	// Parallelism 1 runs the walk's one-worker path, 4 its parallel one.
	for _, par := range []int{1, 4} {
		t.Run(fmt.Sprintf("parallelism %d", par), func(t *testing.T) {
			var mu sync.Mutex
			var events []converge.Event
			obs := converge.ObserverFunc(func(e converge.Event) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			})
			r := rand.New(rand.NewPCG(7, 7))
			rg := newRandomGraph(r, 80, 3, 0.1, true)
			w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: par, Observer: obs})
			require.NoError(t, err)
			rep, _ := w.Apply(t.Context(), rg.g)

			// All delivered before Apply returned, numbered in order.
			mu.Lock()
			defer mu.Unlock()
			for i, e := range events {
				require.Equal(t, uint64(i+1), e.Seq)
			}
			byItem := map[converge.ID][]converge.EventKind{}
			pos := map[converge.ID]map[converge.EventKind]int{}
			for i, e := range events {
				byItem[e.ID] = append(byItem[e.ID], e.Kind)
				if pos[e.ID] == nil {
					pos[e.ID] = map[converge.EventKind]int{}
				}
				pos[e.ID][e.Kind] = i
			}
			for k, it := range rep.Items {
				kinds := byItem[it.ID]
				switch it.Outcome {
				case converge.OutcomeWaiting, converge.OutcomeNotRun:
					require.Equal(t, []converge.EventKind{converge.EventSkipped}, kinds, it.ID)
				case converge.OutcomeFailed:
					require.Equal(t, []converge.EventKind{converge.EventQueued, converge.EventChecking, converge.EventApplying, converge.EventFailed}, kinds, it.ID)
				default:
					require.Equal(t, []converge.EventKind{converge.EventQueued, converge.EventChecking, converge.EventApplying, converge.EventDone}, kinds, it.ID)
					for _, d := range rg.preds(k) {
						require.Less(t, pos[rg.probes[d].id][converge.EventDone], pos[it.ID][converge.EventQueued])
					}
				}
			}
		})
	}
}

func TestApplyProgressUnits(t *testing.T) {
	var got []converge.Event
	w, err := converge.NewWalker(converge.WalkerConfig{Observer: converge.ObserverFunc(func(e converge.Event) {
		if e.Kind == converge.EventApplying {
			got = append(got, e)
		}
	})})
	require.NoError(t, err)
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "srv", Goal: "x", Units: 3}).Node(), converge.Present)
	_, err = w.Apply(t.Context(), g)
	require.NoError(t, err)
	require.Len(t, got, 4)
	for i, e := range got {
		assert.Equal(t, i, e.Done)
		assert.Equal(t, 3, e.Total)
	}
}

func TestWalkerConfigValidation(t *testing.T) {
	_, err := converge.NewWalker(converge.WalkerConfig{Parallelism: -1})
	require.ErrorIs(t, err, converge.ErrInvalidConfig)
	var ce *converge.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Parallelism", ce.Field)
	assert.NoError(t, converge.DefaultWalkerConfig().Validate())
}

func TestApplyNilGraph(t *testing.T) {
	_, err := converge.Apply(t.Context(), nil)
	require.ErrorIs(t, err, converge.ErrInvalidGraph)
}

func TestDepStateErrors(t *testing.T) {
	g := converge.NewGraph()
	num := &numItem{}
	g.Add(converge.Wrap[int](num), converge.Present)
	wrongType := &convergetest.Item{Key: "s", GoalFunc: func(d converge.DepStates) (string, error) {
		v, err := converge.DepState[string](d, "num")
		return v, err
	}}
	notDep := &convergetest.Item{Key: "t", GoalFunc: func(d converge.DepStates) (string, error) {
		return converge.DepState[string](d, "num")
	}}
	g.Add(wrongType.Node(), converge.Present, "num")
	g.Add(notDep.Node(), converge.Present)
	rep, err := converge.Apply(t.Context(), g)
	require.ErrorIs(t, err, converge.ErrStateType)
	var te *converge.StateTypeError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "int", te.Got)
	it, _ := rep.Item("t")
	assert.ErrorIs(t, it.Err, converge.ErrUnknownDependency, "only declared dependencies are visible")
	assert.Equal(t, converge.PhaseGoal, it.Phase)
	_, err = converge.DepState[int](nil, "x")
	assert.ErrorIs(t, err, converge.ErrUnknownDependency)
}

type numItem struct{ v atomic.Int64 }

func (n *numItem) ID() converge.ID { return "num" }
func (n *numItem) StateCurrent(context.Context, converge.DepStates) (int, error) {
	return int(n.v.Load()), nil
}
func (n *numItem) StateGoal(context.Context, converge.DepStates) (int, error) { return 7, nil }
func (n *numItem) Check(_ context.Context, c, t int) (converge.Decision, error) {
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(t - c), nil
}
func (n *numItem) Apply(_ context.Context, _, t int) (int, error) {
	n.v.Store(int64(t))
	return t, nil
}
func (n *numItem) ApplyDry(_ context.Context, _, t int) (int, error) { return t, nil }

func TestWrapUnwrap(t *testing.T) {
	num := &numItem{}
	n := converge.Wrap[int](num)
	got, ok := converge.Unwrap[int](n)
	require.True(t, ok)
	assert.Same(t, num, got)
	_, ok = converge.Unwrap[string](n)
	assert.False(t, ok)
	_, isClean := n.(converge.CleanNode)
	assert.False(t, isClean, "an item without StateClean cannot be cleaned")
	assert.Nil(t, converge.Wrap[int](nil))

	// A state of the wrong type is a typed error, not a panic.
	_, err := n.Check(t.Context(), "x", 1)
	assert.ErrorIs(t, err, converge.ErrStateType)
	var te *converge.StateTypeError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, converge.ID("num"), te.ID, "the error names the item")
	assert.Equal(t, "string", te.Got)
	_, err = n.Apply(t.Context(), 1, "x")
	assert.ErrorIs(t, err, converge.ErrStateType)
	_, err = n.ApplyDry(t.Context(), 1, "x")
	assert.ErrorIs(t, err, converge.ErrStateType)
}

func TestReportHelpers(t *testing.T) {
	var nilRep *converge.Report
	assert.NoError(t, nilRep.Err())
	assert.False(t, nilRep.Converged())
	assert.Equal(t, 0, nilRep.Count(converge.OutcomeChanged))
	_, ok := nilRep.Item("x")
	assert.False(t, ok)

	g := converge.NewGraph()
	g.Add(fake("a"), converge.Present)
	g.Add((&convergetest.Item{Key: "b", Goal: "b"}).FailAt(converge.PhaseCheck, -1, nil).Node(), converge.Present)
	g.Add(fake("c"), converge.Present, "b")
	rep, err := converge.Apply(t.Context(), g)
	require.Error(t, err)
	assert.False(t, rep.Converged())
	assert.True(t, rep.Changed())
	assert.Equal(t, []converge.ID{"a"}, rep.IDs(converge.OutcomeChanged))
	assert.Equal(t, []converge.ID{"b", "c"}, rep.IDs(converge.OutcomeFailed, converge.OutcomeWaiting))
	s := rep.Summary()
	assert.Contains(t, s, "apply: 3 items: 1 changed, 1 failed, 1 waiting")
	assert.Contains(t, s, "failed       b (check): convergetest: injected failure")
	assert.Contains(t, s, "waiting      c (waiting for b)")

	rep, err = converge.Apply(t.Context(), converge.NewGraph())
	require.NoError(t, err)
	assert.True(t, rep.Converged())
	assert.Contains(t, rep.Summary(), "nothing to do")
}

func TestStringers(t *testing.T) {
	assert.Equal(t, "present", converge.Present.String())
	assert.Equal(t, "absent", converge.Absent.String())
	assert.Equal(t, "required", converge.ChangeRequired.String())
	assert.Equal(t, "not-required", converge.ChangeNotRequired.String())
	assert.Equal(t, "verify", converge.PhaseVerify.String())
	assert.Equal(t, "would-change", converge.OutcomeWouldChange.String())
	assert.Equal(t, "applying", converge.EventApplying.String())
	assert.Equal(t, "reboot", converge.ActionReboot.String())
	assert.Equal(t, "shutdown", converge.ActionShutdown.String())
	assert.Equal(t, "clean", converge.ModeClean.String())
	assert.False(t, converge.Forced(t.Context()))
	assert.True(t, converge.Forced(converge.WithForce(t.Context())))
}

// TestItemTimesNestInTheWalk checks the times a walk keeps with the system
// clock: every item starts after the walk and ends before it, and an item
// starts after its dependency ended.
func TestItemTimesNestInTheWalk(t *testing.T) {
	g := converge.NewGraph()
	a := &convergetest.Item{Key: "a", Goal: "1"}
	b := &convergetest.Item{Key: "b", Goal: "1"}
	c := &convergetest.Item{Key: "c", Goal: "1"}
	g.Add(a.Node(), converge.Present)
	g.Add(b.Node(), converge.Present, "a")
	g.Add(c.Node(), converge.Present, "b")
	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 4})
	require.NoError(t, err)
	for range 2 { // a walk that changes, then one that does not
		rep, err := w.Apply(context.Background(), g)
		require.NoError(t, err)
		end := rep.Started.Add(rep.Duration)
		var prevEnd time.Time
		for _, id := range []converge.ID{"a", "b", "c"} {
			r, ok := rep.Item(id)
			require.True(t, ok)
			assert.False(t, r.Started.Before(rep.Started), "%s started before the walk", id)
			assert.GreaterOrEqual(t, r.Duration, time.Duration(0), id)
			assert.False(t, r.Started.Add(r.Duration).After(end), "%s ended after the walk", id)
			assert.False(t, r.Started.Before(prevEnd), "%s started before its dependency ended", id)
			prevEnd = r.Started.Add(r.Duration)
		}
	}
}

// TestApplyOneWorkerRunsInInsertionOrder: with Parallelism 1 the items run
// in the order they were added, as far as their order constraints allow,
// in Apply (an item after its dependencies) and in Clean (before them).
func TestApplyOneWorkerRunsInInsertionOrder(t *testing.T) {
	tests := []struct {
		name  string
		clean bool
		want  []converge.ID
	}{
		// c waits for b; of the ready items the first added runs first
		// (longest chain first would start with b).
		{name: "apply", want: []converge.ID{"a", "b", "c", "d"}},
		// b is removed after c, which depends on it.
		{name: "clean", clean: true, want: []converge.ID{"c", "a", "b", "d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var started []converge.ID
			w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 1, Observer: converge.ObserverFunc(func(e converge.Event) {
				if e.Kind == converge.EventChecking {
					mu.Lock()
					started = append(started, e.ID)
					mu.Unlock()
				}
			})})
			require.NoError(t, err)
			g := converge.NewGraph()
			for _, spec := range []struct {
				id   converge.ID
				deps []converge.ID
			}{{"c", []converge.ID{"b"}}, {"a", nil}, {"b", nil}, {"d", nil}} {
				g.Add((&convergetest.Item{Key: spec.id, Goal: "up", Value: "up"}).Node(), converge.Present, spec.deps...)
			}
			if tt.clean {
				_, err = w.Clean(t.Context(), g)
			} else {
				_, err = w.Apply(t.Context(), g)
			}
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, tt.want, started)
		})
	}
}

// depSeer is an untyped Node whose goal and clean state are "seen:" and the
// state its dependency dep reached, or "none" when DepStates has none.
type depSeer struct {
	id, dep converge.ID
	value   any
}

func (s *depSeer) ID() converge.ID { return s.id }
func (s *depSeer) StateCurrent(context.Context, converge.DepStates) (any, error) {
	return s.value, nil
}
func (s *depSeer) StateGoal(_ context.Context, d converge.DepStates) (any, error) {
	return s.seen(d), nil
}
func (s *depSeer) StateClean(_ context.Context, d converge.DepStates) (any, error) {
	return s.seen(d), nil
}
func (s *depSeer) seen(d converge.DepStates) any {
	if s.dep == "" {
		return "base-state"
	}
	if v, ok := d.State(s.dep); ok {
		return fmt.Sprintf("seen:%v", v)
	}
	return "none"
}
func (s *depSeer) Check(_ context.Context, c, t any) (converge.Decision, error) {
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (s *depSeer) Apply(_ context.Context, _, t any) (any, error)    { s.value = t; return t, nil }
func (s *depSeer) ApplyDry(_ context.Context, _, t any) (any, error) { return t, nil }

// TestDepStatesFollowTheWalksOrder: an item sees the state of a dependency
// that the walk's order puts before it, never one that comes after it, and
// that of a dependency with no order to it once that dependency finished
// (at Parallelism 1 the one added first runs first). Each case runs with one
// worker and with several, on a chain of items so the workers share it.
func TestDepStatesFollowTheWalksOrder(t *testing.T) {
	for _, tc := range []struct {
		name          string
		clean         bool
		base, derived converge.Presence
		want          string
	}{
		{"apply: Present after its Present dependency", false, converge.Present, converge.Present, "seen:base-state"},
		{"apply: Absent with a Present dependency that ran first", false, converge.Present, converge.Absent, "seen:base-state"},
		{"apply: Absent before its Absent dependency", false, converge.Absent, converge.Absent, "none"},
		{"clean: removed before its dependency", true, converge.Present, converge.Present, "none"},
	} {
		for _, par := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/parallelism %d", tc.name, par), func(t *testing.T) {
				const n = 20
				g := converge.NewGraph()
				for i := range n {
					base := converge.ID(fmt.Sprintf("base-%02d", i))
					g.Add(&depSeer{id: base}, tc.base)
					g.Add(&depSeer{id: converge.ID(fmt.Sprintf("derived-%02d", i)), dep: base}, tc.derived, base)
				}
				w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: par})
				require.NoError(t, err)
				walk := w.Apply
				if tc.clean {
					walk = w.Clean
				}
				rep, err := walk(t.Context(), g)
				require.NoError(t, err)
				for i := range n {
					it, ok := rep.Item(converge.ID(fmt.Sprintf("derived-%02d", i)))
					require.True(t, ok)
					if par == 1 || tc.want == "none" || tc.derived == converge.Present {
						assert.Equal(t, tc.want, it.Target, it.ID)
					} else {
						// No order between the two: the dependency's
						// state is seen only if it finished first.
						assert.Contains(t, []any{tc.want, "none"}, it.Target, it.ID)
					}
				}
			})
		}
	}
}
