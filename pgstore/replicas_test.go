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
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// The environment of a replica process started by
// TestReplicasShareObjectsAcrossProcesses.
const (
	replicaOwnerEnv = "PGSTORE_TEST_REPLICA"
	replicaDSNEnv   = "PGSTORE_TEST_REPLICA_DSN"
)

const (
	replicaObjects = 10_000
	replicaTTL     = 2 * time.Second
	replicaWorkers = 8
)

// runReplica is the body of a replica process: a controller with Owner set
// on the shared store, whose handler logs each run (start and end, by the
// database's clock) into handler_log, fails 30% of its runs, and moves
// every object from "new" to "ready". It runs until SIGTERM (or SIGKILL).
func runReplica(owner, dsn string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	st, err := pgstore.Open(ctx, dsn, pgstore.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	// The log is the test's bookkeeping: it need not wait for fsync, and
	// the server outlives the killed replica.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	logDB, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer logDB.Close()
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	c, err := controller.New(controller.Config{
		Kind: "host", Store: st, Owner: owner, LeaseTTL: replicaTTL, Workers: replicaWorkers,
		Poll: 100 * time.Millisecond, Resync: time.Hour,
		Backoff: converge.Backoff{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond},
		Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
			var id int64
			err := logDB.QueryRow(ctx, `INSERT INTO handler_log (key, owner, started) VALUES ($1, $2, clock_timestamp()) RETURNING id`, o.Key, owner).Scan(&id)
			if err != nil {
				return controller.Result{}, err
			}
			defer func() {
				_, _ = logDB.Exec(context.WithoutCancel(ctx), `UPDATE handler_log SET ended = clock_timestamp() WHERE id = $1`, id)
			}()
			mu.Lock()
			fault := r.Float64() < 0.3
			mu.Unlock()
			if fault {
				return controller.Result{}, errors.New("transient fault")
			}
			if o.State == "new" {
				return controller.Transition("ready"), nil
			}
			return controller.NoChange().After(time.Hour), nil
		}),
	})
	if err != nil {
		return err
	}
	fmt.Println("running")
	return c.Run(ctx)
}

