package boltstore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/convergetest"
)

// The loop crash tests kill a child running a controller or a target
// reconciler on a boltstore file, like crash_test.go does for raw writes
// and plans, and reuse its crashChild and checkBolt. Their child modes are
// dispatched from init, under an environment variable of their own, so that
// this file stands alone next to crash_test.go's TestMain.
const envLoopChild = "BOLTSTORE_CRASH_LOOP_CHILD" // "controller" or "target"

func init() {
	mode := os.Getenv(envLoopChild)
	if mode == "" {
		return
	}
	var err error
	switch mode {
	case "controller":
		err = childController(os.Getenv(envFile), os.Getenv(envLog))
	case "target":
		err = childTarget(os.Getenv(envFile))
	default:
		err = fmt.Errorf("unknown loop child mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

const (
	ctrlKind    = "box"
	ctrlObjects = 50
	ctrlLast    = 5 // objects move s0 → s1 → ... → s5
	// ctrlKillAfter bounds the acknowledged transitions a killed child
	// prints: small, so that 50 kills leave work for the last child.
	ctrlKillAfter = 4
)

// ctrlOptions are the store options of the controller children and checks:
// the whole history is kept, so that exactly-once can be checked on it.
var ctrlOptions = boltstore.Options{Retention: converge.Retention{Entries: -1}}

func ctrlKey(i int) string             { return fmt.Sprintf("o%02d", i) }
func ctrlState(i int) controller.State { return controller.State(fmt.Sprint("s", i)) }

// ctrlIndex returns the number of state s ("s3" is 3), or -1.
func ctrlIndex(s string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "s"))
	if err != nil || !strings.HasPrefix(s, "s") || n < 0 || n > ctrlLast {
		return -1
	}
	return n
}

// sideLog is the handlers' own record, fsynced before a handler returns
// Transition: "key from to" per line, one line per handler run that asked
// for a transition.
type sideLog struct {
	mu   sync.Mutex
	file *os.File
}

func (l *sideLog) append(key string, from, to controller.State) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := fmt.Fprintf(l.file, "%s %s %s\n", key, from, to); err != nil {
		return err
	}
	return l.file.Sync()
}

// childController adds the objects o00..o49 in s0 (those not stored yet)
// and runs a controller that moves every object to s5, one state per
// handler run. Before returning Transition, a handler appends the
// transition to the side log at logPath. The child prints "added key"
// after each Add, and "moved key from to" once Get shows an object in the
// state one of its own transitions stored; it prints "done" and returns
// once every object is in s5.
func childController(path, logPath string) error {
	st, err := boltstore.Open(path, ctrlOptions)
	if err != nil {
		return err
	}
	defer st.Close()
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	side := &sideLog{file: f}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var a acker

	var mu sync.Mutex
	moving := map[string]controller.State{} // key → the state this child moved it to
	done := map[string]bool{}
	h := controller.HandlerFunc(func(_ context.Context, obj controller.Object) (controller.Result, error) {
		i := ctrlIndex(string(obj.State))
		if i < 0 {
			return controller.Result{}, fmt.Errorf("object %s in unknown state %q", obj.Key, obj.State)
		}
		mu.Lock()
		if i == ctrlLast {
			done[obj.Key] = true
			if len(done) == ctrlObjects {
				cancel()
			}
			mu.Unlock()
			return controller.NoChange(), nil
		}
		mu.Unlock()
		next := ctrlState(i + 1)
		if err := side.append(obj.Key, obj.State, next); err != nil {
			return controller.Result{}, err
		}
		mu.Lock()
		moving[obj.Key] = next
		mu.Unlock()
		return controller.Transition(next), nil
	})
	var c *controller.Controller
	// The controller calls StateEntered once it stored a transition and
	// updated its view: acknowledge the objects this child moved that Get
	// now shows in their new state.
	entered := func(state controller.State) {
		mu.Lock()
		defer mu.Unlock()
		for key, to := range moving {
			if to != state {
				continue
			}
			if obj, ok := c.Get(key); ok && obj.State == to {
				delete(moving, key)
				a.ack("moved %s %s %s", key, ctrlState(ctrlIndex(string(to))-1), to)
			}
		}
	}
	c, err = controller.New(controller.Config{Kind: ctrlKind, Handler: h, Store: st, Workers: 2, Metrics: enteredMetrics(entered)})
	if err != nil {
		return err
	}
	// The objects are added at once, so that their writes share commits.
	errc := make(chan error, ctrlObjects)
	for i := range ctrlObjects {
		go func() {
			switch err := c.Add(ctx, ctrlKey(i), ctrlState(0), nil); {
			case err == nil:
				a.ack("added %s", ctrlKey(i))
			case !errors.Is(err, controller.ErrObjectExists):
				errc <- err
				return
			}
			errc <- nil
		}()
	}
	for range ctrlObjects {
		if err := <-errc; err != nil {
			return err
		}
	}
	if err := c.Run(ctx); err != nil {
		return err
	}
	a.ack("done")
	return nil
}

