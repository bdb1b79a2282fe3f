package pgstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// crashDSN, in the environment, makes TestCrashChild the writing child
// of TestCrashKill9.
const crashDSN = "PGSTORE_CRASH_CHILD_DSN"

// crashApp is the application_name of the child's connections.
const crashApp = "pgstore_crash_child"

var (
	crashKeys      = []string{"crash/k0", "crash/k1", "crash/k2", "crash/k3", "crash/k4"}
	crashJob       = "crash/q/job"
	crashRetention = converge.Retention{Entries: 20}
)

type crashValue struct {
	V uint64 `json:"v"`
}

// TestCrashChild is the child process of TestCrashKill9: it writes in a
// loop and prints an ack line after each call returned, until killed.
func TestCrashChild(t *testing.T) {
	dsn := os.Getenv(crashDSN)
	if dsn == "" {
		t.Skip("the child process of TestCrashKill9; runs only when started by it")
	}
	fatal := func(format string, args ...any) {
		fmt.Printf("error "+format+"\n", args...)
		os.Exit(3)
	}
	ctx := context.Background()
	s, err := pgstore.Open(ctx, dsn, pgstore.Options{Retention: crashRetention})
	if err != nil {
		fatal("open: %v", err)
	}
	versions := map[string]uint64{}
	for _, k := range crashKeys {
		rec, err := s.Get(ctx, k)
		if err != nil && !errors.Is(err, converge.ErrStoreNotFound) {
			fatal("get %s: %v", k, err)
		}
		versions[k] = rec.Version
	}
	seq := 0
	if tgt, _, err := s.Target(ctx, "crash"); err == nil {
		var v crashValue
		if err := json.Unmarshal(tgt, &v); err != nil {
			fatal("target %s: %v", tgt, err)
		}
		seq = int(v.V)
	}
	put := func(key string, version, token uint64) uint64 {
		next := version + 1
		value, _ := json.Marshal(crashValue{V: next})
		v, err := s.Put(ctx, converge.StoreRecord{Key: key, Version: version, Value: value, Token: token},
			converge.HistoryEntry{At: time.Now(), From: fmt.Sprint("v", version), To: fmt.Sprint("v", next), Reason: strings.Repeat("r", int(next%50))})
		if token != 0 && errors.Is(err, converge.ErrLeaseLost) {
			return 0 // the lease ran out before the write: fenced off
		}
		if err != nil {
			fatal("put %s at version %d: %v", key, version, err)
		}
		fmt.Printf("put %s %d\n", key, v)
		return v
	}
	fmt.Println("ready")
	for i := 0; ; i++ {
		k := crashKeys[i%len(crashKeys)]
		versions[k] = put(k, versions[k], 0)
		if i%3 == 0 {
			seq++
			if _, err := s.PutTarget(ctx, "crash", json.RawMessage(fmt.Sprintf(`{"v":%d}`, seq))); err != nil {
				fatal("put target: %v", err)
			}
			fmt.Printf("target %d\n", seq)
		}
		if i%4 == 0 {
			got, err := s.ClaimDue(ctx, "crash/q/", "child", 300*time.Millisecond, 1)
			if err != nil {
				fatal("claim due: %v", err)
			}
			for _, c := range got {
				put(c.Record.Key, c.Record.Version, c.Lease.Token)
				if err := s.Finish(ctx, c.Lease, time.Now()); err != nil && !errors.Is(err, converge.ErrLeaseLost) {
					fatal("finish: %v", err)
				}
				fmt.Printf("finish %s %d\n", c.Lease.Key, c.Lease.Token)
			}
		}
	}
}

// TestCrashKill9 runs a child process writing versioned records with
// history, a target and queue claims, kills it with SIGKILL at a random
// moment, 50 times on the same database, and checks after each kill that
// every acknowledged write is there and nothing is torn: every record's
// value, version and history agree.
func TestCrashKill9(t *testing.T) {
	if os.Getenv(crashDSN) != "" {
		t.Skip("in the child")
	}
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn, pgstore.Options{Retention: crashRetention})
	ctx := ctxT(t)
	_, err := s.Put(ctx, converge.StoreRecord{Key: crashJob, Value: json.RawMessage(`{"v":1}`)},
		converge.HistoryEntry{At: time.Now(), From: "v0", To: "v1"})
	require.NoError(t, err)

	acked := map[string]uint64{crashJob: 1}
	ackedTarget, ackedToken, total := 0, uint64(0), 0
	runs := 50
	if testing.Short() {
		runs = 10
	}
	for run := range runs {
		kill := 1 + rand.IntN(40) // acks before the kill
		lines := runCrashChild(t, dsn, kill)
		for _, line := range lines {
			f := strings.Fields(line)
			switch {
			case f[0] == "error":
				t.Fatalf("run %d: child failed: %s", run, line)
			case f[0] == "put" && len(f) == 3:
				v, err := strconv.ParseUint(f[2], 10, 64)
				require.NoError(t, err)
				require.Greater(t, v, acked[f[1]], "run %d: versions of %s go up", run, f[1])
				acked[f[1]] = v
			case f[0] == "target" && len(f) == 2:
				ackedTarget, _ = strconv.Atoi(f[1])
			case f[0] == "finish" && len(f) == 3:
				tok, _ := strconv.ParseUint(f[2], 10, 64)
				require.Greater(t, tok, ackedToken)
				ackedToken = tok
			case f[0] == "ready":
			default:
				t.Fatalf("run %d: unexpected line %q", run, line)
			}
		}
		total += len(lines)
		verifyCrashState(t, s, run, acked, &ackedTarget, ackedToken)
	}
	t.Logf("%d runs, %d acknowledged calls, job token %d", runs, total, ackedToken)
	assert.Greater(t, total, runs, "the children made progress")
}

