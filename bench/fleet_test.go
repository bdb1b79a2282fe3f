package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/fleet"
)

// The benchmarks of the fleet link (fleet*_test.go) measure the fleet
// server and its agents over real HTTP on loopback, each beside a floor in
// the same run: a bare net/http handler doing the least work of the same
// kind (reading the same bytes, writing one row per report in batches to
// the same kind of store, parking a request), with clients sending the
// same bytes. The CPU figures (cpu-µs/...) count client and server, as
// the PostgreSQL benchmarks do: BenchmarkFleetReports runs both in this
// process; the others run their clients in a child process
// (fleetchild_test.go) and report each side too.

// fleetItems is the number of items in a device's target, as in the
// fleet's tests at scale: five in-memory items per simulated device.
const fleetItems = 5

// fleetStores are the store kinds the fleet benchmarks run on: MemStore,
// and boltstore (one file, batched fsynced commits).
var fleetStores = []string{"mem", "bolt"}

// openFleetStore opens a store of kind in b's temporary directory.
func openFleetStore(b *testing.B, kind string) interface {
	converge.Queue
	converge.Creator
} {
	b.Helper()
	switch kind {
	case "mem":
		return converge.NewMemStore()
	case "bolt":
		st, err := boltstore.Open(filepath.Join(b.TempDir(), "fleet.db"), boltstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		return st
	}
	b.Fatalf("no store kind %q", kind)
	return nil
}

// fleetDeviceID names the i-th simulated device.
func fleetDeviceID(i int) string { return fmt.Sprintf("dev-%05d", i) }

// fleetDeviceIndex is the index in a device ID, -1 if it has none.
func fleetDeviceIndex(id string) int {
	if len(id) != len("dev-00000") {
		return -1
	}
	i, err := strconv.Atoi(id[len("dev-"):])
	if err != nil {
		return -1
	}
	return i
}

// fleetTarget is a device's target at version v: fleetItems items present,
// and a payload naming the version.
func fleetTarget(v int) fleet.Target {
	items := make([]converge.DesiredItem, fleetItems)
	for i := range items {
		items[i] = converge.DesiredItem{ID: converge.ID(fmt.Sprintf("app-%d", i)), Presence: converge.Present}
	}
	return fleet.Target{Desired: converge.Desired{Items: items}, Payload: json.RawMessage(fmt.Sprintf(`{"version":"v%d"}`, v))}
}

// fleetReportBody is the report an agent sends after a pass that
// converged target t at revision rev (fleet.PassReport, as JSON).
func fleetReportBody(t fleet.Target, rev uint64) []byte {
	t.Desired.Revision = rev
	rep := fleet.PassReport(t.Desired, converge.TargetEvent{Kind: converge.TargetPassFinished, Revision: 1})
	body, err := json.Marshal(rep)
	if err != nil {
		panic("bench: " + err.Error()) // a report always marshals
	}
	return body
}

// fleetTargetBody is the body of the target a device reads from the
// fleet server (GET .../target), for a floor to send as many bytes.
func fleetTargetBody(b testing.TB, v int) []byte {
	b.Helper()
	ctx := context.Background()
	s, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	id := fleetDeviceID(0)
	tok, err := s.Enrol(ctx, id, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.SetTarget(ctx, id, fleetTarget(v)); err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/devices/"+id+"/target", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("target read: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// fleetServe serves h on a loopback port with the fleet's HTTP timeouts
// (fleet.NewHTTPServer's) and returns its base URL; the server is closed
// (listener and connections) at the end of b.
func fleetServe(b *testing.B, h http.Handler) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: fleet.HTTPReadHeaderTimeout,
		ReadTimeout:       fleet.HTTPReadTimeout,
		WriteTimeout:      fleet.DefaultMaxWait + fleet.HTTPWriteMargin,
		IdleTimeout:       fleet.HTTPIdleTimeout,
		MaxHeaderBytes:    fleet.HTTPMaxHeaderBytes,
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(ln) }()
	b.Cleanup(func() { _ = hs.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// fleetTransport is an HTTP transport keeping up to conns connections
// to one host alive, as many devices each keep their own; it is closed at
// the end of b.
func fleetTransport(b *testing.B, conns int) *http.Transport {
	tr := newFleetTransport(conns)
	b.Cleanup(tr.CloseIdleConnections)
	return tr
}

// newFleetTransport is fleetTransport's transport, for the caller to
// close.
func newFleetTransport(conns int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// fleetFloorBatch is the most rows the floor's writer puts in one write.
const fleetFloorBatch = 512

// floorSink is the writing half of the floors: it writes one row per
// report, in batches (every report that arrived while the last batch was
// written, up to fleetFloorBatch), each batch one CreateMany, and answers
// each report's writer when its batch is written.
type floorSink struct {
	st  converge.Creator
	in  chan floorRow
	seq atomic.Uint64
	wg  sync.WaitGroup
}

type floorRow struct {
	key   string
	value []byte
	done  chan error
}

func newFloorSink(st converge.Creator) *floorSink {
	s := &floorSink{st: st, in: make(chan floorRow, fleetFloorBatch)}
	s.wg.Add(1)
	go s.loop()
	return s
}

// write stores value as a new row of device id and returns once it is
// written.
func (s *floorSink) write(id string, value []byte) error {
	r := floorRow{key: "floor/reports/" + id + "/" + strconv.FormatUint(s.seq.Add(1), 10), value: value, done: make(chan error, 1)}
	s.in <- r
	return <-r.done
}

func (s *floorSink) loop() {
	defer s.wg.Done()
	rows := make([]floorRow, 0, fleetFloorBatch)
	recs := make([]converge.NewRecord, 0, fleetFloorBatch)
	for r := range s.in {
		rows = append(rows[:0], r)
	more:
		for len(rows) < fleetFloorBatch {
			select {
			case r, ok := <-s.in:
				if !ok {
					break more
				}
				rows = append(rows, r)
			default:
				break more
			}
		}
		recs = recs[:0]
		for _, r := range rows {
			recs = append(recs, converge.NewRecord{Key: r.key, Value: r.value})
		}
		_, err := s.st.CreateMany(context.Background(), recs)
		for _, r := range rows {
			r.done <- err
		}
	}
}

func (s *floorSink) close() { close(s.in); s.wg.Wait() }

// floorReport is the floor's report handler: it reads the body up to the
// fleet server's cap and writes it as one row.
func (s *floorSink) floorReport(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, fleet.DefaultMaxBody+1))
	if err != nil || len(body) > fleet.DefaultMaxBody {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if err := s.write(r.PathValue("id"), body); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// putReport sends body as device id's report with its token.
func putReport(ctx context.Context, c *http.Client, base, id, token string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/devices/"+id+"/report", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusNoContent {
		return fmt.Errorf("report of %s: %d %s", id, res.StatusCode, msg)
	}
	return nil
}

const (
	// fleetReportDevices is the number of devices reporting in
	// BenchmarkFleetReports, fleetReportClients how many send at once
	// (each to its own devices, over its own connection).
	fleetReportDevices = 1000
	fleetReportClients = 32
)

// BenchmarkFleetReports is the fleet server taking reports: over loopback
// HTTP, fleetReportClients clients send b.N EdgeReports (PUT
// /v1/devices/{id}/report, each with its device's credential) for
// fleetReportDevices enrolled devices, each report the one an agent sends
// after a pass that converged its target of fleetItems items. The server
// authenticates each (a read of the device and a hash), applies its rate
// limit (set high enough to refuse nothing), decodes the report strictly,
// reads the target and the held report, writes the report with a version
// check and derives the device's status. Beside its floor
// (BenchmarkFleetReportsFloor), per store kind; cpu-µs/report is the CPU
// of this process (clients and server) per report.
func BenchmarkFleetReports(b *testing.B) {
	for _, kind := range fleetStores {
		b.Run("store="+kind, func(b *testing.B) { benchFleetReports(b, kind, false) })
	}
}

// BenchmarkFleetReportsFloor is the floor of BenchmarkFleetReports: the
// same clients send the same bodies, with the same headers, to a bare
// net/http handler that reads each body (to the same cap) and writes it
// as one new row, in batches (floorSink), to the same kind of store, and
// answers once its batch is written. No credential, no decoding, no
// version check, no status.
func BenchmarkFleetReportsFloor(b *testing.B) {
	for _, kind := range fleetStores {
		b.Run("store="+kind, func(b *testing.B) { benchFleetReports(b, kind, true) })
	}
}

func benchFleetReports(b *testing.B, kind string, floor bool) {
	ctx := context.Background()
	st := openFleetStore(b, kind)
	ids := make([]string, fleetReportDevices)
	tokens := make([]string, len(ids))
	bodies := make([][]byte, len(ids))
	body := fleetReportBody(fleetTarget(1), 1)
	for i := range bodies {
		bodies[i] = body
	}
	var base string
	if floor {
		sink := newFloorSink(st)
		b.Cleanup(sink.close)
		mux := http.NewServeMux()
		mux.HandleFunc("PUT /v1/devices/{id}/report", sink.floorReport)
		base = fleetServe(b, mux)
		for i := range ids {
			ids[i], tokens[i] = fleetDeviceID(i), fleetDeviceID(i)+"."+strings.Repeat("x", 43) // as long as a credential
		}
	} else {
		s, err := fleet.NewServer(fleet.Config{Store: st, Logger: slog.New(slog.DiscardHandler), Rate: 1e9, Burst: 1e9})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		base = fleetServe(b, s)
		err = parallel(len(ids), func(i int) error {
			ids[i] = fleetDeviceID(i)
			tok, err := s.Enrol(ctx, ids[i], nil)
			if err != nil {
				return err
			}
			tokens[i] = tok
			rev, err := s.SetTarget(ctx, ids[i], fleetTarget(1))
			if err == nil && rev != 1 {
				err = fmt.Errorf("device %s: revision %d, want 1", ids[i], rev)
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	client := &http.Client{Transport: fleetTransport(b, fleetReportClients)}
	per := len(ids) / fleetReportClients
	// A first report of each device, untimed: the timed ones replace it.
	if err := parallel(len(ids), func(i int) error { return putReport(ctx, client, base, ids[i], tokens[i], bodies[i]) }); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := clientCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make([]error, fleetReportClients)
	for w := range fleetReportClients {
		n := b.N / fleetReportClients
		if w < b.N%fleetReportClients {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range n {
				d := w + (j%per)*fleetReportClients
				if err := putReport(ctx, client, base, ids[d], tokens[d], bodies[d]); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := clientCPU() - cpu0
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/report")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reports/s")
}
