package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/fleet"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// The environment of TestRolloutOnPostgres: the number of devices (a few
// hundred by default; 10000 for the full run) and how long a tenth of the
// agents is cut off (a few seconds by default; 30s for the full run).
const (
	envFleetDevices   = "CONVERGE_FLEET_DEVICES"
	envFleetPartition = "CONVERGE_FLEET_PARTITION"
)

// applied is one target a device's reconciler built: the server's
// revision, the payload's version, and when.
type applied struct {
	rev     uint64
	version string
	at      time.Time
}

// historyDevice is a simulated device that records every target its
// reconciler builds, and whose items fail under the version failOn.
type historyDevice struct {
	simDevice
	failOn string
	mu     sync.Mutex
	seen   []applied
}

func (d *historyDevice) build(ctx context.Context, t fleet.Target) ([]converge.TargetStage, error) {
	var p payload
	if err := json.Unmarshal(t.Payload, &p); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if n := len(d.seen); n == 0 || d.seen[n-1].rev != t.Desired.Revision {
		d.seen = append(d.seen, applied{t.Desired.Revision, p.Version, time.Now()})
	}
	d.mu.Unlock()
	stages, err := d.simDevice.build(ctx, t)
	if err != nil {
		return nil, err
	}
	d.simDevice.mu.Lock()
	for _, it := range d.simDevice.items {
		if d.failOn != "" && p.Version == d.failOn {
			it.FailAt(converge.PhaseApply, -1, fmt.Errorf("%s does not start on this device", p.Version))
		} else {
			it.FailAt(converge.PhaseApply, 0, nil)
		}
	}
	d.simDevice.mu.Unlock()
	return stages, nil
}

func (d *historyDevice) history() []applied {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]applied(nil), d.seen...)
}

// ackLog is what one device's agent saw the server acknowledge: its
// reports answered 204, the last one kept whole.
type ackLog struct {
	mu      sync.Mutex
	n       int
	last    []byte
	lastRev uint64
	// failedRevs are the revisions of acknowledged reports with a failed
	// item.
	failedRevs map[uint64]bool
}

func (l *ackLog) add(body []byte) {
	rep, err := converge.DecodeEdgeReport(body, converge.DecodeLimits{})
	if err != nil {
		return // the server took it: the checker finds it unreadable
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	l.last, l.lastRev = body, rep.Revision
	for _, it := range rep.Items {
		if it.State.Failed() {
			if l.failedRevs == nil {
				l.failedRevs = map[uint64]bool{}
			}
			l.failedRevs[rep.Revision] = true
		}
	}
}

func (l *ackLog) lastReport() ([]byte, uint64, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.lastRev, l.n
}

func (l *ackLog) failedAt(rev uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failedRevs[rev]
}

// deviceLink is one run of an agent's http.RoundTripper: it records the
// reports the server acknowledged and the ETag of the run's first poll.
type deviceLink struct {
	next  http.RoundTripper
	acks  *ackLog
	mu    sync.Mutex
	first string // If-None-Match of the first poll; "" before it
}

func (l *deviceLink) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	switch {
	case r.Method == http.MethodGet:
		l.mu.Lock()
		if l.first == "" {
			l.first = r.Header.Get("If-None-Match")
		}
		l.mu.Unlock()
	case r.GetBody != nil:
		if rc, err := r.GetBody(); err == nil {
			body, _ = io.ReadAll(rc)
		}
	}
	res, err := l.next.RoundTrip(r)
	if err == nil && body != nil && res.StatusCode == http.StatusNoContent {
		l.acks.add(body)
	}
	return res, err
}

func (l *deviceLink) firstETag() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

// fleetAgent is one simulated device's agent: its store and its device
// (the real system) outlive a restart of the agent.
type fleetAgent struct {
	d      *historyDevice
	store  converge.Store
	server string
	token  string
	acks   ackLog
	proxy  *convergetest.Proxy // nil unless the agent is one of those cut off
	wait   time.Duration
	link   *deviceLink
	stop   func()
}

