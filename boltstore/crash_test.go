package boltstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/plan"
)

// The crash tests run this test binary again as a child process that
// writes to a store and prints a line after every acknowledged call; the
// parent kills it with SIGKILL at a random moment, then checks the file.
const (
	envChild = "BOLTSTORE_CRASH_CHILD" // "writes", "plan" or "corrupt"
	envFile  = "BOLTSTORE_CRASH_FILE"  // the store file
	envLog   = "BOLTSTORE_CRASH_LOG"   // the plan child's signal log
	envPlans = "BOLTSTORE_CRASH_PLANS" // how many plans the plan child runs
)

const (
	crashKills   = 50
	crashWriters = 4
	planWorkers  = 8
)

// childMain runs the child side of a crash test when the environment asks
// for it, and reports whether it did.
func childMain() bool {
	mode := os.Getenv(envChild)
	if mode == "" {
		return false
	}
	var err error
	switch mode {
	case "writes":
		err = childWrites(os.Getenv(envFile))
	case "corrupt":
		err = childCorrupt()
	case "plan":
		var plans int
		if plans, err = strconv.Atoi(os.Getenv(envPlans)); err == nil {
			err = childPlan(os.Getenv(envFile), os.Getenv(envLog), plans)
		}
	default:
		err = fmt.Errorf("unknown child mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	os.Exit(0)
	return true
}

// acker prints one acknowledgment line per call, whole.
type acker struct{ mu sync.Mutex }

func (a *acker) ack(format string, args ...any) {
	line := fmt.Sprintf(format+"\n", args...)
	a.mu.Lock()
	_, _ = os.Stdout.WriteString(line)
	a.mu.Unlock()
}

// childWrites writes forever: crashWriters goroutines each doing versioned
// Puts with one history entry on their own key (the value holds the
// version it is written as), one also storing a target with a counter, one
// also claiming and finishing a lease on its key.
func childWrites(path string) error {
	st, err := boltstore.Open(path, boltstore.Options{Retention: converge.Retention{Entries: -1}})
	if err != nil {
		return err
	}
	ctx := context.Background()
	var a acker
	a.ack("ready")
	errc := make(chan error, crashWriters)
	for g := range crashWriters {
		go func() {
			key := fmt.Sprintf("rec/%d", g)
			n := 0
			if g == 0 {
				if t, _, err := st.Target(ctx, "agent"); err == nil {
					var v struct{ N int }
					if err := json.Unmarshal(t, &v); err != nil {
						errc <- err
						return
					}
					n = v.N
				}
			}
			for {
				var version uint64
				rec, err := st.Get(ctx, key)
				switch {
				case err == nil:
					version = rec.Version
				case !errors.Is(err, converge.ErrStoreNotFound):
					errc <- err
					return
				}
				next := version + 1
				v, err := st.Put(ctx, converge.StoreRecord{Key: key, Version: version, Value: fmt.Appendf(nil, `{"v":%d}`, next)},
					converge.HistoryEntry{At: time.Now(), From: strconv.FormatUint(version, 10), To: strconv.FormatUint(next, 10)})
				if err != nil {
					errc <- err
					return
				}
				a.ack("put %s %d", key, v)
				switch g {
				case 0:
					n++
					if _, err := st.PutTarget(ctx, "agent", fmt.Appendf(nil, `{"n":%d}`, n)); err != nil {
						errc <- err
						return
					}
					a.ack("target %d", n)
				case 1:
					l, err := st.Claim(ctx, key, "child", time.Hour)
					if err != nil {
						errc <- err
						return
					}
					a.ack("claim %d", l.Token)
					if err := st.Finish(ctx, l, time.Now().Add(time.Hour)); err != nil {
						errc <- err
						return
					}
					a.ack("finish %d", l.Token)
				}
			}
		}()
	}
	return <-errc
}

// crashChild runs one child process and kills it once it has printed
// killAfter lines (at once when 0; never when negative). It returns every
// line the child printed, killed or not.
func crashChild(t *testing.T, env []string, killAfter int) (lines []string, killed bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	kill := func() {
		if !killed {
			killed = true
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	if killAfter == 0 {
		kill()
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		// Lines the child wrote before it died are acknowledged calls.
		lines = append(lines, sc.Text())
		if killAfter > 0 && len(lines) >= killAfter {
			kill()
		}
	}
	_, _ = io.Copy(io.Discard, out)
	err = cmd.Wait()
	if !killed {
		require.NoError(t, err, "child failed: %s", stderr.String())
	} else if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.Exited() {
		// The child exited on its own before the kill: it failed.
		require.Failf(t, "child exited", "status %d: %s", ee.ExitCode(), stderr.String())
	}
	return lines, killed
}

// checkBolt runs bbolt's own consistency check on the closed file.
func checkBolt(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return // killed before it made the file
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}))
}

func TestCrashWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: -short")
	}
	ctx := context.Background()
	path := tempPath(t)
	env := []string{envChild + "=writes", envFile + "=" + path}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))
	acked := map[string]uint64{}
	ackedTarget := 0
	var lastToken, finished uint64
	for round := range crashKills {
		lines, killed := crashChild(t, env, rng.IntN(60))
		require.True(t, killed)
		for _, line := range lines {
			f := strings.Fields(line)
			switch f[0] {
			case "put":
				v, _ := strconv.ParseUint(f[2], 10, 64)
				require.Greater(t, v, acked[f[1]], "round %d: versions only grow", round)
				acked[f[1]] = v
			case "target":
				ackedTarget, _ = strconv.Atoi(f[1])
			case "claim":
				tok, _ := strconv.ParseUint(f[1], 10, 64)
				require.GreaterOrEqual(t, tok, lastToken, "round %d: tokens never go back", round)
				require.Greater(t, tok, finished, "round %d: a finished lease's token is never handed out again", round)
				lastToken = tok
			case "finish":
				finished, _ = strconv.ParseUint(f[1], 10, 64)
			}
		}

		checkBolt(t, path)
		st, err := boltstore.Open(path, boltstore.Options{Retention: converge.Retention{Entries: -1}})
		require.NoError(t, err, "round %d", round)
		for g := range crashWriters {
			key := fmt.Sprintf("rec/%d", g)
			rec, err := st.Get(ctx, key)
			if acked[key] == 0 && errors.Is(err, converge.ErrStoreNotFound) {
				continue
			}
			require.NoError(t, err, "round %d: %s", round, key)
			require.GreaterOrEqual(t, rec.Version, acked[key], "round %d: %s lost an acknowledged write", round, key)
			var v struct{ V uint64 }
			require.NoError(t, json.Unmarshal(rec.Value, &v), "round %d: %s", round, key)
			assert.Equal(t, rec.Version, v.V, "round %d: %s: the value is the one written as this version", round, key)
			hist, err := st.History(ctx, key)
			require.NoError(t, err)
			require.Len(t, hist, int(rec.Version), "round %d: %s: one history entry per version", round, key)
			for i, h := range hist {
				assert.Equal(t, strconv.Itoa(i), h.From, "round %d: %s", round, key)
				assert.Equal(t, strconv.Itoa(i+1), h.To, "round %d: %s", round, key)
			}
		}
		if ackedTarget > 0 {
			tg, rev, err := st.Target(ctx, "agent")
			require.NoError(t, err)
			var v struct{ N int }
			require.NoError(t, json.Unmarshal(tg, &v))
			require.Equal(t, uint64(v.N), rev, "round %d: the target's revision went with it", round)
			require.GreaterOrEqual(t, v.N, ackedTarget, "round %d: the target lost an acknowledged write", round)
		}
		require.NoError(t, st.Close())
	}
	t.Logf("after %d kills: versions %v, target %d, last token %d", crashKills, acked, ackedTarget, lastToken)
	require.NotZero(t, acked["rec/0"], "the children wrote something")
}

