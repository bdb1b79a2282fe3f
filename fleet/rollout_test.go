package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/fleet"
)

// fakeFleet answers for simulated devices by storing their reports
// straight through the server: each device reports ready (or failed, for
// the devices in fail) for its target a tick after it got it.
type fakeFleet struct {
	srv  *fleet.Server
	ids  []string
	mu   sync.Mutex
	fail map[string]bool
	// applied lists, per device, the revisions it reported, in order.
	applied map[string][]uint64
}

func (f *fakeFleet) tick(t *testing.T) {
	ctx := context.Background()
	for _, id := range f.ids {
		st, err := f.srv.DeviceStatus(ctx, id)
		require.NoError(t, err)
		if st.Target == 0 || st.Reported == st.Target {
			continue
		}
		f.mu.Lock()
		state := `"present"`
		if f.fail[id] {
			state = `"creating-failed","message":"disk full"`
		}
		f.applied[id] = append(f.applied[id], st.Target)
		f.mu.Unlock()
		body := fmt.Sprintf(`{"revision":%d,"items":[{"id":"app","state":%s}]}`, st.Target, state)
		_, err = f.srv.StoreReport(ctx, id, []byte(body))
		require.NoError(t, err)
	}
}

var appItem = []converge.DesiredItem{{ID: "app", Presence: converge.Present}}

// newRolloutFleet enrols n devices labelled role=edge (and two labelled
// role=core, which no rollout here selects), gives each the target v1,
// and reports them ready.
func newRolloutFleet(t *testing.T, n int, fail ...string) (*fleet.Server, *fakeFleet) {
	t.Helper()
	return newRolloutFleetOn(t, converge.NewMemStore(), n, fail...)
}