// start runs the agent and its reconciler, from its store.
func (a *fleetAgent) start(t *testing.T, tr http.RoundTripper) {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	rec, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[fleet.Target]{
		Name: "fleet", Build: a.d.build, Store: a.store,
		Backoff: converge.Backoff{Base: 100 * time.Millisecond, Max: time.Second},
		Walk:    converge.WalkerConfig{Logger: logger},
	})
	require.NoError(t, err)
	wait := a.wait
	a.link = &deviceLink{next: tr, acks: &a.acks}
	ag, err := fleet.NewAgent(fleet.AgentConfig{
		Server: a.server, Device: a.d.id, Token: a.token, Reconciler: rec,
		Client: &http.Client{Transport: a.link, Timeout: wait + time.Minute},
		Wait:   wait, Backoff: converge.Backoff{Base: 50 * time.Millisecond, Max: time.Second, Jitter: 0.5},
		Logger: logger,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = rec.Run(ctx) })
	wg.Go(func() { _ = ag.Run(ctx) })
	a.stop = func() { cancel(); wg.Wait() }
}

// storedRevision is the server revision of the target in the agent's
// store (0 without one).
func (a *fleetAgent) storedRevision(ctx context.Context) (uint64, error) {
	b, _, err := a.store.Target(ctx, "fleet")
	if err != nil {
		return 0, err
	}
	var t fleet.Target
	if err := json.Unmarshal(b, &t); err != nil {
		return 0, err
	}
	return t.Desired.Revision, nil
}

// replica is one fleet server replica on PostgreSQL, reached by the
// agents at a fixed address across its restarts, and by the database
// through a proxy a kill cuts.
type replica struct {
	owner string
	addr  string
	db    *convergetest.Proxy
	store *pgstore.Store
	srv   *fleet.Server
	hs    *http.Server
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu       sync.Mutex
	hijacked []net.Conn // connections of long polls parked off net/http
}

// startReplica starts a replica named owner at addr ("127.0.0.1:0" for
// any port) on the database of dsn, and runs its rollouts; with h2c it
// serves HTTP/2 without TLS beside HTTP/1.
func startReplica(t *testing.T, owner, addr, dsn string, poll time.Duration, h2c bool) *replica {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	r := &replica{owner: owner, db: newProxy(t, u.Host)}
	u.Host = r.db.Addr()
	r.store, err = pgstore.Open(ctx, u.String(), pgstore.Options{})
	require.NoError(t, err)
	r.srv, err = fleet.NewServer(fleet.Config{Store: r.store, Logger: slog.New(slog.DiscardHandler), Authorizer: testAuthorizer,
		RolloutOwner: owner, RolloutPoll: poll})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	r.addr = ln.Addr().String()
	r.hs = fleet.NewHTTPServer(r.addr, r.srv)
	r.hs.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateHijacked {
			r.mu.Lock()
			r.hijacked = append(r.hijacked, c)
			r.mu.Unlock()
		}
	}
	if h2c {
		r.hs.Protocols = new(http.Protocols)
		r.hs.Protocols.SetHTTP1(true)
		r.hs.Protocols.SetUnencryptedHTTP2(true)
	}
	rctx, cancel := context.WithCancel(ctx)
	r.stop = cancel
	r.wg.Go(func() { _ = r.hs.Serve(ln) })
	r.wg.Go(func() { _ = r.srv.RunRollouts(rctx) })
	return r
}

func (r *replica) url() string { return "http://" + r.addr }

// kill ends the replica as a crash would: its database is gone first
// (nothing it does from then on reaches it: no claim released, no write
// finished), then its listener and every connection are closed at once,
// long polls and reports in flight included, and its rollout runner
// stopped.
func (r *replica) kill() {
	r.db.Partition(convergetest.PartitionFail)
	_ = r.hs.Close()
	r.mu.Lock()
	for _, c := range r.hijacked { // parked long polls, which http.Server.Close leaves
		_ = c.Close()
	}
	r.hijacked = nil
	r.mu.Unlock()
	r.stop()
	r.wg.Wait()
	_ = r.srv.Close()
	r.store.Close()
	_ = r.db.Close()
}