// fileSender is an autopilot.Sender whose nodes complete every signal at
// once, and which records every signal in a log file, fsynced before Send
// returns: the log is what the nodes received, across processes.
type fileSender struct {
	path string
	mu   sync.Mutex
}

func (f *fileSender) Probe(_ context.Context, node string) (autopilot.Host, error) {
	kind := "worker"
	if strings.HasPrefix(node, "controller") {
		kind = "controller"
	}
	return autopilot.Host{Name: node, Kind: kind, Platform: "linux-amd64"}, nil
}

func (f *fileSender) Send(_ context.Context, node string, s autopilot.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	file, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(file, "%s %s\n", node, s.ID); err != nil {
		_ = file.Close()
		return err
	}
	if err := file.Sync(); err != nil {
		_ = file.Close()
		return err
	}
	return file.Close()
}

func (f *fileSender) Read(_ context.Context, node string) (autopilot.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return autopilot.Report{}, err
	}
	var rep autopilot.Report
	for _, line := range strings.Split(string(b), "\n") {
		if n, id, ok := strings.Cut(line, " "); ok && n == node {
			rep = autopilot.Report{SignalID: id, State: plan.TargetCompleted}
		}
	}
	return rep, nil
}

// crashPlanDoc is a plan updating two controllers, then planWorkers
// workers, one at a time.
func crashPlanDoc(id string) (*plan.Document, error) {
	var workers strings.Builder
	for i := range planWorkers {
		fmt.Fprintf(&workers, "              - worker%d\n", i)
	}
	doc := `apiVersion: autopilot.k0sproject.io/v1beta2
kind: Plan
metadata:
  name: autopilot
spec:
  id: ` + id + `
  timestamp: now
  commands:
  - k0supdate:
      version: v1.30.4+k0s.0
      platforms:
        linux-amd64:
          url: https://example.invalid/k0s
      targets:
        controllers:
          discovery:
            static:
              nodes:
              - controller0
              - controller1
        workers:
          discovery:
            static:
              nodes:
` + workers.String()
	return autopilot.Decode([]byte(doc))
}