// newRolloutFleetOn is newRolloutFleet on store.
func newRolloutFleetOn(t *testing.T, store converge.Queue, n int, fail ...string) (*fleet.Server, *fakeFleet) {
	t.Helper()
	ctx := context.Background()
	srv, err := fleet.NewServer(fleet.Config{Store: store, Authorizer: testAuthorizer, Rate: -1,
		Logger: slog.New(slog.DiscardHandler), RolloutPoll: 100 * time.Millisecond, RolloutOwner: "test"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	f := &fakeFleet{srv: srv, fail: map[string]bool{}, applied: map[string][]uint64{}}
	for i := range n {
		id := fmt.Sprintf("edge-%03d", i)
		_, err := srv.Enrol(ctx, id, map[string]string{"role": "edge"})
		require.NoError(t, err)
		f.ids = append(f.ids, id)
	}
	for _, id := range []string{"core-0", "core-1"} {
		_, err := srv.Enrol(ctx, id, map[string]string{"role": "core"})
		require.NoError(t, err)
		f.ids = append(f.ids, id)
	}
	setAllItems(t, srv, f.ids, "v1")
	f.tick(t)
	for _, id := range fail {
		f.fail[id] = true
	}
	return srv, f
}

func setAllItems(t *testing.T, srv *fleet.Server, ids []string, v string) {
	t.Helper()
	for _, id := range ids {
		_, err := srv.SetTarget(context.Background(), id, fleet.Target{Desired: converge.Desired{Items: appItem}, Payload: json.RawMessage(`{"version":"` + v + `"}`)})
		require.NoError(t, err)
	}
}

// runRollouts runs srv's rollouts and the fake devices until the returned
// stop is called; check is called at every tick with the rollout's status.
func runRollouts(t *testing.T, srv *fleet.Server, f *fakeFleet, id string, check func(fleet.RolloutStatus)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.RunRollouts(ctx) })
	wg.Go(func() {
		for ctx.Err() == nil {
			f.tick(t)
			if check != nil {
				st, err := srv.Rollout(context.Background(), id)
				require.NoError(t, err)
				check(st)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop) // also when the test fails first
	return stop
}

// wavesInOrder fails when a wave moved a device before the wave before
// it completed.
func wavesInOrder(t *testing.T) func(fleet.RolloutStatus) {
	return func(st fleet.RolloutStatus) {
		for i := 1; i < len(st.Waves); i++ {
			if st.Waves[i].Devices > st.Waves[i].Pending+st.Waves[i].Aborted {
				prev := st.Waves[i-1]
				assert.Equal(t, fleet.WaveCompleted, prev.State, "%s moved devices before %s completed", st.Waves[i].Name, prev.Name)
				assert.True(t, prev.Ready*100 >= prev.SuccessThreshold*prev.Devices || prev.Pending+prev.Moving == 0,
					"%s moved devices before %s reached its success threshold: %+v", st.Waves[i].Name, prev.Name, prev)
			}
		}
	}
}

func waitRollout(t *testing.T, srv *fleet.Server, id string, want fleet.RolloutState) fleet.RolloutStatus {
	t.Helper()
	for range 600 {
		st, err := srv.Rollout(context.Background(), id)
		require.NoError(t, err)
		if st.State == want {
			return st
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, _ := srv.Rollout(context.Background(), id)
	require.Failf(t, "rollout did not reach its state", "want %s, have %+v", want, st)
	return st
}

var threeWaves = []fleet.Wave{
	{Name: "canary", Count: 1},
	{Name: "ten", Percent: 10, SuccessThreshold: 50},
	{Name: "rest", ErrorThreshold: 10},
}

func rolloutSpec(id string, waves []fleet.Wave) fleet.RolloutSpec {
	return fleet.RolloutSpec{ID: id, Selector: "role=edge", Items: appItem, Payload: json.RawMessage(`{"version":"v2"}`), Waves: waves}
}

// TestRolloutWavesInOrder moves a small fleet (whose waves read their
// devices one by one) and a larger one (whose last wave reads them with
// lists of the store).
func TestRolloutWavesInOrder(t *testing.T) {
	for _, tc := range []struct {
		devices int
		sizes   []int
	}{
		{20, []int{1, 2, 17}},
		{80, []int{1, 8, 71}},
	} {
		t.Run(fmt.Sprint(tc.devices), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, f := newRolloutFleet(t, tc.devices)
				ctx := context.Background()
				st, err := srv.CreateRollout(ctx, rolloutSpec("r1", threeWaves))
				require.NoError(t, err)
				assert.Equal(t, tc.devices, st.Devices, "the core devices are not selected")
				var sizes []int
				for _, w := range st.Waves {
					sizes = append(sizes, w.Devices)
				}
				assert.Equal(t, tc.sizes, sizes)
				stop := runRollouts(t, srv, f, "r1", wavesInOrder(t))
				st = waitRollout(t, srv, "r1", fleet.RolloutCompleted)
				// The runner marks the rollout finished after its plan
				// completed: stopped in between, it would not have.
				for !st.Finished {
					time.Sleep(100 * time.Millisecond)
					st, err = srv.Rollout(ctx, "r1")
					require.NoError(t, err)
				}
				stop()
				for _, w := range st.Waves {
					assert.Equal(t, fleet.WaveCompleted, w.State, w.Name)
					// A wave completes at its success threshold; its other
					// devices go on converging on their own.
					assert.GreaterOrEqual(t, w.Ready*100, w.SuccessThreshold*w.Devices, w.Name)
				}
				for _, id := range f.ids {
					ds, err := srv.DeviceStatus(ctx, id)
					require.NoError(t, err)
					want := uint64(2)
					if ds.Labels["role"] == "core" {
						want = 1
					}
					assert.Equal(t, want, ds.Target, id)
				}
				// The rollout is done on any replica: its record says finished.
				st, err = srv.Rollout(ctx, "r1")
				require.NoError(t, err)
				assert.True(t, st.Finished)
			})
		})
	}
}

func TestRolloutErrorThresholdPausesThenResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, f := newRolloutFleet(t, 20, "edge-001")
		ctx := context.Background()
		// Wave "ten" (edge-001, edge-002) tolerates no failure, and waits
		// for both its devices (with a success threshold of 50%, it could
		// complete on edge-002 before edge-001 reports its failure).
		waves := slices.Clone(threeWaves)
		waves[1].SuccessThreshold = 100
		_, err := srv.CreateRollout(ctx, rolloutSpec("r1", waves))
		require.NoError(t, err)
		stop := runRollouts(t, srv, f, "r1", wavesInOrder(t))
		defer stop()
		st := waitRollout(t, srv, "r1", fleet.RolloutPaused)
		assert.Contains(t, st.Reason, "ten reached its error threshold: 1 of 2 devices failed (threshold 0%)")
		assert.Equal(t, 17, st.Waves[2].Pending, "no device of the next wave moved")
		time.Sleep(2 * time.Second)
		st, err = srv.Rollout(ctx, "r1")
		require.NoError(t, err)
		assert.Equal(t, fleet.RolloutPaused, st.State, "it stays paused")
		require.ErrorIs(t, srv.PauseRollout(ctx, "r1", ""), fleet.ErrRolloutState)

		require.NoError(t, srv.ResumeRollout(ctx, "r1"))
		st = waitRollout(t, srv, "r1", fleet.RolloutCompleted)
		assert.Equal(t, 1, st.Waves[1].Failed, "the failed device stays failed")
		assert.Equal(t, 17, st.Waves[2].Ready)
	})
}

