package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// failureRun is what a handler saw in one run and what it did.
type failureRun struct {
	at     time.Time
	state  controller.State
	seen   []controller.Failure
	since  time.Time
	failed error
}

// TestRecentFailuresAndFailingSince drives an object through a script of
// runs (three failures in provisioning, a transition, two failures in
// ready, successes) and checks what each run saw of the runs before:
// the newest FailureHistory failures, kept across the transition, and the
// time the current run of failures began, cleared by a success.
func TestRecentFailuresAndFailingSince(t *testing.T) {
	type step struct {
		fail bool
		next controller.State // a transition when not empty
	}
	script := []step{{fail: true}, {fail: true}, {fail: true}, {next: "ready"}, {fail: true}, {fail: true}, {}, {}}
	tests := []struct {
		name    string
		history int
		keep    int
	}{
		{"default", 0, controller.DefaultFailureHistory},
		{"four", 4, 4},
		{"one", 1, 1},
		{"none", -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inEachMode(t, func(t *testing.T, owner string) {
				ctx := context.Background()
				store := converge.NewMemStore()
				var mu sync.Mutex
				var runs []failureRun
				c, err := controller.New(controller.Config{
					Kind: "vm", Store: store, Owner: owner, FailureHistory: tt.history,
					Resync: time.Minute,
					Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
						mu.Lock()
						defer mu.Unlock()
						r := failureRun{at: time.Now(), state: o.State, seen: o.RecentFailures, since: o.FailingSince}
						var s step
						if len(runs) < len(script) {
							s = script[len(runs)]
						}
						if s.fail {
							r.failed = fmt.Errorf("run %d: disk not found", len(runs)+1)
						}
						runs = append(runs, r)
						switch {
						case r.failed != nil:
							return controller.Result{}, r.failed
						case s.next != "":
							return controller.Transition(s.next), nil
						}
						return controller.NoChange(), nil
					})})
				require.NoError(t, err)
				require.NoError(t, c.Add(ctx, "a", "provisioning", nil))
				stop := startController(t, c)
				time.Sleep(time.Hour)
				synctest.Wait()
				require.NoError(t, stop())

				mu.Lock()
				defer mu.Unlock()
				require.Greater(t, len(runs), len(script), "the script ran to its end")
				// What each run should have seen, from the runs before it.
				var want []controller.Failure
				var since time.Time
				for i, r := range runs {
					assert.Equal(t, want, nilIfEmpty(r.seen), "run %d sees the newest failures before it", i+1)
					assert.True(t, since.Equal(r.since), "run %d: failing since %s, want %s", i+1, r.since, since)
					if r.failed == nil {
						since = time.Time{}
						continue
					}
					if since.IsZero() {
						since = r.at
					}
					want = append(want, controller.Failure{At: r.at, State: r.state, Error: r.failed.Error()})
					want = nilIfEmpty(want[max(len(want)-tt.keep, 0):])
				}
				stored := storedObject(t, store, "vm/a")
				assert.Equal(t, want, nilIfEmpty(stored.RecentFailures), "stored")
				assert.True(t, stored.FailingSince.IsZero(), "the last run succeeded")
				view, ok := c.Get("a")
				require.True(t, ok)
				assert.Equal(t, want, nilIfEmpty(view.RecentFailures), "returned by Get")
			})
		})
	}
}

// nilIfEmpty returns a copy of f with its times in UTC and without
// monotonic readings, as a stored copy has them, and nil for an empty
// slice, so that a slice with nothing kept compares equal to none.
func nilIfEmpty(f []controller.Failure) []controller.Failure {
	if len(f) == 0 {
		return nil
	}
	out := make([]controller.Failure, len(f))
	for i, x := range f {
		x.At = x.At.Round(0).UTC()
		out[i] = x
	}
	return out
}

// TestFailingSinceSurvivesRelease checks that releasing a quarantined
// object starts its count of failures in a row again but not the time
// its failures began, which only a run that succeeds clears.
func TestFailingSinceSurvivesRelease(t *testing.T) {
	errDown := errors.New("bmc unreachable")
	inEachMode(t, func(t *testing.T, owner string) {
		ctx := context.Background()
		store := converge.NewMemStore()
		var mu sync.Mutex
		healthy := false
		c, err := controller.New(controller.Config{
			Kind: "vm", Store: store, Owner: owner, QuarantineAfter: 2, FailureHistory: 3,
			Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				if !healthy {
					return controller.Result{}, errDown
				}
				return controller.NoChange(), nil
			})})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, "a", "provisioning", nil))
		began := time.Now()
		stop := startController(t, c)
		time.Sleep(time.Hour)
		synctest.Wait()

		o := storedObject(t, store, "vm/a")
		require.Equal(t, controller.HaltQuarantined, o.Halted)
		assert.True(t, began.Equal(o.FailingSince), "failing since the first run, %s", o.FailingSince)
		require.Len(t, o.RecentFailures, 2)

		time.Sleep(time.Hour)
		require.NoError(t, c.Release(ctx, "a"))
		time.Sleep(time.Hour)
		synctest.Wait()
		o = storedObject(t, store, "vm/a")
		require.Equal(t, controller.HaltQuarantined, o.Halted, "failed twice more")
		assert.True(t, began.Equal(o.FailingSince), "a release does not end the run of failures")
		require.Len(t, o.RecentFailures, 3, "bounded by FailureHistory")
		assert.True(t, o.RecentFailures[2].At.After(began), "the newest failure is the latest")

		mu.Lock()
		healthy = true
		mu.Unlock()
		require.NoError(t, c.Release(ctx, "a"))
		time.Sleep(time.Hour)
		synctest.Wait()
		o = storedObject(t, store, "vm/a")
		assert.Empty(t, o.Halted)
		assert.True(t, o.FailingSince.IsZero(), "a run that succeeds ends it")
		assert.Len(t, o.RecentFailures, 3, "what went wrong stays readable")
		require.NoError(t, stop())
	})
}