// enteredMetrics is a converge.Metrics that calls itself with the state of
// every controller.MetricStateEntered count (labels: controller, state).
type enteredMetrics func(controller.State)

func (f enteredMetrics) Add(m *converge.Metric, _ float64, labels ...string) {
	if m == controller.MetricStateEntered {
		f(controller.State(labels[1]))
	}
}
func (enteredMetrics) Set(*converge.Metric, float64, ...string)     {}
func (enteredMetrics) Observe(*converge.Metric, float64, ...string) {}

// transition is one stored or logged change of state of an object.
type transition struct {
	key      string
	from, to int
}

// readSideLog returns the transitions the handlers asked for, in order.
func readSideLog(t *testing.T, path string) []transition {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var out []transition
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		require.Len(t, f, 3, "side log line %q", sc.Text())
		tr := transition{key: f[0], from: ctrlIndex(f[1]), to: ctrlIndex(f[2])}
		require.True(t, tr.from >= 0 && tr.to == tr.from+1, "side log line %q", sc.Text())
		out = append(out, tr)
	}
	return out
}

// checkControllerStore checks the reopened store after a child: every
// acknowledged add and transition is stored, each object's history is the
// chain added→s0→s1→... up to its stored state, each once, and its record
// (state, since, version) matches its last history entry. It returns each
// stored object's state number (-1 when not stored).
func checkControllerStore(t *testing.T, path string, added map[string]bool, moved map[transition]bool) []int {
	t.Helper()
	ctx := context.Background()
	checkBolt(t, path)
	st, err := boltstore.Open(path, ctrlOptions)
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	states := make([]int, ctrlObjects)
	for i := range ctrlObjects {
		key := ctrlKey(i)
		rec, err := st.Get(ctx, ctrlKind+"/"+key)
		if errors.Is(err, converge.ErrStoreNotFound) {
			require.False(t, added[key], "%s: an acknowledged Add is lost", key)
			states[i] = -1
			continue
		}
		require.NoError(t, err, key)
		var obj controller.Object
		require.NoError(t, json.Unmarshal(rec.Value, &obj), "%s: the record is whole", key)
		n := ctrlIndex(string(obj.State))
		require.GreaterOrEqual(t, n, 0, "%s: stored state %q", key, obj.State)
		states[i] = n

		hist, err := st.History(ctx, ctrlKind+"/"+key)
		require.NoError(t, err, key)
		require.Len(t, hist, n+1, "%s in %s: one history entry per transition, plus the add", key, obj.State)
		assert.Equal(t, converge.HistoryEntry{At: hist[0].At, To: "s0", Reason: "added"}, hist[0], key)
		for j := 1; j < len(hist); j++ {
			assert.Equal(t, string(ctrlState(j-1)), hist[j].From, "%s: history entry %d", key, j)
			assert.Equal(t, string(ctrlState(j)), hist[j].To, "%s: history entry %d", key, j)
		}
		last := hist[len(hist)-1]
		assert.Equal(t, last.To, string(obj.State), "%s: the record is in its last history entry's state", key)
		assert.True(t, last.At.Equal(obj.Since), "%s: the record entered its state when its history says (%s, %s)", key, obj.Since, last.At)
		assert.Equal(t, uint64(len(hist)), rec.Version, "%s: one version per stored transition", key)
	}
	for tr := range moved {
		i, err := strconv.Atoi(strings.TrimPrefix(tr.key, "o"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, states[i], tr.to, "%s: the acknowledged transition s%d → s%d is lost", tr.key, tr.from, tr.to)
	}
	return states
}

func TestCrashController(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: -short")
	}
	dir := t.TempDir()
	path, logPath := filepath.Join(dir, "controller.db"), filepath.Join(dir, "handlers.log")
	env := []string{envLoopChild + "=controller", envFile + "=" + path, envLog + "=" + logPath}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))
	added := map[string]bool{}
	moved := map[transition]bool{}
	before := make([]int, ctrlObjects) // stored states when the child started
	for i := range before {
		before[i] = -1
	}
	logged := 0 // side log lines of earlier children

	// round checks one child's lines and side log, then the store.
	round := func(r int, lines []string) {
		for _, line := range lines {
			f := strings.Fields(line)
			switch f[0] {
			case "added":
				added[f[1]] = true
			case "moved":
				tr := transition{key: f[1], from: ctrlIndex(f[2]), to: ctrlIndex(f[3])}
				require.True(t, tr.from >= 0 && tr.to == tr.from+1, "round %d: %q", r, line)
				require.False(t, moved[tr], "round %d: acknowledged twice: %q", r, line)
				moved[tr] = true
			}
		}
		// The child resumed where the store was: its first handler run on
		// an object started from the stored state, and each next one from
		// the state the previous stored; no stored transition was redone.
		side := readSideLog(t, logPath)
		at := map[string]int{}
		for i := range ctrlObjects {
			at[ctrlKey(i)] = max(before[i], 0)
		}
		for _, tr := range side[logged:] {
			require.Equal(t, at[tr.key], tr.from, "round %d: %s ran s%d → s%d while stored in s%d", r, tr.key, tr.from, tr.to, at[tr.key])
			at[tr.key] = tr.to
		}
		logged = len(side)
		after := checkControllerStore(t, path, added, moved)
		for i, n := range after {
			// Stored transitions are the handler's, run before the kill.
			require.GreaterOrEqual(t, n, before[i], "round %d: %s went back", r, ctrlKey(i))
			require.LessOrEqual(t, max(n, 0), at[ctrlKey(i)], "round %d: %s stored a transition no handler asked for", r, ctrlKey(i))
		}
		before = after
	}

	for r := range crashKills {
		lines, killed := crashChild(t, env, rng.IntN(ctrlKillAfter+1))
		require.True(t, killed, "round %d: the child finished every object before its kill: raise ctrlObjects", r)
		round(r, lines)
	}
	remaining := 0
	for _, n := range before {
		remaining += ctrlLast - max(n, 0)
	}
	require.Positive(t, remaining, "the killed children left work for the last one")

	// The last child runs every object to s5.
	lines, killed := crashChild(t, env, -1)
	require.False(t, killed)
	require.Equal(t, "done", lines[len(lines)-1])
	round(crashKills, lines)
	for i, n := range before {
		require.Equal(t, ctrlLast, n, "%s ends in s5", ctrlKey(i))
	}
	// checkControllerStore checked every history is s0 → ... → s5, each
	// transition once. The side log may hold a transition more than once:
	// a handler run whose Put did not reach the disk before a kill runs
	// again in the next child.
	side := readSideLog(t, logPath)
	runs := map[transition]int{}
	for _, tr := range side {
		runs[tr]++
	}
	require.Len(t, runs, ctrlObjects*ctrlLast, "a handler ran for every transition")
	rerun := len(side) - len(runs)
	t.Logf("%d kills, %d acknowledged transitions, %d left to the last child, %d handler runs whose Put the kill lost",
		crashKills, len(moved), remaining, rerun)
}