func TestRolloutErrorThresholdAbortsAndRestores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Two of the 17 devices of the last wave fail: more than its 10%.
		srv, f := newRolloutFleet(t, 20, "edge-010", "edge-011")
		ctx := context.Background()
		sp := rolloutSpec("r1", threeWaves)
		sp.OnError, sp.Restore = fleet.OnErrorAbort, true
		_, err := srv.CreateRollout(ctx, sp)
		require.NoError(t, err)
		stop := runRollouts(t, srv, f, "r1", wavesInOrder(t))
		defer stop()
		st := waitRollout(t, srv, "r1", fleet.RolloutAborted)
		assert.Contains(t, st.Reason, "rest reached its error threshold: 2 of 17 devices failed (threshold 10%)")
		for range 100 {
			if st.Finished {
				break
			}
			time.Sleep(100 * time.Millisecond)
			st, err = srv.Rollout(ctx, "r1")
			require.NoError(t, err)
		}
		require.True(t, st.Finished)
		assert.Equal(t, 20, st.Restored, "every device moved got v1 back")
		for _, id := range f.ids[:20] {
			ds, err := srv.DeviceStatus(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, uint64(3), ds.Target, "%s: v1 at its next revision", id)
		}
	})
}

func TestRolloutOperatorPauseAndAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, f := newRolloutFleet(t, 10)
		ctx := context.Background()
		// A canary no device of which gets ready: its devices are stuck.
		f.mu.Lock()
		f.fail["edge-000"] = true
		f.mu.Unlock()
		sp := rolloutSpec("r1", []fleet.Wave{{Name: "canary", Count: 2, ErrorThreshold: 50}, {Name: "rest"}})
		_, err := srv.CreateRollout(ctx, sp)
		require.NoError(t, err)
		stop := runRollouts(t, srv, f, "r1", wavesInOrder(t))
		defer stop()
		// The canary completes at its success threshold? No: one of two failed
		// (50% is within its threshold) and the other is ready, so it ends.
		waitRollout(t, srv, "r1", fleet.RolloutRunning)
		require.NoError(t, srv.PauseRollout(ctx, "r1", "lunch"))
		st, err := srv.Rollout(ctx, "r1")
		require.NoError(t, err)
		assert.Equal(t, fleet.RolloutPaused, st.State)
		assert.Equal(t, "lunch", st.Reason)
		require.NoError(t, srv.AbortRollout(ctx, "r1", "changed my mind", true))
		require.ErrorIs(t, srv.ResumeRollout(ctx, "r1"), fleet.ErrRolloutState)
		st = waitRollout(t, srv, "r1", fleet.RolloutAborted)
		assert.Equal(t, "changed my mind", st.Reason)
		require.ErrorIs(t, srv.AbortRollout(ctx, "r1", "", false), fleet.ErrRolloutState)
		_, err = srv.CreateRollout(ctx, sp)
		require.ErrorIs(t, err, fleet.ErrRolloutExists)
	})
}