// dash prints an empty state as "-", so that lines split into fields.
func dash(s plan.State) string {
	if s == "" {
		return "-"
	}
	return string(s)
}

// childPlan runs the plans p0 to p<plans-1> in order on the store,
// creating those that do not exist yet, and prints every stored step.
func childPlan(path, logPath string, plans int) error {
	st, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	ctx := context.Background()
	var a acker
	h := &autopilot.CommandHandler{Sender: &fileSender{path: logPath}}
	r, err := plan.NewRunner(st, plan.RunnerConfig{
		Handlers:     map[string]plan.CommandHandler{"k0supdate": h},
		Owner:        "runner", // the same owner in every child: it resumes at once
		LeaseTTL:     time.Hour,
		PollInterval: time.Millisecond,
		OnStep: func(id string, s plan.Step, _ *plan.Status) {
			a.ack("step %s %d %s %s %s %s", id, s.Command, dash(s.From), dash(s.To), dash(s.CommandFrom), dash(s.CommandTo))
		},
	})
	if err != nil {
		return err
	}
	a.ack("ready")
	for i := range plans {
		id := fmt.Sprintf("p%d", i)
		doc, err := crashPlanDoc(id)
		if err != nil {
			return err
		}
		if err := r.Create(ctx, doc); err != nil && !errors.Is(err, converge.ErrStoreStale) {
			return err
		}
		st, err := r.Run(ctx, id)
		if err != nil {
			return err
		}
		a.ack("done %s %s", id, st.State)
	}
	return nil
}

func TestCrashPlanRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: -short")
	}
	dir := t.TempDir()
	path, logPath := filepath.Join(dir, "plans.db"), filepath.Join(dir, "signals.log")
	env := []string{envChild + "=plan", envFile + "=" + path, envLog + "=" + logPath}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))
	var all []string
	for range crashKills {
		// Plans without end: the child is always killed mid-plan.
		lines, killed := crashChild(t, append(env, envPlans+"=1000000"), rng.IntN(8))
		require.True(t, killed)
		all = append(all, lines...)
		checkBolt(t, path)
	}
	// The last child runs every plan created so far to its end.
	ctx := context.Background()
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	created, err := st.List(ctx, plan.KeyPrefix)
	require.NoError(t, err)
	require.NoError(t, st.Close())
	plans := len(created)
	require.Positive(t, plans)
	lines, _ := crashChild(t, append(env, fmt.Sprint(envPlans, "=", plans)), -1)
	all = append(all, lines...)

	st = openStore(t, path, boltstore.Options{})
	r, err := plan.NewRunner(st, plan.RunnerConfig{})
	require.NoError(t, err)
	for i := range plans {
		id := fmt.Sprintf("p%d", i)
		doc, _, err := r.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, plan.StateCompleted, doc.State(), "plan %s", id)
		for _, cs := range doc.Status.Commands {
			assert.Equal(t, plan.StateCompleted, cs.State, "plan %s", id)
		}
		hist, err := r.History(ctx, id)
		require.NoError(t, err)
		completed := 0
		for _, h := range hist {
			assert.NotEqual(t, string(plan.StateCompleted), h.From, "plan %s: a completed step was redone: %+v", id, h)
			if h.To == string(plan.StateCompleted) && h.Subject == nil {
				completed++
			}
		}
		assert.Equal(t, 1, completed, "plan %s completed once", id)
	}
	// Acknowledged steps never leave Completed, and none is stored twice.
	seen := map[string]bool{}
	for _, line := range all {
		f := strings.Fields(line)
		if f[0] != "step" {
			continue
		}
		assert.NotEqual(t, string(plan.StateCompleted), f[3], "a completed plan stepped again: %s", line)
		if f[6] == string(plan.StateCompleted) {
			key := f[1] + " " + f[2]
			assert.False(t, seen[key], "command completed twice: %s", line)
			seen[key] = true
		}
	}

	// Every node got every plan's signal exactly once.
	b, err := os.ReadFile(logPath)
	require.NoError(t, err)
	sent := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sent[line]++
	}
	for line, n := range sent {
		assert.Equal(t, 1, n, "signalled %d times: %s", n, line)
	}
	assert.Len(t, sent, plans*(planWorkers+2), "every node of every plan was signalled")
	t.Logf("%d kills, %d plans, %d acknowledged lines, %d signals", crashKills, plans, len(all), len(sent))
}
