package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The per-object accounting of the PostgreSQL benchmarks, counted the
// same way for converge and River: round trips (every query, exec and
// batch a pool sends, by a pgx tracer on the pools of the timed side),
// write transactions (transaction ids the server assigned: only a
// transaction that writes gets one) and CPU time of the client (this
// process) and of the server (the processes of the cluster's
// postmaster, from /proc), each over the timed span, per object.

// roundTrips counts the round trips of the pools it traces.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// tracedPool opens a pool on dsn whose round trips rt counts.
func tracedPool(b *testing.B, ctx context.Context, dsn string, rt *roundTrips) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.Tracer = rt
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// pgUsage is the state of the counters at the start of a timed span.
type pgUsage struct {
	dsn       string
	rt        *roundTrips
	rt0       int64
	xid0      int64
	client0   time.Duration
	server0   time.Duration
	postmastr int
}

// startUsage reads the counters; call it right before the timed span.
func startUsage(b *testing.B, ctx context.Context, dsn string, rt *roundTrips) *pgUsage {
	b.Helper()
	u := &pgUsage{dsn: dsn, rt: rt}
	var dir string
	u.xid0, dir = serverState(b, ctx, dsn)
	pid, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		b.Fatal(err)
	}
	u.postmastr, err = strconv.Atoi(strings.SplitN(string(pid), "\n", 2)[0])
	if err != nil {
		b.Fatal(err)
	}
	u.rt0 = rt.n.Load()
	u.client0, u.server0 = clientCPU(), serverCPU(u.postmastr)
	return u
}

// report reports the counters' growth since start, per object of n;
// call it right after the timed span.
func (u *pgUsage) report(b *testing.B, ctx context.Context, n int) {
	b.Helper()
	client, server, rt := clientCPU(), serverCPU(u.postmastr), u.rt.n.Load()
	xid, _ := serverState(b, ctx, u.dsn)
	per := func(v float64) float64 { return v / float64(n) }
	b.ReportMetric(per(float64(rt-u.rt0)), "roundtrips/object")
	b.ReportMetric(per(float64(xid-u.xid0)), "writetx/object")
	b.ReportMetric(per(float64((client - u.client0).Microseconds())), "client-µs/object")
	b.ReportMetric(per(float64((server - u.server0).Microseconds())), "server-µs/object")
	b.ReportMetric(per(float64((client - u.client0 + server - u.server0).Microseconds())), "cpu-µs/object")
}

// serverState returns the next transaction id and the data directory.
// Reading it takes no transaction id.
func serverState(b *testing.B, ctx context.Context, dsn string) (int64, string) {
	b.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var xid int64
	var dir string
	if err := conn.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, current_setting('data_directory')`).Scan(&xid, &dir); err != nil {
		b.Fatal(err)
	}
	return xid, dir
}

// clientCPU is the CPU time of this process.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time of the postmaster and its children alive now
// (a child that exited meanwhile, an autovacuum worker say, is missed).
func serverCPU(postmaster int) time.Duration {
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	entries, _ := os.ReadDir("/proc")
	var total time.Duration
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command, which is in parentheses: state, ppid,
		// ... utime is the 14th field, stime the 15th.
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		if pid != postmaster && ppid != postmaster {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * tick
	}
	return total
}