// shutdown stops the replica in order.
func (r *replica) shutdown() {
	_ = r.srv.Close() // the long polls answer
	_ = r.hs.Close()
	r.stop()
	r.wg.Wait()
	r.store.Close()
}

// envInt reads a positive integer from the environment, def when unset.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

// deviceStatuses reads the status of every device in ids through srv.
func deviceStatuses(t *testing.T, srv *fleet.Server, ids []string) map[string]fleet.DeviceStatus {
	t.Helper()
	out := make([]fleet.DeviceStatus, len(ids))
	var g errgroup.Group
	g.SetLimit(8)
	for i, id := range ids {
		g.Go(func() (err error) {
			out[i], err = srv.DeviceStatus(context.Background(), id)
			return err
		})
	}
	require.NoError(t, g.Wait())
	m := make(map[string]fleet.DeviceStatus, len(ids))
	for _, ds := range out {
		m[ds.Device] = ds
	}
	return m
}

// TestRolloutOnPostgres rolls a new target out in waves (1% canary, 10%,
// 30%, the rest) to real agents over HTTP, through two server replicas on
// one PostgreSQL database, with faults during the rollout: one replica is
// killed (its database link, listener and connections cut at once, its
// runner stopped with no cleanup) and restarted on the same store; a tenth
// of the agents is cut off through TCP proxies (half dropped, half
// blackholed) for a while; 2% of the agents are restarted from their
// stores; and 1% of the devices fail under the new target, so that the
// 30% wave's error threshold pauses the rollout, and an abort puts the
// previous target back on every device moved. A checker then reads the
// whole history, and prints one line:
//
//	fleet checker: devices=N revisions=R faults injected: replica kills=1 partitioned agents=P agent restarts=A failing devices=F violations=0
//
// It runs a few hundred devices with a partition of a few seconds; the
// environment sets more (CONVERGE_FLEET_DEVICES=10000,
// CONVERGE_FLEET_PARTITION=30 seconds). It skips without PostgreSQL unless
// CONVERGE_REQUIRE_PG=1.
func TestRolloutOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("a few hundred agents on PostgreSQL: not in -short")
	}
	n := envInt(t, envFleetDevices, 300)
	partition := time.Duration(envInt(t, envFleetPartition, 3)) * time.Second
	// Each agent holds a long poll and a connection for its reports,
	// both ends of each in this process, and a tenth go through proxies.
	// Where the open file limit cannot cover that, the agents share
	// connections to each replica over HTTP/2 without TLS (h2c).
	multiplex := false
	if n > 1000 {
		need := uint64(6*n + 10000)
		multiplex = raiseFileLimit(t, need) < need
	}
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	begin := time.Now()
	patience := 2*time.Minute + time.Duration(n)*30*time.Millisecond + partition
	// A larger fleet polls less: its long polls wait longer, and the
	// test reads the fleet's counts less often.
	poll, tick, wait := 200*time.Millisecond, 100*time.Millisecond, 5*time.Second
	if n > 1000 {
		poll, tick, wait = time.Second, time.Second, 55*time.Second
	}
	t.Logf("%d devices, a tenth cut off for %s, connections shared over h2c: %t", n, partition, multiplex)

	// The waves' sizes, as the server cuts them (percent of n, rounded up).
	pct := func(p int) int { return max((n*p+99)/100, 1) }
	canary, ten, thirty := pct(1), pct(10), pct(30)
	moved := canary + ten + thirty // the devices the rollout moves before its pause
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("dev-%05d", i)
	}
	// Who suffers what: a tenth cut off (every tenth device), 2%
	// restarted, and 1% failing, all of these in the 30% wave, none of
	// them also cut off or restarted.
	cutOff := func(i int) bool { return i%10 == 5 }
	restarted := func(i int) bool { return i%50 == 17 }
	failing := map[string]bool{}
	nFail := max(n/100, 1)
	for k := range nFail {
		i := canary + ten + (2*k+1)*thirty/(2*nFail)
		for cutOff(i) || restarted(i) {
			i++
		}
		failing[ids[i]] = true
	}
	require.Len(t, failing, nFail)

	replicas := []*replica{
		startReplica(t, "replica-0", "127.0.0.1:0", dsn, poll, multiplex),
		startReplica(t, "replica-1", "127.0.0.1:0", dsn, poll, multiplex),
	}
	defer func() {
		for _, r := range replicas {
			r.shutdown()
		}
	}()
	tr := &http.Transport{MaxIdleConnsPerHost: n, IdleConnTimeout: time.Minute}
	if multiplex {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	defer tr.CloseIdleConnections()

	agents := make([]*fleetAgent, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, id := range ids {
		g.Go(func() error {
			tok, err := replicas[i%2].srv.Enrol(gctx, id, map[string]string{"role": "edge"})
			if err != nil {
				return err
			}
			a := &fleetAgent{d: &historyDevice{simDevice: simDevice{id: id}}, store: converge.NewMemStore(),
				server: replicas[i%2].url(), token: tok, wait: wait}
			if failing[id] {
				a.d.failOn = "v2"
			}
			agents[i] = a
			return nil
		})
	}
	require.NoError(t, g.Wait())
	for i, a := range agents {
		if cutOff(i) {
			a.proxy = newProxy(t, replicas[i%2].addr)
			a.server = "http://" + a.proxy.Addr()
		}
		a.start(t, tr)
	}
	defer func() {
		for _, a := range agents {
			a.stop()
		}
	}()

	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, id := range ids {
		g.Go(func() error {
			_, err := replicas[0].srv.SetTarget(gctx, id, fleet.Target{Desired: converge.Desired{Items: twoItems}, Payload: json.RawMessage(`{"version":"v1"}`)})
			return err
		})
	}
	require.NoError(t, g.Wait())
	t.Logf("%d devices enrolled, their agents started and given v1 in %s", n, time.Since(begin).Round(time.Millisecond))
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cs, err := replicas[1].srv.Counts(ctx)
		require.NoError(c, err)
		assert.Equal(c, []fleet.RevisionCount{{Revision: 1, State: fleet.StateReady, Devices: n}}, cs.Revisions)
	}, patience, 2*tick)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%d devices ready at v1 in %s; this process (agents, replicas, proxies): %d goroutines, heap %d MiB",
		n, time.Since(start).Round(time.Millisecond), runtime.NumGoroutine(), ms.HeapAlloc>>20)

	sp := fleet.RolloutSpec{ID: "v2", Selector: "role=edge", Items: twoItems, Payload: json.RawMessage(`{"version":"v2"}`),
		Waves: []fleet.Wave{
			{Name: "canary", Percent: 1},
			{Name: "ten percent", Percent: 10, ErrorThreshold: 2},
			{Name: "thirty percent", Percent: 30, ErrorThreshold: 2},
			{Name: "the rest", ErrorThreshold: 2},
		}}
	start = time.Now()
	st, err := replicas[1].srv.CreateRollout(ctx, sp)
	require.NoError(t, err)
	var sizes []int
	for _, w := range st.Waves {
		sizes = append(sizes, w.Devices)
	}
	require.Equal(t, []int{canary, ten, thirty, n - moved}, sizes)

	// Once the canary is through, the faults.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := replicas[1].srv.Rollout(ctx, "v2")
		require.NoError(c, err)
		assert.Equal(c, canary, st.Waves[0].Ready)
	}, patience, tick)
	t.Logf("canary ready in %s", time.Since(start).Round(time.Millisecond))

	var (
		kills           atomic.Int32
		ackedBeforeKill = map[string]uint64{} // device: revision of its last acknowledged report
		ackedByKilled   int                   // reports the killed replica acknowledged
		restartedOK     atomic.Int32
		restartViolates []string
	)
	faults := errgroup.Group{}
	faults.Go(func() error { // a tenth of the agents cut off, half dropped, half hung
		k := 0
		for _, a := range agents {
			if a.proxy != nil {
				a.proxy.Partition([]convergetest.PartitionMode{convergetest.PartitionFail, convergetest.PartitionHang}[k%2])
				k++
			}
		}
		time.Sleep(partition)
		for _, a := range agents {
			if a.proxy != nil {
				a.proxy.Partition(convergetest.PartitionNone)
			}
		}
		return nil
	})
	faults.Go(func() error { // replica 0 killed, then restarted at its address
		time.Sleep(partition / 4)
		old := replicas[0]
		old.kill()
		kills.Add(1)
		for i, a := range agents {
			body, rev, count := a.acks.lastReport()
			if body != nil {
				ackedBeforeKill[a.d.id] = rev
			}
			if i%2 == 0 {
				ackedByKilled += count
			}
		}
		time.Sleep(time.Second)
		replicas[0] = startReplica(t, old.owner, old.addr, dsn, poll, multiplex)
		return nil
	})
	faults.Go(func() error { // 2% of the agents restarted from their stores
		for i, a := range agents {
			if !restarted(i) {
				continue
			}
			a.stop()
			rev, err := a.storedRevision(ctx)
			if err != nil {
				return err
			}
			a.start(t, tr)
			// The restarted agent's first poll names the stored revision.
			deadline := time.Now().Add(patience)
			for a.link.firstETag() == "" && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := a.link.firstETag(); got == fleet.ETag(rev) {
				restartedOK.Add(1)
			} else {
				restartViolates = append(restartViolates, fmt.Sprintf("%s resumed with If-None-Match %s, its store has revision %d", a.d.id, got, rev))
			}
			time.Sleep(partition / time.Duration(max(n/50, 1)))
		}
		return nil
	})
	require.NoError(t, faults.Wait())
	t.Logf("faults over in %s", time.Since(start).Round(time.Millisecond))

	// Nothing a replica acknowledged before the kill is lost: the
	// restarted replica reads, for every device, a report at least as new.
	lost := 0
	afterRestart := deviceStatuses(t, replicas[0].srv, ids)
	for id, rev := range ackedBeforeKill {
		if ds := afterRestart[id]; ds.Reported < rev {
			lost++
			t.Errorf("violation: %s: the server holds a report for revision %d after the restart, revision %d was acknowledged before", id, ds.Reported, rev)
		}
	}
	require.Positive(t, ackedByKilled, "the killed replica acknowledged reports")

	var paused fleet.RolloutStatus
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		paused, err = replicas[1].srv.Rollout(ctx, "v2")
		require.NoError(c, err)
		assert.Equal(c, fleet.RolloutPaused, paused.State)
	}, patience, tick)
	t.Logf("paused in %s: %s", time.Since(start).Round(time.Millisecond), paused.Reason)
	assert.Contains(t, paused.Reason, "thirty percent reached its error threshold")
	assert.Equal(t, n-moved, paused.Waves[3].Pending, "no device of the last wave moved")
	assert.Equal(t, fleet.WaveRunning, paused.Waves[2].State)
	assert.Equal(t, fleet.WavePending, paused.Waves[3].State)
	// Every failing device reports its failure before the abort.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for id := range failing {
			ds, err := replicas[1].srv.DeviceStatus(ctx, id)
			require.NoError(c, err)
			assert.Equal(c, fleet.StateFailed, ds.State, id)
		}
	}, patience, tick)

	// The operator aborts, through the API of the restarted replica, and
	// asks for the previous target back.
	abortAt := time.Now()
	req, err := http.NewRequest("POST", replicas[0].url()+"/v1/admin/rollouts/v2/abort", strings.NewReader(`{"reason":"v2 fails on some devices","restore":true}`))
	require.NoError(t, err)
	req.Header.Set(adminHeader, "yes")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var done fleet.RolloutStatus
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		done, err = replicas[0].srv.Rollout(ctx, "v2")
		require.NoError(c, err)
		assert.Equal(c, fleet.RolloutAborted, done.State)
		assert.True(c, done.Finished)
	}, patience, tick)
	t.Logf("aborted and restored in %s", time.Since(abortAt).Round(time.Millisecond))
	assert.Equal(t, moved, done.Restored, "every device of the first three waves got v1 back")

	// Every device ends ready at its last target: v1, restored or never
	// moved, and its agent saw its last report acknowledged.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cs, err := replicas[0].srv.Counts(ctx)
		require.NoError(c, err)
		assert.Equal(c, []fleet.RevisionCount{
			{Revision: 1, State: fleet.StateReady, Devices: n - moved},
			{Revision: 3, State: fleet.StateReady, Devices: moved},
		}, cs.Revisions)
		for i, a := range agents {
			want := uint64(1)
			if i < moved {
				want = 3
			}
			_, rev, _ := a.acks.lastReport()
			assert.Equal(c, want, rev, a.d.id)
		}
	}, patience, 2*tick)
	t.Logf("every device ready at its last target %s after the rollout began", time.Since(start).Round(time.Millisecond))

	// The checker, over the whole history.
	violations := lost + len(restartViolates)
	for _, v := range restartViolates {
		t.Errorf("violation: %s", v)
	}
	violate := func(format string, args ...any) {
		violations++
		t.Errorf("violation: "+format, args...)
	}
	logger := slog.New(slog.DiscardHandler)
	revisions, partitioned, failed := 0, 0, 0
	final := deviceStatuses(t, replicas[1].srv, ids)
	for i, a := range agents {
		id := a.d.id
		hist := a.d.history()
		revisions += len(hist)
		ds := final[id]
		want := uint64(1) // never moved: the first target
		if i < moved {
			want = 3 // moved (2), then restored (3)
		}
		for j, h := range hist {
			if j > 0 && h.rev <= hist[j-1].rev {
				violate("%s applied revision %d after %d", id, h.rev, hist[j-1].rev)
			}
			if h.version == "v2" && i >= moved {
				violate("%s of the last wave applied the new target (revision %d)", id, h.rev)
			}
			if j > 0 && h.version == "v1" && hist[j-1].version == "v2" && (h.rev != ds.Target || h.at.Before(abortAt)) {
				violate("%s went back to v1 at revision %d (%s), not by the abort's restore (revision %d, %s)", id, h.rev, h.at, ds.Target, abortAt)
			}
		}
		if len(hist) == 0 {
			violate("%s applied nothing", id)
			continue
		}
		last := hist[len(hist)-1]
		if ds.Target != want || last.rev != want || last.version != "v1" {
			violate("%s ends at revision %d (%s), the server has %d, want %d", id, last.rev, last.version, ds.Target, want)
		}
		body, _, _ := a.acks.lastReport()
		rep, err := converge.DecodeEdgeReport(body, converge.DecodeLimits{})
		if err != nil {
			violate("%s: last acknowledged report unreadable: %v", id, err)
			continue
		}
		derived, err := converge.DeriveStatus(converge.Desired{Revision: rep.Revision, Items: twoItems}, rep, logger)
		require.NoError(t, err)
		x, _ := json.Marshal(derived)
		y, _ := json.Marshal(ds.Status)
		if rep.Revision != ds.Reported || !bytes.Equal(x, y) {
			violate("%s: central status %s, derived from its last acknowledged report %s", id, y, x)
		}
		if a.proxy != nil && a.proxy.Cuts() > 0 {
			partitioned++
		}
		if failing[id] && a.acks.failedAt(2) {
			failed++
		}
	}
	t.Logf("fleet checker: devices=%d revisions=%d faults injected: replica kills=%d partitioned agents=%d agent restarts=%d failing devices=%d violations=%d",
		n, revisions, kills.Load(), partitioned, restartedOK.Load(), failed, violations)
	assert.Zero(t, violations)
	assert.Equal(t, int32(1), kills.Load())
	wantCut, wantRestarts := 0, 0
	for i := range n {
		if cutOff(i) {
			wantCut++
		}
		if restarted(i) {
			wantRestarts++
		}
	}
	assert.Equal(t, wantCut, partitioned, "every agent cut off met the cut")
	assert.Positive(t, partitioned)
	assert.Equal(t, int32(wantRestarts), restartedOK.Load())
	assert.Positive(t, restartedOK.Load())
	assert.Equal(t, nFail, failed, "every failing device reported its failure")
}

// newProxy starts a convergetest.Proxy to target, closed when the test
// ends: between an agent and its server replica, or between a replica
// and PostgreSQL.
func newProxy(t testing.TB, target string) *convergetest.Proxy {
	t.Helper()
	p, err := convergetest.NewProxy(target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}
