package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/pgstore/pgtest"
	"github.com/convergekit/converge/plan"
)

// binary is the convergectl built once for the tests, which run it as a
// process, as an operator does.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "convergectl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "convergectl")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building convergectl:", err)
		os.Exit(1)
	}
	code := pgtest.Wrap(m).Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// result is what a run of the command left.
type result struct {
	out, err string
	code     int
}

// ctl runs convergectl with args and returns its output and exit code.
func ctl(t *testing.T, args ...string) result {
	t.Helper()
	return ctlEnv(t, nil, args...)
}

// outputFormats are the formats of -o.
var outputFormats = []string{"table", "json", "yaml"}

// ctlEnv runs convergectl with args and the environment variables env
// added to the test's, and returns its output and exit code.
func ctlEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{out: out.String(), err: errOut.String(), code: code}
}

// ctlJSON runs convergectl with args and -o json, requires it to succeed
// and decodes its output into v.
func ctlJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	r := ctl(t, append(args, "-o", "json")...)
	require.Equal(t, 0, r.code, "stderr: %s", r.err)
	require.NoError(t, json.Unmarshal([]byte(r.out), v), r.out)
}

// notifyStore calls onPut with every record it stored.
type notifyStore struct {
	converge.Store
	onPut func(converge.StoreRecord)
}

func (s *notifyStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	v, err := s.Store.Put(ctx, rec, h...)
	if err == nil {
		s.onPut(rec)
	}
	return v, err
}

// fill writes what a running program leaves in st, through the controller
// and plan APIs: objects of kind "host" (good: ready; bad: quarantined;
// term: halted by a terminal error; slow: above its state's SLA), plans
// (rollout: failed on host w2; next: not started; done: completed) and
// the target "agent" at revision 2; good has priority 9.
func fill(t *testing.T, st converge.Store) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []struct {
		key   string
		state controller.State
		data  string
	}{{"good", "provisioning", `{"ip":"10.0.0.1"}`}, {"bad", "provisioning", `{"ip":"10.0.0.2"}`}, {"term", "provisioning", ""}, {"slow", "waiting", ""}} {
		var data json.RawMessage
		if o.data != "" {
			data = json.RawMessage(o.data)
		}
		require.NoError(t, controller.AddObject(ctx, st, "host", o.key, o.state, data))
	}

	// Run a controller until every object is where the tests want it.
	var mu sync.Mutex
	seen := map[string]controller.Object{}
	done := make(chan struct{})
	ns := &notifyStore{Store: st, onPut: func(rec converge.StoreRecord) {
		var o controller.Object
		if json.Unmarshal(rec.Value, &o) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		seen[rec.Key] = o
		if seen["host/good"].State == "ready" && seen["host/bad"].Halted == controller.HaltQuarantined &&
			seen["host/term"].Halted == controller.HaltTerminal && seen["host/slow"].SLABreached {
			select {
			case <-done:
			default:
				close(done)
			}
		}
	}}
	c, err := controller.New(controller.Config{
		Kind:  "host",
		Store: ns,
		Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
			switch o.Key {
			case "good":
				if o.State == "provisioning" {
					return controller.Transition("ready").Because("booted"), nil
				}
				return controller.NoChange(), nil
			case "bad":
				return controller.Result{}, errors.New("connection refused")
			case "term":
				return controller.Result{}, controller.Terminal(errors.New("image not found"))
			}
			return controller.Wait("waiting for a disk"), nil
		}),
		QuarantineAfter: 1,
		SLA:             map[controller.State]time.Duration{"waiting": time.Nanosecond},
	})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(rctx) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the controller did not bring the objects to their states")
	}
	cancel()
	require.NoError(t, <-ran)

	// Plans, run by a runner over an in-process bus.
	bus := autopilot.NewBus(autopilot.Host{Name: "w1", Kind: "worker"}, autopilot.Host{Name: "w2", Kind: "worker"}, autopilot.Host{Name: "w3", Kind: "worker"})
	bus.OnSignal = func(node string, _ autopilot.Signal) {
		if node == "w2" {
			_ = bus.Respond(node, plan.TargetApplyFailed, "disk full")
			return
		}
		_ = bus.Respond(node, plan.TargetCompleted, "")
	}
	runner, err := plan.NewRunner(st, plan.RunnerConfig{
		Handlers:     map[string]plan.CommandHandler{"update": &autopilot.CommandHandler{Sender: bus}},
		PollInterval: time.Millisecond,
	})
	require.NoError(t, err)
	newPlan := func(id string, workers ...string) *plan.Document {
		return &plan.Document{Spec: plan.Plan{ID: id, Commands: []plan.Command{{
			Kind:    "update",
			Targets: []plan.CommandTargets{{Group: "workers", Discovery: plan.CommandDiscovery{Static: workers}}},
		}}}}
	}
	require.NoError(t, runner.Create(ctx, newPlan("rollout", "w1", "w2", "w3")))
	_, err = runner.Run(ctx, "rollout")
	require.ErrorIs(t, err, plan.ErrFailed)
	require.NoError(t, runner.Create(ctx, newPlan("done", "w1")))
	_, err = runner.Run(ctx, "done")
	require.NoError(t, err)
	require.NoError(t, runner.Create(ctx, newPlan("next", "w3")))

	for _, target := range []string{`{"image":"app:1"}`, `{"image":"app:2"}`} {
		_, err := st.PutTarget(ctx, "agent", json.RawMessage(target))
		require.NoError(t, err)
	}
	// An operator raised the priority of good.
	require.NoError(t, controller.SetPriority(ctx, st, "host", "good", 9))
}