// TestReplicasShareObjectsAcrossProcesses runs three controller replicas
// as separate processes on one PostgreSQL database with 10,000 objects and
// 30% transient handler faults, kills one with SIGKILL mid-run, and
// checks that every object reaches its final state, that no object was
// handled by two replicas at overlapping times, and that the objects the
// dead replica was handling are taken over once their leases expire,
// ahead of the backlog (judged by the order of the database's records,
// not by how long it took, which a loaded machine stretches).
func TestReplicasShareObjectsAcrossProcesses(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE TABLE handler_log (id bigserial PRIMARY KEY, key text NOT NULL, owner text NOT NULL, started timestamptz NOT NULL, ended timestamptz)`)
	require.NoError(t, err)

	st, err := pgstore.Open(ctx, dsn, pgstore.Options{})
	require.NoError(t, err)
	defer st.Close()
	adder, err := controller.New(controller.Config{Kind: "host", Store: st, Handler: controller.HandlerFunc(
		func(context.Context, controller.Object) (controller.Result, error) { return controller.NoChange(), nil })})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < replicaObjects; i += 8 {
				if err := adder.Add(ctx, fmt.Sprintf("h%05d", i), "new", nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	start := time.Now()
	t.Logf("%d objects added", replicaObjects)

	owners := []string{"replica-1", "replica-2", "replica-3"}
	procs := map[string]*exec.Cmd{}
	for _, owner := range owners {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), replicaOwnerEnv+"="+owner, replicaDSNEnv+"="+dsn)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err, "replica %s did not start", owner)
		require.Equal(t, "running\n", line)
		procs[owner] = cmd
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}

	handled := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM handler_log WHERE ended IS NOT NULL`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return handled() >= replicaObjects/3 }, 2*time.Minute, 50*time.Millisecond, "the replicas make progress")
	t.Logf("%d runs ended after %s; killing replica-1", handled(), time.Since(start).Round(time.Millisecond))
	dead := procs["replica-1"]
	require.NoError(t, dead.Process.Signal(syscall.SIGKILL))
	var killedAt time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&killedAt))
	_ = dead.Wait()
	// The objects the dead replica held: claimed, being handled, or
	// handled and not yet handed back.
	var held []string
	expires := map[string]time.Time{} // of the dead replica's leases
	tokens := map[string]int64{}      // the same leases' tokens
	lrows, err := pool.Query(ctx, `SELECT key, expires, token FROM `+pgstore.DefaultSchema+`.leases WHERE owner = 'replica-1' AND expires > $1`, killedAt)
	require.NoError(t, err)
	for lrows.Next() {
		var k string
		var e time.Time
		var tok int64
		require.NoError(t, lrows.Scan(&k, &e, &tok))
		held = append(held, k[len("host/"):])
		expires[k[len("host/"):]] = e
		tokens[k] = tok
	}
	require.NoError(t, lrows.Err())
	require.NotEmpty(t, held, "the dead replica held objects when it was killed")

	ready := func() int {
		recs, err := st.List(ctx, "host/")
		require.NoError(t, err)
		n := 0
		for _, rec := range recs {
			var o controller.Object
			require.NoError(t, json.Unmarshal(rec.Value, &o))
			if o.State == "ready" {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return ready() == replicaObjects }, 3*time.Minute, 200*time.Millisecond,
		"every object reaches its final state")
	t.Logf("every object ready after %s", time.Since(start).Round(time.Millisecond))
	// A Finish the dead replica had sent before the kill may still commit
	// after it (the server runs a statement it has received): that
	// object was handed back, under the same token, and is not taken
	// over. Every other held object is: a live replica claims it (a new
	// token) once its lease expired and runs it, also when the dead
	// replica had moved it to "ready" already, so wait for that too
	// before stopping the others.
	handedBack := map[string]bool{}
	takenOver := func() bool {
		rows, err := pool.Query(ctx, `SELECT l.key, l.owner, l.token,
				EXISTS (SELECT 1 FROM handler_log h WHERE 'host/' || h.key = l.key AND h.owner <> 'replica-1' AND h.started > $2)
			FROM `+pgstore.DefaultSchema+`.leases l WHERE l.key = ANY ($1)`, prefixed(held), killedAt)
		require.NoError(t, err)
		defer rows.Close()
		done := 0
		for rows.Next() {
			var k, owner string
			var tok int64
			var ran bool
			require.NoError(t, rows.Scan(&k, &owner, &tok, &ran))
			switch {
			case tok == tokens[k] && owner == "":
				handedBack[k[len("host/"):]] = true
				done++
			case tok > tokens[k] && ran:
				done++
			}
		}
		require.NoError(t, rows.Err())
		return done == len(held)
	}
	require.Eventually(t, takenOver, 3*time.Minute, 200*time.Millisecond, "every object the dead replica held is taken over or was handed back")
	t.Logf("the dead replica held %d objects: %d handed back by a Finish it had sent, %d taken over", len(held), len(handedBack), len(held)-len(handedBack))
	held = slices.DeleteFunc(held, func(k string) bool { return handedBack[k] })
	for _, owner := range owners[1:] {
		require.NoError(t, procs[owner].Process.Signal(syscall.SIGTERM))
		require.NoError(t, procs[owner].Wait(), "replica %s stops cleanly", owner)
	}

	// A run of the dead replica that had not ended lasted until the kill.
	var overlaps int
	require.NoError(t, pool.QueryRow(ctx, `
		WITH runs AS (
			SELECT id, key, owner, started,
				coalesce(ended, CASE WHEN owner = 'replica-1' THEN $1::timestamptz ELSE 'infinity' END) AS ended
			FROM handler_log)
		SELECT count(*) FROM runs a JOIN runs b
			ON a.key = b.key AND a.id < b.id AND a.owner <> b.owner
			AND a.started < b.ended AND b.started < a.ended`, killedAt).Scan(&overlaps))
	assert.Zero(t, overlaps, "no object is handled by two replicas at overlapping times")

	// Each held object is taken over once its lease expired, before the
	// backlog: from its lease's expiry until its takeover, the live
	// replicas start no more runs of other objects than the claims they
	// had made before (at most 3×Workers each, running or waiting for a
	// worker: see controller's Config) and one more batch of claims each
	// (at most 3×Workers), in which it comes first, can make: two runs a
	// claim ("new", then "ready" at once under the same lease). Both
	// times are the database's clock; the check needs no bound on how
	// long anything takes. With the dead replica's objects due only after
	// the backlog (or once a later poll found them), many runs of other
	// objects come in between.
	const perReplica = 2 * (3*replicaWorkers + 3*replicaWorkers)
	bound := perReplica * (len(owners) - 1)
	most := 0
	for _, key := range held {
		expired := expires[key]
		var takeover time.Time
		var between int
		require.NoError(t, pool.QueryRow(ctx, `
			WITH t AS (SELECT min(started) AS at FROM handler_log WHERE key = $1 AND owner <> 'replica-1' AND started > $2)
			SELECT t.at, (SELECT count(*) FROM handler_log h
				WHERE h.owner <> 'replica-1' AND h.key <> ALL ($3) AND h.started > $4 AND h.started < t.at)
			FROM t`, key, killedAt, held, expired).Scan(&takeover, &between), key)
		assert.False(t, takeover.Before(expired), "%s taken over at %s, before its lease expired at %s", key, takeover, expired)
		assert.LessOrEqual(t, between, bound, "%s: %d runs of other objects started between its lease's expiry and its takeover", key, between)
		most = max(most, between)
	}
	t.Logf("at most %d runs of other objects between a held object's lease expiry and its takeover (bound %d)", most, bound)
	var byOwner = map[string]int{}
	orows, err := pool.Query(ctx, `SELECT owner, count(*) FROM handler_log GROUP BY owner`)
	require.NoError(t, err)
	for orows.Next() {
		var o string
		var n int
		require.NoError(t, orows.Scan(&o, &n))
		byOwner[o] = n
	}
	require.NoError(t, orows.Err())
	for _, owner := range owners {
		assert.Positive(t, byOwner[owner], "%s took a share of the work", owner)
	}
	t.Logf("handler runs per replica: %v; %d objects taken over from the dead replica", byOwner, len(held))
}

// prefixed returns the store keys of the controller's object keys.
func prefixed(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "host/" + k
	}
	return out
}
