package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergekit/converge/fleet"
)

// The clients of the fleet benchmarks that hold a connection per device
// (the agents of a rollout, the idle long polls, the floors' clients) run
// in a child process: this test binary again, told so by fleetChildEnv.
// Each process then holds one end of each connection, so ten thousand
// devices fit in the open-file limit (which this machine does not let a
// process raise), the server's memory is measured without its clients',
// and the clients' CPU (read from /proc) is told from the server's.

// fleetChildEnv, set in a child's environment, makes TestMain run the
// child (runFleetChild) instead of the tests.
const fleetChildEnv = "CONVERGE_BENCH_FLEET_CHILD"

// fleetChildProfileEnv, set in the benchmark's environment, names a file
// each child writes its CPU profile to (the name, a dash, and the child's
// process ID), to tell where the clients' CPU goes.
const fleetChildProfileEnv = "CONVERGE_BENCH_FLEET_CHILD_CPUPROFILE"

// fleetChildIdleConns caps the idle connections a child keeps (its
// clients share one transport). The server's process holds one end of
// every connection within an open-file limit of 20,000 here: ten
// thousand long polls, and no more than this many idle connections that
// reports came on, which the next reports take (an agent's report cannot
// take its own long poll's connection, which waits again).
const fleetChildIdleConns = 2000

// childSpec is what a child is asked to do; it reads it as the first line
// of its standard input.
type childSpec struct {
	// Mode: "agents" (simulated devices: an agent and its reconciler
	// each, long-polling with Wait), "floor" (a client per device that
	// parks one GET and sends one PUT per round), "pollfloor" (a client
	// per device in a loop of GETs answered 304) or "idle" (a raw
	// connection per device that sends its request in Reqs and waits).
	Mode   string        `json:"mode"`
	Base   string        `json:"base,omitempty"`
	Addr   string        `json:"addr,omitempty"`
	Wait   time.Duration `json:"wait,omitempty"`
	IDs    []string      `json:"ids,omitempty"`
	Tokens []string      `json:"tokens,omitempty"`
	Reqs   [][]byte      `json:"reqs,omitempty"`
}

// fleetChild is a running child process.
type fleetChild struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	exited chan struct{}
}

// startFleetChild starts a child doing spec and waits until it says it
// is ready; it is stopped (its standard input closed) at the end of b.
func startFleetChild(b *testing.B, spec childSpec) *fleetChild {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), fleetChildEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &fleetChild{cmd: cmd, in: in, out: bufio.NewReader(out), exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.exited) }()
	b.Cleanup(c.stop)
	if err := json.NewEncoder(in).Encode(spec); err != nil {
		b.Fatal(err)
	}
	c.expect(b, "ready")
	return c
}

// expect reads the child's next line, which must be want.
func (c *fleetChild) expect(b *testing.B, want string) {
	b.Helper()
	line, err := c.out.ReadString('\n')
	if strings.TrimSpace(line) != want {
		b.Fatalf("fleet child: said %q (%v), want %q", line, err, want)
	}
}

// send writes a line to the child.
func (c *fleetChild) send(b *testing.B, line string) {
	b.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		b.Fatal(err)
	}
}

// cpu is the CPU time the child used so far.
func (c *fleetChild) cpu() time.Duration { return serverCPU(c.cmd.Process.Pid) }

// failed says whether the child exited (it exits early only on an error,
// which it writes to standard error).
func (c *fleetChild) failed() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// stop closes the child's input, which ends it, and waits for it.
func (c *fleetChild) stop() {
	_ = c.in.Close()
	select {
	case <-c.exited:
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// runFleetChild is the child's main: it reads its spec, does it, says
// "ready", and goes on until its standard input ends.
func runFleetChild() int {
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet child: no spec:", err)
		return 2
	}
	var spec childSpec
	if err := json.Unmarshal(line, &spec); err != nil {
		fmt.Fprintln(os.Stderr, "fleet child: spec:", err)
		return 2
	}
	if name := os.Getenv(fleetChildProfileEnv); name != "" {
		f, err := os.Create(fmt.Sprintf("%s-%d", name, os.Getpid()))
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet child: profile:", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "fleet child:", spec.Mode+":", err)
		os.Exit(1)
	}
	tr := newFleetTransport(min(2*max(len(spec.IDs), 1), fleetChildIdleConns))
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: max(spec.Wait, fleet.DefaultAgentWait) + time.Minute}
	var wg sync.WaitGroup
	var rounds []chan int
	switch spec.Mode {
	case "agents":
		logger := slog.New(slog.DiscardHandler)
		for i, id := range spec.IDs {
			if err := startSimAgent(ctx, &wg, spec.Base, id, spec.Tokens[i], client, spec.Wait, logger); err != nil {
				fail(err)
			}
		}
	case "floor":
		rounds = make([]chan int, len(spec.IDs))
		for i, id := range spec.IDs {
			rounds[i] = make(chan int, 1)
			wg.Go(func() {
				for rev := range rounds[i] {
					if err := floorRound(ctx, client, spec.Base, id, spec.Tokens[i], uint64(rev)); err != nil && ctx.Err() == nil {
						fail(err)
					}
				}
			})
		}
	case "pollfloor":
		for i, id := range spec.IDs {
			wg.Go(func() { floorPolls(ctx, client, spec.Base, id, spec.Tokens[i], spec.Wait) })
		}
	case "idle":
		conns := make([]net.Conn, len(spec.Reqs))
		for i, req := range spec.Reqs {
			c, err := net.Dial("tcp", spec.Addr)
			if err != nil {
				fail(err)
			}
			conns[i] = c
			if _, err := c.Write(req); err != nil {
				fail(err)
			}
		}
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
	default:
		fail(fmt.Errorf("no mode %q", spec.Mode))
	}
	fmt.Println("ready")
	// Commands until the input ends: "round N" starts round N of the
	// floor's clients.
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			break
		}
		if rev, ok := strings.CutPrefix(strings.TrimSpace(line), "round "); ok {
			n, err := strconv.Atoi(rev)
			if err != nil {
				fail(err)
			}
			for _, r := range rounds {
				r <- n
			}
		}
	}
	for _, r := range rounds {
		close(r)
	}
	cancel()
	wg.Wait()
	return 0
}

// floorRound is one round of a floor client: it parks a GET of the
// target after revision rev-1, reads the answer, and sends the report of
// revision rev.
func floorRound(ctx context.Context, client *http.Client, base, id, token string, rev uint64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/devices/"+id+"/target?wait=30s", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("If-None-Match", fleet.ETag(rev-1))
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		return fmt.Errorf("floor GET: %d %v", res.StatusCode, err)
	}
	return putReport(ctx, client, base, id, token, fleetReportBody(fleetTarget(int(rev)), rev))
}

// floorPolls is a floor client polling until ctx ends.
func floorPolls(ctx context.Context, client *http.Client, base, id, token string, wait time.Duration) {
	url := base + "/v1/devices/" + id + "/target?wait=" + wait.String()
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("If-None-Match", fleet.ETag(1))
		res, err := client.Do(req)
		if err != nil {
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
}
