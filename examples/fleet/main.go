// Command fleet is a fleet controller in miniature: 500 simulated hosts move
// through their lifecycle (new -> provisioning -> installing -> ready) under
// one controller.Controller. Provisioning fails transiently now and then (the
// controller retries with per-host backoff); installing waits for the host
// to report, as a real agent would. The program prints the number of hosts
// per state as the fleet converges, then one host's history.
//
// Some hosts do not go smoothly. Two have a failed disk: their provisioning
// fails every time, and after 10 failures in a row the controller
// quarantines them (it stops retrying) until the operator, having
// replaced the disks, releases them. One host's install agent is slow: it
// stays installing longer than the state's SLA, and the controller reports
// it once when the SLA runs out and once more when the host leaves the
// state.
//
// The hosts' states and histories are kept in a durable store: PostgreSQL
// when a DSN is given (-pg, or CONVERGE_PG_DSN), where several copies of
// the program may run at once as replicas sharing the work; otherwise the
// embedded boltstore file named by -state (a temporary one by default). A
// second run on the same store resumes where the first one stopped.
//
// With -http, the program serves the status page (package statuspage)
// while the fleet converges, and afterwards until it is interrupted: the
// hosts per state with the SLA breaches, the quarantined hosts, and each
// host's history, as HTML or, with "Accept: application/json", as JSON.
//
//	go run ./examples/fleet
//	go run ./examples/fleet -state /tmp/fleet.db
//	go run ./examples/fleet -http localhost:8080
//	go run ./examples/fleet -log    # and log the quarantines to stderr
//	CONVERGE_PG_DSN=postgres://... go run ./examples/fleet
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/examples/internal/cli"
	"github.com/convergekit/converge/examples/internal/stores"
	"github.com/convergekit/converge/statuspage"
)

const hosts = 500

// Lifecycle states of a host.
const (
	stateNew          controller.State = "new"
	stateProvisioning controller.State = "provisioning"
	stateInstalling   controller.State = "installing"
	stateReady        controller.State = "ready"
)

var (
	errProviderBusy = errors.New("provider: try again")
	errDiskFailed   = errors.New("disk failed")
)

// What does not go smoothly: hosts with a failed disk, and a slow agent.
var (
	badDisks  = []string{"host-013", "host-404"}
	slowAgent = "host-042"
)

const (
	// installSLA is how long a host should take to install.
	installSLA = 2 * time.Second
	// quarantineAfter is how many provisioning failures in a row
	// quarantine a host: the provider refuses one request in five, so
	// ten in a row means something else is wrong.
	quarantineAfter = 10
)