func TestRolloutSpecRefused(t *testing.T) {
	srv, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer srv.Close()
	ok := rolloutSpec("r", []fleet.Wave{{Count: 1}})
	for _, tc := range []struct {
		name  string
		mod   func(*fleet.RolloutSpec)
		field string
	}{
		{"bad ID", func(s *fleet.RolloutSpec) { s.ID = "a/b" }, "rollout.id"},
		{"bad selector", func(s *fleet.RolloutSpec) { s.Selector = "role=a b" }, "selector"},
		{"no waves", func(s *fleet.RolloutSpec) { s.Waves = nil }, "rollout.waves"},
		{"count and percent", func(s *fleet.RolloutSpec) { s.Waves = []fleet.Wave{{Count: 1, Percent: 5}} }, "rollout.waves[0].count"},
		{"percent over 100", func(s *fleet.RolloutSpec) { s.Waves = []fleet.Wave{{Percent: 101}} }, "rollout.waves[0].percent"},
		{"error threshold", func(s *fleet.RolloutSpec) { s.Waves = []fleet.Wave{{ErrorThreshold: -1}} }, "rollout.waves[0].error_threshold"},
		{"success threshold", func(s *fleet.RolloutSpec) { s.Waves = []fleet.Wave{{SuccessThreshold: 200}} }, "rollout.waves[0].success_threshold"},
		{"on error", func(s *fleet.RolloutSpec) { s.OnError = "panic" }, "rollout.on_error"},
		{"payload", func(s *fleet.RolloutSpec) { s.Payload = json.RawMessage(`{`) }, "rollout.payload"},
		{"items", func(s *fleet.RolloutSpec) {
			s.Items = []converge.DesiredItem{{ID: "a", Presence: converge.Present}, {ID: "a", Presence: converge.Present}}
		}, "rollout.items"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := ok
			tc.mod(&sp)
			_, err := srv.CreateRollout(context.Background(), sp)
			var re *fleet.RequestError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.field, re.Field)
			rs, err := srv.Rollouts(context.Background())
			require.NoError(t, err)
			assert.Empty(t, rs, "nothing stored")
		})
	}
}

func TestSelector(t *testing.T) {
	labels := map[string]string{"role": "edge", "site": "lyon"}
	for _, tc := range []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"role=edge", true},
		{"role==edge", true},
		{"role=core", false},
		{"role!=core", true},
		{"role=edge, site=lyon", true},
		{"role=edge,site=paris", false},
		{"site", true},
		{"rack", false},
		{"!rack", true},
		{"!site", false},
	} {
		s, err := fleet.ParseSelector(tc.sel)
		require.NoError(t, err, tc.sel)
		assert.Equal(t, tc.want, s.Matches(labels), tc.sel)
	}
	for _, bad := range []string{"=edge", "role=a b", "a,,b", "role=é"} {
		_, err := fleet.ParseSelector(bad)
		require.ErrorIs(t, err, fleet.ErrInvalid, bad)
	}
}

