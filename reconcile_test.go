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

// device is a fake host for the target reconciler: an app item that
// honours an update lock and may ask for a reboot, after a host item.
type device struct {
	host *convergetest.Item
	app  *lockItem
}

// spec is the target: what the host and app values should be.
type spec struct {
	Host string `json:"host"`
	App  string `json:"app"`
}

func newDevice() *device {
	return &device{host: &convergetest.Item{Key: "host"}, app: &lockItem{id: "app"}}
}

// build turns a spec into two stages, host before app.
func (d *device) build(_ context.Context, s spec) ([]converge.TargetStage, error) {
	d.host.Goal = s.Host
	d.app.setGoal(s.App)
	hg := converge.NewGraph()
	hg.Add(d.host.Node(), converge.Present)
	ag := converge.NewGraph()
	ag.Add(converge.Wrap[string](d.app), converge.Present)
	return []converge.TargetStage{{Name: "host", Graph: hg}, {Name: "apps", Graph: ag}}, nil
}

// lockItem is an Item[string] whose Apply takes Latency, refuses to run
// while Locked unless forced, and may require a reboot.
type lockItem struct {
	id      converge.ID
	mu      sync.Mutex
	value   string
	goal    string
	locked  bool
	latency time.Duration
	reboot  bool
	applies int
	forced  []bool
}

func (l *lockItem) setGoal(g string) { l.mu.Lock(); l.goal = g; l.mu.Unlock() }
func (l *lockItem) setLocked(b bool) { l.mu.Lock(); l.locked = b; l.mu.Unlock() }
func (l *lockItem) get() (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value, l.applies
}
func (l *lockItem) ID() converge.ID { return l.id }
func (l *lockItem) StateCurrent(context.Context, converge.DepStates) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value, nil
}
func (l *lockItem) StateGoal(context.Context, converge.DepStates) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.goal, nil
}
func (l *lockItem) StateClean(context.Context, converge.DepStates) (string, error) { return "", nil }
func (l *lockItem) Check(_ context.Context, cur, target string) (converge.Decision, error) {
	if cur == target {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (l *lockItem) Apply(ctx context.Context, cur, target string) (string, error) {
	if l.latency > 0 {
		select {
		case <-time.After(l.latency):
		case <-ctx.Done():
			return cur, ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forced = append(l.forced, converge.Forced(ctx))
	if l.locked && !converge.Forced(ctx) {
		return cur, fmt.Errorf("app busy: %w", converge.ErrLocked)
	}
	l.applies++
	l.value = target
	if l.reboot && target != "" {
		converge.RequireAction(ctx, converge.ActionReboot, "new kernel")
	}
	return target, nil
}
func (l *lockItem) ApplyDry(_ context.Context, _, target string) (string, error) { return target, nil }

// events collects a reconciler's events.
type events struct {
	mu  sync.Mutex
	all []converge.TargetEvent
}

func (e *events) add(ev converge.TargetEvent) { e.mu.Lock(); e.all = append(e.all, ev); e.mu.Unlock() }
func (e *events) of(k converge.TargetEventKind) []converge.TargetEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []converge.TargetEvent
	for _, ev := range e.all {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

func newReconciler(t *testing.T, cfg converge.TargetReconcilerConfig[spec]) (*converge.TargetReconciler[spec], *events) {
	t.Helper()
	r, err := converge.NewTargetReconciler(cfg)
	require.NoError(t, err)
	ev := &events{}
	r.Subscribe(ev.add)
	return r, ev
}

// runReconciler runs r until the returned stop is called.
func runReconciler(t *testing.T, r *converge.TargetReconciler[spec]) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestReconcileConfigValidate(t *testing.T) {
	build := func(context.Context, spec) ([]converge.TargetStage, error) { return nil, nil }
	tests := []struct {
		name  string
		cfg   converge.TargetReconcilerConfig[spec]
		field string
	}{
		{"no build", converge.TargetReconcilerConfig[spec]{}, "Build"},
		{"negative rounds", converge.TargetReconcilerConfig[spec]{Build: build, MaxRounds: -1}, "MaxRounds"},
		{"negative interval", converge.TargetReconcilerConfig[spec]{Build: build, Interval: -1}, "Interval"},
		{"bad walk", converge.TargetReconcilerConfig[spec]{Build: build, Walk: converge.WalkerConfig{Parallelism: -1}}, "Parallelism"},
		{"bad backoff", converge.TargetReconcilerConfig[spec]{Build: build, Backoff: converge.Backoff{Base: -1}}, "Backoff.Base"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := converge.NewTargetReconciler(tt.cfg)
			require.ErrorIs(t, err, converge.ErrInvalidConfig)
			var ce *converge.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.field, ce.Field)
		})
	}
}

func TestReconcileStagesInOrderAndEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		d := newDevice()
		d.app.reboot = true
		rec := &convergetest.Recorder{}
		d.host.Recorder = rec
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build})
		r.Subscribe(func(e converge.TargetEvent) {
			if e.Kind == converge.TargetStateChanged && e.Stage == "apps" {
				assert.Equal(t, "on", d.host.Current(), "host stage converged before apps started")
			}
		})
		require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		synctest.Wait()
		require.NoError(t, stop())

		assert.Equal(t, "on", d.host.Current())
		v, _ := d.app.get()
		assert.Equal(t, "v1", v)
		changed := ev.of(converge.TargetStateChanged)
		require.Len(t, changed, 2)
		assert.Equal(t, "host", changed[0].Stage)
		assert.Equal(t, "apps", changed[1].Stage)
		assert.Equal(t, []converge.ID{"app"}, changed[1].Report.IDs(converge.OutcomeChanged))
		acts := ev.of(converge.TargetActionRequired)
		require.Len(t, acts, 1)
		assert.Equal(t, converge.ActionReboot, acts[0].Action.Action)
		assert.Equal(t, converge.ID("app"), acts[0].Action.ID)
		fin := ev.of(converge.TargetPassFinished)
		require.Len(t, fin, 1)
		assert.Equal(t, 1, fin[0].Pass)
		assert.Empty(t, ev.of(converge.TargetPassFailed))
		assert.Equal(t, "host apply-start", rec.Records()[0].String())
	})
}