// runCrashChild starts the child, kills it with SIGKILL after it printed
// kill acks (and a random few hundred microseconds more, to land inside
// a call), and returns the complete lines it printed.
func runCrashChild(t *testing.T, dsn string, kill int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDSN+"="+dsn, "PGAPPNAME="+crashApp)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := bufio.NewReader(out)
	var lines []string
	acks := 0
	killed := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // EOF: the child died; a last line without '\n' was torn
		}
		line = strings.TrimSuffix(line, "\n")
		lines = append(lines, line)
		if line != "ready" && !strings.HasPrefix(line, "error") {
			acks++
		}
		if acks >= kill && !killed {
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child exited by itself: %v; printed %q", err, lines)
	}
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	// The child's last statement may still run in its backend, and
	// commit: wait until the server has noticed the death and ended them.
	require.Eventually(t, func() bool {
		var n int
		query(t, dsn, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, []any{crashApp}, &n)
		return n == 0
	}, 30*time.Second, 5*time.Millisecond, "the dead child's backends end")
	return lines
}

// verifyCrashState checks the store against what the children
// acknowledged, and then moves acked and ackedTarget to what is stored: a
// call in flight at the kill may have committed, and the next child goes
// on from there.
func verifyCrashState(t *testing.T, s *pgstore.Store, run int, acked map[string]uint64, ackedTarget *int, ackedToken uint64) {
	t.Helper()
	ctx := ctxT(t)
	for _, k := range append([]string{crashJob}, crashKeys...) {
		rec, err := s.Get(ctx, k)
		if acked[k] == 0 && errors.Is(err, converge.ErrStoreNotFound) {
			continue
		}
		require.NoError(t, err, "run %d: key %s", run, k)
		// The acknowledged write is there; the call in flight when the
		// child died may have committed too, nothing more.
		require.Contains(t, []uint64{acked[k], acked[k] + 1}, rec.Version, "run %d: %s has version %d, acknowledged %d", run, k, rec.Version, acked[k])
		var v crashValue
		require.NoError(t, json.Unmarshal(rec.Value, &v), "run %d: %s torn: %s", run, k, rec.Value)
		require.Equal(t, rec.Version, v.V, "run %d: %s value and version disagree", run, k)
		acked[k] = rec.Version
		hist, err := s.History(ctx, k)
		require.NoError(t, err)
		require.Len(t, hist, int(min(rec.Version, uint64(crashRetention.Entries))), "run %d: %s history", run, k)
		for i, e := range hist {
			n := rec.Version - uint64(len(hist)-1-i)
			require.Equal(t, fmt.Sprint("v", n-1), e.From, "run %d: %s history entry %d", run, k, i)
			require.Equal(t, fmt.Sprint("v", n), e.To, "run %d: %s history entry %d", run, k, i)
			if n > 1 { // the parent wrote v1
				require.Equal(t, strings.Repeat("r", int(n%50)), e.Reason)
			}
		}
	}
	tgt, rev, err := s.Target(ctx, "crash")
	if *ackedTarget == 0 && errors.Is(err, converge.ErrStoreNotFound) {
		return
	}
	require.NoError(t, err)
	var v crashValue
	require.NoError(t, json.Unmarshal(tgt, &v), "run %d: target torn: %s", run, tgt)
	require.Equal(t, v.V, rev, "run %d: the target's revision went with it", run)
	require.Contains(t, []uint64{uint64(*ackedTarget), uint64(*ackedTarget) + 1}, v.V, "run %d: target", run)
	*ackedTarget = int(v.V)
	if ackedToken > 0 {
		var token int64
		query(t, s.Pool().Config().ConnString(), `SELECT token FROM converge.leases WHERE key = $1`, []any{crashJob}, &token)
		require.GreaterOrEqual(t, uint64(token), ackedToken, "run %d: lease tokens never go back", run)
	}
}
