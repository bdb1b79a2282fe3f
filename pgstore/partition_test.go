package pgstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestPartitionSchedulesNeverOverlapOnPostgres runs three replicas on one
// database, each through a TCP proxy that drops, blackholes or delays its
// connections (the real-world partition), through 100 randomized
// schedules of partitions, heals, kills, slow links and clock steps, and
// checks that no object is ever handled by two replicas at once, and
// that no more handlers than the limit run at once in the limited state
// (the limit checker), and no more objects enter it in any span of
// Burst×Every than its Burst (the rate checker), both of which they
// reach. The schedules run in real time, several at once, each on a
// controller kind of its own.
func TestPartitionSchedulesNeverOverlapOnPostgres(t *testing.T) {
	const (
		schedules = 100
		parallel  = 20
		ttl       = 2 * time.Second
		limit     = 2
		// The entry rate into the limited state: at most burst entries
		// in any span of burst×every, one LeaseTTL.
		burst = 2
		every = ttl / 2
	)
	dsn := pgtest.DSN(t)
	// Few connections per replica, so 20 schedules of 3 replicas fit in
	// the server's connections.
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("pool_max_conns", "2")
	u.RawQuery = q.Encode()
	dsn = u.String()
	// The schema is made once, before replicas race to make it.
	open(t, dsn, pgstore.Options{})

	var mu sync.Mutex
	runs, faults, overlaps := 0, 0, 0
	var total convergetest.ScheduleResult
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for seed := range uint64(schedules) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := pgSchedule(t, dsn, seed, ttl, limit, every, burst)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("schedule %d: %v", seed, err)
				return
			}
			if res.Runs == 0 {
				t.Errorf("schedule %d ran no handler", seed)
			}
			if err := res.Err(); err != nil {
				t.Errorf("schedule %d: %v", seed, err)
			}
			runs += res.Runs
			faults += res.Faults
			overlaps += len(res.Overlaps)
			total.Partitions += res.Partitions
			total.Kills += res.Kills
			total.ClockSteps += res.ClockSteps
			total.Slowdowns += res.Slowdowns
			total.MostAtOnce = max(total.MostAtOnce, res.MostAtOnce)
			total.Entries += res.Entries
			total.MostInWindow = max(total.MostInWindow, res.MostInWindow)
		})
	}
	wg.Wait()
	t.Logf("partition checker on pgstore: %d schedules run, %d handler runs checked, %d faults injected, %d overlaps",
		schedules, runs, faults, overlaps)
	t.Attr("schedules", strconv.Itoa(schedules))
	t.Attr("handler_runs", strconv.Itoa(runs))
	t.Attr("overlaps", strconv.Itoa(overlaps))
	require.Zero(t, overlaps)
	t.Logf("limit checker: store=pgstore handler runs=%d faults=%d (partitions=%d kills=%d clock steps=%d slowdowns=%d) largest concurrency in %s=%d limit=%d",
		runs, faults, total.Partitions, total.Kills, total.ClockSteps, total.Slowdowns, convergetest.LimitedState, total.MostAtOnce, limit)
	t.Attr("largest_concurrency", strconv.Itoa(total.MostAtOnce))
	require.LessOrEqual(t, total.MostAtOnce, limit, "never above the limit")
	require.Equal(t, limit, total.MostAtOnce, "the limit was reached: the check is not vacuous")
	// Entries are timed around the store's answer, read beneath the
	// proxy's faults but through it: a slow link widens an entry's span,
	// which then counts in fewer windows (convergetest.Entries.MostIn).
	t.Logf("rate checker: store=pgstore entries into %s=%d largest in one %s window=%d limit=%d per %s (Every=%s Burst=%d)",
		convergetest.LimitedState, total.Entries, burst*every, total.MostInWindow, burst, burst*every, every, burst)
	t.Attr("entries", strconv.Itoa(total.Entries))
	t.Attr("largest_entries_in_window", strconv.Itoa(total.MostInWindow))
	require.LessOrEqual(t, total.MostInWindow, burst, "never above the entry rate")
	require.Equal(t, burst, total.MostInWindow, "the entry rate was reached: the check is not vacuous")
}

// openMu makes the schedules open their stores one at a time.
var openMu sync.Mutex

// pgSchedule runs one schedule of three replicas, each on a store of its
// own behind a proxy of its own, with limit on the handlers at once in
// convergetest.LimitedState, and at most burst entries into it in any span
// of burst×every.
func pgSchedule(t *testing.T, dsn string, seed uint64, ttl time.Duration, limit int, every time.Duration, burst int) (convergetest.ScheduleResult, error) {
	var stores []converge.Queue
	var links []convergetest.Link
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for range 3 {
		p, via := newProxyNoCleanup(dsn)
		if p == nil {
			return convergetest.ScheduleResult{}, fmt.Errorf("proxy: %s", via)
		}
		closers = append(closers, func() { _ = p.Close() })
		// One Open at a time: each takes the migration lock. The
		// statement timeout is left well above the lease: the renew
		// deadline, not the store, must stop a cut-off replica.
		openMu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		st, err := pgstore.Open(ctx, via, pgstore.Options{StatementTimeout: 10 * time.Second})
		cancel()
		openMu.Unlock()
		if err != nil {
			return convergetest.ScheduleResult{}, err
		}
		closers = append([]func(){func() { st.Close() }}, closers...) // stores close before proxies
		stores = append(stores, st)
		links = append(links, p)
	}
	return convergetest.RunSchedule(context.Background(), convergetest.Schedule{
		Seed: seed, Stores: stores, Links: links, LeaseTTL: ttl, Length: 4 * ttl, Limit: limit,
		Every: every, Burst: burst,
	})
}