func TestReconcileFailedStageStopsLaterStages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		d.host.FailAt(converge.PhaseApply, -1, nil)
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build,
			Backoff: converge.Backoff{Base: time.Minute, Max: time.Minute}})
		require.NoError(t, r.SetTarget(context.Background(), spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		synctest.Wait()
		require.NoError(t, stop())
		failed := ev.of(converge.TargetPassFailed)
		require.Len(t, failed, 1)
		var se *converge.TargetStageError
		require.ErrorAs(t, failed[0].Err, &se)
		assert.Equal(t, "host", se.Stage)
		require.ErrorIs(t, failed[0].Err, convergetest.ErrInjected)
		var ie *converge.ItemError
		require.ErrorAs(t, failed[0].Err, &ie)
		assert.NotEmpty(t, se.Walk)
		assert.Equal(t, se.Walk, ie.Walk, "the stage error names the walk its item failed in")
		assert.NotContains(t, se.Error(), string(se.Walk))
		assert.Equal(t, r.Revision(), failed[0].Revision)
		assert.Equal(t, time.Minute, failed[0].Retry)
		_, applies := d.app.get()
		assert.Zero(t, applies, "apps never started")
	})
}

// settling is a graph whose one item's goal moves for the first n walks,
// as when applying reveals more to do.
func settling(n int) (converge.TargetBuildFunc[spec], *convergetest.Item) {
	walks := 0
	it := &convergetest.Item{Key: "x"}
	it.GoalFunc = func(converge.DepStates) (string, error) {
		walks++
		return fmt.Sprint(min(walks, n)), nil
	}
	return func(context.Context, spec) ([]converge.TargetStage, error) {
		g := converge.NewGraph()
		g.Add(it.Node(), converge.Present)
		return []converge.TargetStage{{Name: "only", Graph: g}}, nil
	}, it
}

func TestReconcileAppliesUntilNoChange(t *testing.T) {
	tests := []struct {
		name      string
		moves     int
		maxRounds int
		wantErr   bool
		wantWalks int
	}{
		{"settles after the goal stops moving", 3, 0, false, 4},
		{"never settles within the bound", 1000, 5, true, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				build, it := settling(tt.moves)
				r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: build, MaxRounds: tt.maxRounds,
					Backoff: converge.Backoff{Base: time.Hour, Max: time.Hour}})
				require.NoError(t, r.SetTarget(context.Background(), spec{}))
				stop := runReconciler(t, r)
				synctest.Wait()
				require.NoError(t, stop())
				assert.Equal(t, tt.wantWalks, it.Calls("StateGoal"))
				if tt.wantErr {
					failed := ev.of(converge.TargetPassFailed)
					require.Len(t, failed, 1)
					require.ErrorIs(t, failed[0].Err, converge.ErrTargetNotSettled)
					var se *converge.TargetStageError
					require.ErrorAs(t, failed[0].Err, &se)
					assert.Equal(t, "only", se.Stage)
					assert.Equal(t, 5, se.Round)
				} else {
					assert.Len(t, ev.of(converge.TargetPassFinished), 1)
					assert.Len(t, ev.of(converge.TargetStateChanged), 3)
				}
			})
		})
	}
}

func TestReconcileTriggersCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		d.app.latency = 10 * time.Second
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build})
		require.NoError(t, r.SetTarget(context.Background(), spec{Host: "on", App: "v1"}))
		r.Trigger()
		r.Trigger() // merged with the pending pass before Run starts
		stop := runReconciler(t, r)
		time.Sleep(time.Second) // the pass is applying the app
		for range 5 {
			r.Trigger()
		}
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		fin := ev.of(converge.TargetPassFinished)
		require.Len(t, fin, 2, "the triggers during the pass made exactly one more pass")
		assert.Equal(t, 2, fin[1].Pass)
	})
}

func TestReconcileForcedTriggerReachesRunningPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		d.app.latency = 10 * time.Second
		d.app.setLocked(true)
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build})
		require.NoError(t, r.SetTarget(context.Background(), spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		time.Sleep(5 * time.Second) // the app is being applied, not forced
		r.TriggerForced()
		synctest.Wait()
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		v, applies := d.app.get()
		assert.Equal(t, "v1", v, "the running pass saw the raised flag and went past the lock")
		assert.Equal(t, 1, applies)
		fin := ev.of(converge.TargetPassFinished)
		require.Len(t, fin, 2, "the forced request also made one more pass")
		assert.True(t, fin[0].Forced)
		assert.Empty(t, ev.of(converge.TargetPassFailed))
	})
}

func TestReconcileLockedWaitsAndRetriesUntilForced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		d.app.setLocked(true)
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build,
			Backoff: converge.Backoff{Base: time.Second, Max: 4 * time.Second}})
		require.NoError(t, r.SetTarget(context.Background(), spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		time.Sleep(20 * time.Second)
		failed := ev.of(converge.TargetPassFailed)
		require.GreaterOrEqual(t, len(failed), 4)
		var retries []time.Duration
		for _, f := range failed[:5] {
			assert.True(t, f.Locked)
			require.ErrorIs(t, f.Err, converge.ErrLocked)
			retries = append(retries, f.Retry)
		}
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}, retries,
			"locked passes retry with backoff growing to the cap")
		v, _ := d.app.get()
		assert.Empty(t, v)

		r.TriggerForced() // runs at once, without waiting for the backoff
		synctest.Wait()
		v, _ = d.app.get()
		assert.Equal(t, "v1", v)
		fin := ev.of(converge.TargetPassFinished)
		require.Len(t, fin, 1)
		assert.True(t, fin[0].Forced)
		require.NoError(t, stop())
	})
}

func TestReconcileBackoffResetByNewTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		d := newDevice()
		d.host.FailAt(converge.PhaseApply, -1, nil)
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build,
			Backoff: converge.Backoff{Base: time.Second, Max: time.Minute, Jitter: 0.5}})
		require.NoError(t, r.SetTarget(ctx, spec{Host: "on"}))
		stop := runReconciler(t, r)
		time.Sleep(40 * time.Second)
		failed := ev.of(converge.TargetPassFailed)
		require.GreaterOrEqual(t, len(failed), 5)
		for i, f := range failed {
			full := min(time.Second<<i, time.Minute) // the backoff's Max caps it
			assert.LessOrEqual(t, f.Retry, full, "pass %d", i)
			assert.GreaterOrEqual(t, f.Retry, full/2, "pass %d: jitter takes at most half", i)
		}
		r.Trigger() // a plain trigger does not cut the backoff short
		synctest.Wait()
		assert.Len(t, ev.of(converge.TargetPassFailed), len(failed))

		start := time.Now()
		require.NoError(t, r.SetTarget(ctx, spec{Host: "on2"}))
		synctest.Wait()
		failed2 := ev.of(converge.TargetPassFailed)
		require.Len(t, failed2, len(failed)+1, "a new target runs at once")
		assert.Equal(t, start, time.Now())
		last := failed2[len(failed2)-1]
		assert.LessOrEqual(t, last.Retry, time.Second, "and starts the backoff over")
		require.NoError(t, stop())
	})
}

func TestReconcileIntermediateTargetPreemptsAndHandsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		d := newDevice()
		d.app.latency = 10 * time.Second
		var order []string
		var mu sync.Mutex
		cfg := converge.TargetReconcilerConfig[spec]{Build: func(ctx context.Context, s spec) ([]converge.TargetStage, error) {
			mu.Lock()
			order = append(order, fmt.Sprintf("build %s", s.App))
			mu.Unlock()
			st, err := d.build(ctx, s)
			if s.App == "" {
				st[1].Clean = true // stop the app
			}
			return st, err
		}}
		r, ev := newReconciler(t, cfg)
		require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		time.Sleep(11 * time.Second)
		v, _ := d.app.get()
		require.Equal(t, "v1", v)

		// Restart the app: stop it (intermediate), then the regular target
		// brings it back.
		r.Trigger()
		time.Sleep(time.Second) // the regular pass runs (nothing to change)
		require.NoError(t, r.ApplyIntermediate(ctx, spec{Host: "on"}))
		v, _ = d.app.get()
		assert.Empty(t, v, "the intermediate target ran")
		time.Sleep(11 * time.Second)
		v, _ = d.app.get()
		assert.Equal(t, "v1", v, "the regular loop resumed")
		require.NoError(t, stop())

		mu.Lock()
		assert.Equal(t, []string{"build v1", "build v1", "build ", "build v1"}, order)
		mu.Unlock()
		var inter []bool
		for _, e := range ev.of(converge.TargetPassFinished) {
			inter = append(inter, e.Intermediate)
		}
		assert.Equal(t, []bool{false, false, true, false}, inter)
	})
}

func TestReconcileIntermediatePreemptsRunningPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		d := newDevice()
		d.app.latency = time.Hour
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build})
		var hostAfterIntermediate any
		r.Subscribe(func(e converge.TargetEvent) {
			if e.Intermediate && e.Kind == converge.TargetStateChanged && e.Stage == "host" {
				res, _ := e.Report.Item("host")
				hostAfterIntermediate = res.After
			}
		})
		require.NoError(t, r.SetTarget(ctx, spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		time.Sleep(time.Second)
		start := time.Now()
		err := r.ApplyIntermediate(ctx, spec{Host: "off"})
		require.NoError(t, err)
		assert.Equal(t, start, time.Now(), "the hour-long regular pass was cut short")
		synctest.Wait()
		assert.Equal(t, "off", hostAfterIntermediate)
		synctest.Wait()
		assert.Equal(t, "on", d.host.Current(), "the regular pass runs again after it")
		require.NoError(t, stop())
		assert.Empty(t, ev.of(converge.TargetPassFailed), "a preempted pass is not a failure")
	})
}

func TestReconcileResumesStoredTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := converge.NewMemStore()
		d := newDevice()
		r1, _ := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
		require.NoError(t, r1.SetTarget(ctx, spec{Host: "on", App: "v2"}))

		// The process restarts before running the target.
		r2, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Name: "edge", Build: d.build, Store: store})
		_, ok := r2.Target()
		assert.False(t, ok)
		stop := runReconciler(t, r2)
		synctest.Wait()
		require.NoError(t, stop())
		got, ok := r2.Target()
		require.True(t, ok)
		assert.Equal(t, spec{Host: "on", App: "v2"}, got)
		v, _ := d.app.get()
		assert.Equal(t, "v2", v)
		assert.Len(t, ev.of(converge.TargetPassFinished), 1)
		require.ErrorIs(t, r2.Run(ctx), converge.ErrTargetRunning)
	})
}

func TestReconcileStoreFailures(t *testing.T) {
	ctx := context.Background()
	d := newDevice()
	store := (&convergetest.Store{}).FailNext(convergetest.OpPutTarget, 1, nil).FailNext(convergetest.OpTarget, 1, nil)
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[spec]{Build: d.build, Store: store})
	require.NoError(t, err)
	require.ErrorIs(t, r.SetTarget(ctx, spec{App: "v1"}), convergetest.ErrInjected)
	_, ok := r.Target()
	assert.False(t, ok, "a target the store refused is not set")
	require.ErrorIs(t, r.Run(ctx), convergetest.ErrInjected)
}

func TestReconcilePeriodicPassRepairsDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build, Interval: time.Minute})
		require.NoError(t, r.SetTarget(context.Background(), spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		synctest.Wait()
		d.host.SetCurrent("tampered")
		time.Sleep(59 * time.Second)
		assert.Equal(t, "tampered", d.host.Current())
		time.Sleep(2 * time.Second)
		assert.Equal(t, "on", d.host.Current())
		require.NoError(t, stop())
		assert.Len(t, ev.of(converge.TargetPassFinished), 2)
	})
}

func TestReconcileShutdownStopsRunningPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		d.app.latency = time.Hour
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build})
		require.NoError(t, r.SetTarget(context.Background(), spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		time.Sleep(time.Second)
		start := time.Now()
		require.NoError(t, stop())
		assert.Equal(t, start, time.Now(), "the pass in flight stopped at once")
		assert.Empty(t, ev.of(converge.TargetPassFailed), "stopping is not a failed pass")
		err := r.ApplyIntermediate(context.Background(), spec{})
		require.ErrorIs(t, err, converge.ErrTargetStopped)
	})
}

func TestReconcileUnsubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[spec]{Build: d.build})
		require.NoError(t, err)
		n := 0
		unsub := r.Subscribe(func(converge.TargetEvent) { n++ })
		unsub()
		require.NoError(t, r.SetTarget(context.Background(), spec{Host: "on"}))
		stop := runReconciler(t, r)
		synctest.Wait()
		require.NoError(t, stop())
		assert.Zero(t, n)
		assert.Equal(t, "pass-finished", converge.TargetPassFinished.String())
	})
}