func main() {
	var opts stores.Options
	flag.StringVar(&opts.DSN, "pg", os.Getenv(stores.DSNEnv), "PostgreSQL DSN of the shared store (default $"+stores.DSNEnv+")")
	flag.StringVar(&opts.Path, "state", "", "embedded store file when no DSN is given (default: a temporary file)")
	addr := flag.String("http", "", "serve the status page on this address (host:port) until interrupted")
	logHalts := flag.Bool("log", false, "log to stderr the hosts the controller gives up on")
	cli.Parse("fleet", "[-state file | -pg dsn] [-http host:port] [-log]",
		"Moves 500 simulated hosts through their lifecycle under one controller. Hosts with a\n"+
			"failed disk stay quarantined until an operator releases them: with -http, from the status\n"+
			"page (which also serves /metrics, /healthz and /readyz), else with -release-quarantined.")
	var logger *slog.Logger
	if *logHalts {
		// Halts are logged at Error; every handler run at Debug, Info
		// or Warn.
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	if err := serve(os.Stdout, opts, *addr, logger); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// serve runs the fleet and, when addr is not empty, serves its status page
// on addr while it converges and afterwards, until an interrupt; logger,
// when not nil, receives the controller's log.
func serve(out io.Writer, opts stores.Options, addr string, logger *slog.Logger) error {
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(sigCtx, time.Minute)
	defer cancel()
	if addr == "" {
		return run(ctx, out, opts, pageHooks{}, logger)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close() // when run fails before the page is served
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	served <- http.ErrServerClosed // until the page is served
	err = run(ctx, out, opts, pageHooks{
		start: func(h http.Handler) {
			<-served
			srv.Handler = h
			go func() { served <- srv.Serve(ln) }()
			fmt.Fprintf(out, "status page on http://%s/\n", ln.Addr())
		},
		converged: func(http.Handler) {
			fmt.Fprintln(out, "the status page stays up until interrupted (Ctrl-C)")
			<-sigCtx.Done()
		},
	}, logger)
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if serr := srv.Shutdown(shutdownCtx); serr != nil && err == nil {
		err = serr
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// pageHooks hand the fleet's status page out of run. The zero value makes
// no page.
type pageHooks struct {
	// start, when set, gets the page as soon as the controller exists.
	start func(http.Handler)
	// converged, when set, gets the page once every host is ready, while
	// the store is still open; run returns when it does.
	converged func(http.Handler)
}

// newPage returns the status page of the fleet's controller.
func newPage(ctrl *controller.Controller) (*statuspage.Handler, error) {
	return statuspage.New(statuspage.Options{
		Title: "fleet",
		Controllers: []statuspage.Controller{{
			Controller: ctrl,
			States:     []controller.State{stateNew, stateProvisioning, stateInstalling, stateReady},
		}},
	})
}

// run converges the simulated fleet, kept in the store opts names, and
// writes its progress to out. It hands the fleet's status page to the
// hooks, if any, and the controller's log to logger, when not nil.
func run(ctx context.Context, out io.Writer, opts stores.Options, hooks pageHooks, logger *slog.Logger) error {
	st, closeStore, err := stores.Open(ctx, opts)
	if err != nil {
		return err
	}
	defer closeStore()
	appCtx := ctx
	prov := &provider{installed: map[string]bool{}, started: map[string]bool{}, badDisk: map[string]bool{}, rand: rand.New(rand.NewPCG(1, 2))}
	for _, h := range badDisks {
		prov.badDisk[h] = true
	}
	var ctrl *controller.Controller
	handler := controller.HandlerFunc(func(ctx context.Context, h controller.Object) (controller.Result, error) {
		switch h.State {
		case stateNew:
			return controller.Transition(stateProvisioning).Because("accepted into the fleet"), nil
		case stateProvisioning:
			if err := prov.provision(h.Key); err != nil {
				return controller.Result{}, err // retried with backoff
			}
			// The host reports through Enqueue once the install is done.
			prov.install(h.Key, func() { _ = ctrl.Enqueue(appCtx, h.Key) })
			return controller.Transition(stateInstalling).Because("machine booted"), nil
		case stateInstalling:
			if !prov.isStarted(h.Key) {
				// The install began in an earlier run of the program:
				// start it again, as a real agent would be asked to.
				prov.install(h.Key, func() { _ = ctrl.Enqueue(appCtx, h.Key) })
			}
			if !prov.isInstalled(h.Key) {
				return controller.Wait("install running"), nil
			}
			return controller.Transition(stateReady).Because("agent reported"), nil
		default:
			return controller.NoChange(), nil
		}
	})
	// The controller reports SLA events from its workers: pass them on
	// to the loop that prints (room for one breach and one recovery per
	// host, so the workers never wait).
	slaEvents := make(chan controller.SLAEvent, 2*hosts)
	cfg := controller.Config{
		Kind:            "host",
		Store:           st.Store,
		Handler:         handler,
		Workers:         16,
		Backoff:         converge.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond, Jitter: 0.5},
		SLA:             map[controller.State]time.Duration{stateInstalling: installSLA},
		OnSLA:           func(ev controller.SLAEvent) { slaEvents <- ev },
		QuarantineAfter: quarantineAfter,
		Logger:          logger,
	}
	if st.Shared {
		// Other copies of the program may share the database: each is a
		// replica that claims due hosts in batches.
		name, _ := os.Hostname()
		cfg.Owner = fmt.Sprintf("%s-%d", name, os.Getpid())
		cfg.Poll = 50 * time.Millisecond
	}
	ctrl, err = controller.New(cfg)
	if err != nil {
		return err
	}
	var page *statuspage.Handler
	if hooks.start != nil || hooks.converged != nil {
		if page, err = newPage(ctrl); err != nil {
			return err
		}
	}
	if hooks.start != nil {
		hooks.start(page)
	}
	fmt.Fprintf(out, "state kept in %s\n", st.Where)
	for i := range hosts {
		err := ctrl.Add(ctx, fmt.Sprintf("host-%03d", i), stateNew, nil)
		if err != nil && !errors.Is(err, controller.ErrObjectExists) {
			return err
		}
	}
	// Hosts added by an earlier run are known once Run has read the store.
	counts, quarantined := countStates(ctrl)
	last := render(counts, len(quarantined))
	if last != "" {
		fmt.Fprintln(out, last)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- ctrl.Run(runCtx) }()

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	released := 0
	for {
		counts, quarantined := countStates(ctrl)
		if line := render(counts, len(quarantined)); line != last {
			fmt.Fprintln(out, line)
			last = line
		}
		if counts[stateReady] == hosts {
			break
		}
		if len(quarantined) > 0 && counts[stateReady]+len(quarantined) == hosts {
			// Every other host is ready: the operator looks at the
			// quarantined ones, replaces their disks and releases them.
			n, err := releaseQuarantined(ctx, out, ctrl, prov)
			if err != nil {
				stop()
				<-stopped
				prov.wait()
				return err
			}
			released += n
		}
		select {
		case ev := <-slaEvents:
			printSLA(out, ev)
		case <-tick.C:
		case <-ctx.Done():
			stop()
			<-stopped
			prov.wait()
			return ctx.Err()
		}
	}
	stop()
	if err := <-stopped; err != nil {
		return err
	}
	prov.wait()
	for len(slaEvents) > 0 {
		printSLA(out, <-slaEvents)
	}
	fmt.Fprintf(out, "all %d hosts ready; provider refused %d requests, each retried; %d hosts released from quarantine\n", hosts, prov.refusals(), released)

	history, err := ctrl.History(ctx, "host-007")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "history of host-007:")
	for _, h := range history {
		fmt.Fprintf(out, "  %-14q -> %-14q %s\n", h.From, h.To, h.Reason)
	}
	if hooks.converged != nil {
		hooks.converged(page)
	}
	return nil
}

// countStates returns the number of hosts per state, and the hosts that
// are quarantined.
func countStates(c *controller.Controller) (map[controller.State]int, []string) {
	counts := map[controller.State]int{}
	var quarantined []string
	for _, o := range c.Objects() {
		counts[o.State]++
		if o.Halted == controller.HaltQuarantined {
			quarantined = append(quarantined, o.Key)
		}
	}
	return counts, quarantined
}

func render(counts map[controller.State]int, quarantined int) string {
	states := make([]string, 0, len(counts))
	for s := range counts {
		states = append(states, string(s))
	}
	sort.Strings(states)
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = fmt.Sprintf("%s=%d", s, counts[controller.State(s)])
	}
	if quarantined > 0 {
		parts = append(parts, fmt.Sprintf("(quarantined=%d)", quarantined))
	}
	return strings.Join(parts, " ")
}

// releaseQuarantined prints the quarantined hosts, as the store has them,
// has their disks replaced and releases them. It returns how many it
// released.
func releaseQuarantined(ctx context.Context, out io.Writer, ctrl *controller.Controller, prov *provider) (int, error) {
	quarantined, err := ctrl.Quarantined(ctx)
	if err != nil {
		return 0, err
	}
	for _, h := range quarantined {
		fmt.Fprintf(out, "quarantined: %s in %s after %d failures in a row: %s\n", h.Key, h.State, h.Retries, h.LastError.Error)
		prov.replaceDisk(h.Key)
		if err := ctrl.Release(ctx, h.Key); err != nil {
			return 0, err
		}
		fmt.Fprintf(out, "released: %s, its disk replaced\n", h.Key)
	}
	return len(quarantined), nil
}

func printSLA(out io.Writer, ev controller.SLAEvent) {
	if ev.Breached {
		fmt.Fprintf(out, "sla: %s has been %s longer than %s\n", ev.Key, ev.State, ev.SLA)
		return
	}
	fmt.Fprintf(out, "sla: %s left %s, no longer above its SLA\n", ev.Key, ev.State)
}

// provider simulates the machine provider and the hosts' install agents.
type provider struct {
	mu        sync.Mutex
	rand      *rand.Rand
	installed map[string]bool
	started   map[string]bool
	badDisk   map[string]bool
	refused   int
	wg        sync.WaitGroup
}

// provision fails one request in five, as a busy provider does, and every
// request for a host with a failed disk.
func (p *provider) provision(host string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.badDisk[host] {
		return fmt.Errorf("provision %s: %w", host, errDiskFailed)
	}
	if p.rand.IntN(5) == 0 {
		p.refused++
		return fmt.Errorf("provision %s: %w", host, errProviderBusy)
	}
	return nil
}

// replaceDisk fixes the disk of host.
func (p *provider) replaceDisk(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.badDisk, host)
}

// install finishes after a few milliseconds (the slow agent: after longer
// than the installing SLA) and calls done, as a host agent reporting back
// would.
func (p *provider) install(host string, done func()) {
	p.mu.Lock()
	p.started[host] = true
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		d := time.Duration(2+len(host)%5) * time.Millisecond
		if host == slowAgent {
			d = installSLA + time.Second
		}
		time.Sleep(d)
		p.mu.Lock()
		p.installed[host] = true
		p.mu.Unlock()
		done()
	}()
}

func (p *provider) isStarted(host string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started[host]
}

func (p *provider) isInstalled(host string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.installed[host]
}

func (p *provider) refusals() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

func (p *provider) wait() { p.wg.Wait() }