// crashTarget is the target the reconciler children set.
type crashTarget struct {
	Rev int `json:"rev"`
}

// decodeTarget decodes a stored target strictly.
func decodeTarget(b []byte) (crashTarget, error) {
	var tg crashTarget
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tg); err != nil {
		return tg, err
	}
	if dec.More() {
		return tg, errors.New("trailing data after the target")
	}
	return tg, nil
}

// targetBuild returns a Build of one stage whose one item converges to the
// target's revision, and a channel that receives the first target built.
func targetBuild() (converge.TargetBuildFunc[crashTarget], <-chan crashTarget) {
	item := &convergetest.Item{Key: "rev"}
	first := make(chan crashTarget, 1)
	var once sync.Once
	return func(_ context.Context, tg crashTarget) ([]converge.TargetStage, error) {
		once.Do(func() { first <- tg })
		item.Goal = strconv.Itoa(tg.Rev) // Build runs between walks only
		g := converge.NewGraph()
		g.Add(item.Node(), converge.Present)
		return []converge.TargetStage{{Name: "rev", Graph: g}}, nil
	}, first
}

// childTarget runs a target reconciler on the store. When a target is
// stored, it waits for the reconciler to build it without any SetTarget
// and prints "resumed rev"; then it sets targets with increasing revisions
// forever, printing "target rev" after each SetTarget returns.
func childTarget(path string) error {
	st, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var a acker
	build, first := targetBuild()
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[crashTarget]{Build: build, Store: st})
	if err != nil {
		return err
	}
	_, _, err = st.Target(ctx, converge.TargetDefaultName)
	stored := err == nil
	if err != nil && !errors.Is(err, converge.ErrStoreNotFound) {
		return err
	}
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	rev := 0
	if stored {
		select {
		case tg := <-first:
			a.ack("resumed %d", tg.Rev)
			rev = tg.Rev
		case err := <-ran:
			return fmt.Errorf("reconciler stopped before its first pass: %w", err)
		}
	}
	for {
		rev++
		if err := r.SetTarget(ctx, crashTarget{Rev: rev}); err != nil {
			return err
		}
		a.ack("target %d", rev)
	}
}