func TestRolloutAPI(t *testing.T) {
	h := newHarness(t, converge.NewMemStore(), func(c *fleet.Config) { c.RolloutOwner = "api" })
	ctx := context.Background()
	admin := map[string]string{adminHeader: "yes"}
	for _, id := range []string{"a", "b"} {
		code, _, _ := h.do("POST", "/v1/admin/devices/"+id+"/enrol", "", []byte(`{"labels":{"role":"edge"}}`), admin)
		require.Equal(t, http.StatusCreated, code)
	}
	ds, err := h.srv.DeviceStatus(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"role": "edge"}, ds.Labels)
	code, body, _ := h.do("POST", "/v1/admin/devices/c/enrol", "", []byte(`{"labels":{"ro le":"x"}}`), admin)
	assert.Equal(t, http.StatusBadRequest, code, string(body))

	spec := `{"id":"r1","selector":"role=edge","items":[{"id":"app","presence":"present"}],"waves":[{"name":"canary","count":1},{}]}`
	code, body, _ = h.do("POST", "/v1/admin/rollouts", "", []byte(spec), admin)
	require.Equal(t, http.StatusCreated, code, string(body))
	var st fleet.RolloutStatus
	require.NoError(t, json.Unmarshal(body, &st))
	assert.Equal(t, 2, st.Devices)
	assert.Equal(t, fleet.RolloutRunning, st.State)
	code, _, _ = h.do("POST", "/v1/admin/rollouts", "", []byte(spec), admin)
	assert.Equal(t, http.StatusConflict, code)
	code, body, _ = h.do("POST", "/v1/admin/rollouts", "", []byte(`{"id":"r2","items":[],"waves":[],"extra":1}`), admin)
	assert.Equal(t, http.StatusBadRequest, code, string(body))

	for _, tc := range []struct {
		op, body string
		code     int
		state    fleet.RolloutState
	}{
		{"resume", "", http.StatusConflict, ""},
		{"pause", `{"reason":"lunch"}`, http.StatusOK, fleet.RolloutPaused},
		{"pause", "", http.StatusConflict, ""},
		{"resume", "", http.StatusOK, fleet.RolloutRunning},
		{"abort", `{"restore":true}`, http.StatusOK, fleet.RolloutAborting},
		{"abort", "", http.StatusConflict, ""},
		{"launch", "", http.StatusNotFound, ""},
	} {
		code, body, _ := h.do("POST", "/v1/admin/rollouts/r1/"+tc.op, "", []byte(tc.body), admin)
		require.Equal(t, tc.code, code, "%s: %s", tc.op, body)
		if tc.state != "" {
			require.NoError(t, json.Unmarshal(body, &st))
			assert.Equal(t, tc.state, st.State, tc.op)
		}
	}
	code, body, _ = h.do("GET", "/v1/admin/rollouts", "", nil, admin)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), `"id":"r1"`)
	code, _, _ = h.do("GET", "/v1/admin/rollouts/nope", "", nil, admin)
	assert.Equal(t, http.StatusNotFound, code)
	code, _, _ = h.do("GET", "/v1/admin/rollouts/r1", "", nil, admin)
	assert.Equal(t, http.StatusOK, code)

	// Without the Authorizer's consent, nothing.
	for _, r := range [][2]string{{"GET", "/v1/admin/rollouts"}, {"GET", "/v1/admin/rollouts/r1"}, {"POST", "/v1/admin/rollouts"},
		{"POST", "/v1/admin/rollouts/r1/pause"}, {"POST", "/v1/admin/rollouts/r1/resume"}, {"POST", "/v1/admin/rollouts/r1/abort"}} {
		code, _, _ := h.do(r[0], r[1], "", []byte(spec), nil)
		assert.Equal(t, http.StatusForbidden, code, "%s %s", r[0], r[1])
	}
}

// crashAfter is a store whose writes stop, once armed, after the given
// number: the process writing through it died there.
type crashAfter struct {
	converge.Queue
	mu   sync.Mutex
	left int // writes still allowed; -1 while not armed
}

var errCrashed = errors.New("the process died here")

func (c *crashAfter) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	c.mu.Lock()
	if c.left == 0 {
		c.mu.Unlock()
		return 0, errCrashed
	}
	if c.left > 0 {
		c.left--
	}
	c.mu.Unlock()
	return c.Queue.Put(ctx, rec, h...)
}

// TestRolloutCreationIsWhole stops a replica creating a rollout after
// each of its writes in turn: the rollout is then either not created
// (and can be created again) or created whole, and another replica runs
// it to its end; never half of it, refused as existing and shown nowhere.
func TestRolloutCreationIsWhole(t *testing.T) {
	for writes := range 4 {
		t.Run(fmt.Sprintf("died after %d writes", writes), func(t *testing.T) {
			ctx := context.Background()
			store := converge.NewMemStore()
			srv, f := newRolloutFleetOn(t, store, 4)
			crash := &crashAfter{Queue: store, left: -1}
			dying, err := fleet.NewServer(fleet.Config{Store: crash, Logger: slog.New(slog.DiscardHandler), RolloutOwner: "dying"})
			require.NoError(t, err)
			t.Cleanup(func() { _ = dying.Close() })
			crash.left = writes
			sp := rolloutSpec("r", threeWaves)
			_, err = dying.CreateRollout(ctx, sp)
			if err == nil {
				t.Logf("created in %d writes", writes)
			}
			_, err = srv.Rollout(ctx, "r")
			if errors.Is(err, fleet.ErrRolloutNotFound) {
				_, err = srv.CreateRollout(ctx, sp)
				require.NoError(t, err, "a rollout not created can be created")
			}
			require.NoError(t, err)
			stop := runRollouts(t, srv, f, "r", nil)
			st := waitRollout(t, srv, "r", fleet.RolloutCompleted)
			stop()
			assert.Equal(t, 4, st.Devices)
			for _, w := range st.Waves {
				assert.Equal(t, w.Devices, w.Ready, w.Name)
			}
		})
	}
}