// storedTarget reads the stored target of the closed file, or -1 for none.
func storedTarget(t *testing.T, path string) int {
	t.Helper()
	checkBolt(t, path)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return -1
	}
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	b, rev, err := st.Target(context.Background(), converge.TargetDefaultName)
	if errors.Is(err, converge.ErrStoreNotFound) {
		return -1
	}
	require.NoError(t, err)
	tg, err := decodeTarget(b)
	require.NoError(t, err, "the stored target is whole: %q", b)
	// Every child sets the stored target's Rev + 1, and the store numbers
	// each target one above the last: a revision that restarted after a
	// kill would fall behind.
	require.Equal(t, uint64(tg.Rev), rev, "the store's revision of the target survived every kill")
	return tg.Rev
}

func TestCrashTargetReconciler(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: -short")
	}
	path := filepath.Join(t.TempDir(), "target.db")
	env := []string{envLoopChild + "=target", envFile + "=" + path}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))
	acked, stored, resumed := 0, -1, 0
	for r := range crashKills {
		lines, killed := crashChild(t, env, rng.IntN(20))
		require.True(t, killed)
		resumedHere := false
		for i, line := range lines {
			f := strings.Fields(line)
			n, err := strconv.Atoi(f[1])
			require.NoError(t, err, "round %d: %q", r, line)
			switch f[0] {
			case "resumed":
				// The reconciler's first pass, without SetTarget, was on
				// the target the store held when the child started.
				require.Zero(t, i, "round %d: resumed first", r)
				require.Equal(t, stored, n, "round %d: the reconciler resumed the stored target", r)
				resumed++
				resumedHere = true
			case "target":
				require.True(t, stored < 0 || resumedHere, "round %d: a target was set before the stored one was resumed", r)
				require.Equal(t, acked+1, n, "round %d: revisions follow each other", r)
				acked = n
			default:
				require.Failf(t, "unknown line", "round %d: %q", r, line)
			}
		}
		got := storedTarget(t, path)
		if acked == 0 {
			require.LessOrEqual(t, got, 1, "round %d", r)
		} else {
			require.GreaterOrEqual(t, got, acked, "round %d: the stored target is older than the last acknowledged one", r)
			// SetTarget calls follow each other: at most one was not
			// acknowledged when the child died.
			require.LessOrEqual(t, got, acked+1, "round %d: a target was stored that was never set", r)
		}
		acked = max(acked, got) // the next child goes on from the stored one
		stored = got
	}
	require.Positive(t, acked, "the children set targets")

	// A reconciler in this process, given no target, resumes the stored
	// one and converges to it.
	build, first := targetBuild()
	st := openStore(t, path, boltstore.Options{})
	rec, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[crashTarget]{Build: build, Store: st})
	require.NoError(t, err)
	passed := make(chan converge.TargetEvent, 1)
	rec.Subscribe(func(ev converge.TargetEvent) {
		if ev.Kind == converge.TargetPassFinished || ev.Kind == converge.TargetPassFailed {
			select {
			case passed <- ev:
			default:
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rec.Run(ctx) }()
	tg := <-first
	ev := <-passed
	cancel()
	require.NoError(t, <-ran)
	assert.Equal(t, stored, tg.Rev, "the reconciler resumed the stored target")
	assert.Equal(t, converge.TargetPassFinished, ev.Kind, "the pass on the resumed target: %v", ev.Err)
	cur, ok := rec.Target()
	assert.True(t, ok)
	assert.Equal(t, crashTarget{Rev: stored}, cur)
	assert.Equal(t, uint64(stored), rec.Revision(), "the resumed target has its stored revision")
	t.Logf("%d kills, %d children resumed a stored target, last revision %d", crashKills, resumed, stored)
}
