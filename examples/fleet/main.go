// Command fleet is a fleet controller in miniature: 500 simulated hosts move
// through their lifecycle (new -> provisioning -> installing -> ready) under
// one controller.Controller. Run it with `go run ./examples/fleet`;
// docs/fleet-controller.md is its guide.
//
// Provisioning fails transiently now and then (the
// controller retries with per-host backoff); installing waits for the host
// to report, as a real agent would. The program prints the number of hosts
// per state as the fleet converges, then one host's history.
//
// Some hosts do not go smoothly. Two have a failed disk: their provisioning
// fails every time, and after 10 failures in a row the controller
// quarantines them (it stops retrying). They stay quarantined until an
// operator, having replaced the disks, releases them: with -http, from the
// status page (the release button on each quarantined host's page; the
// simulation replaces a host's disk when it is released); else the
// program ends with them quarantined and says how to release them, unless
// -release-quarantined makes it play the operator itself. One host's
// install agent is slow: it stays installing longer than the state's SLA,
// and the controller reports it once when the SLA runs out and once more
// when the host leaves the state.
//
// The hosts' states and histories are kept in a durable store: PostgreSQL
// when a DSN is given (-pg, or CONVERGE_PG_DSN), where several copies of
// the program may run at once as replicas sharing the work; otherwise the
// embedded boltstore file named by -state (a temporary one by default). A
// second run on the same store resumes where the first one stopped.
//
// With -http, the program serves on one listener, while the fleet
// converges and afterwards until it is interrupted: the status page
// (package statuspage) at /, with the hosts per state, the SLA breaches,
// the quarantined hosts and each host's history, as HTML or, with
// "Accept: application/json", as JSON; the controller's metrics for
// Prometheus at /metrics (package prometheus); and /healthz and /readyz
// (the controller runs and the store answers) as controller-runtime's
// manager serves them. The page has no authentication of its own: it lets
// anyone who reaches it read, and offers the release action only to
// requests from the machine itself (a loopback address), the operator
// being whoever sits there.
//
//	go run ./examples/fleet -release-quarantined
//	go run ./examples/fleet -state /tmp/fleet.db
//	go run ./examples/fleet -state /tmp/fleet.db -http localhost:8080
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
	"syscall"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/examples/internal/cli"
	"github.com/convergekit/converge/examples/internal/stores"
	"github.com/convergekit/converge/prometheus"
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
	autoRelease := flag.Bool("release-quarantined", false, "play the operator: replace the failed disks and release the quarantined hosts once every other host is ready")
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
	err := serve(os.Stdout, fleetOptions{store: opts, logger: logger, autoRelease: *autoRelease}, *addr)
	switch {
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(130) // as a shell reports a command ended by Ctrl-C
	case err != nil:
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// fleetOptions are what the command line chooses.
type fleetOptions struct {
	store stores.Options
	hooks pageHooks
	// logger, when not nil, receives the controller's log.
	logger *slog.Logger
	// autoRelease makes the program play the operator: once every other
	// host is ready, it replaces the failed disks and releases the
	// quarantined hosts. Otherwise they wait for an operator (from the
	// page, when one is served).
	autoRelease bool
}

// errInterrupted is what serve returns when an interrupt stopped the fleet
// before every host was ready, without a page to serve.
var errInterrupted = errors.New("interrupted before every host was ready; run again with the same -state to go on")

// serve runs the fleet and, when addr is not empty, serves its status page,
// metrics and health on addr while it converges and afterwards, until an
// interrupt, which is then the way to stop it: serve returns nil. Without
// addr, an interrupt before every host is ready returns errInterrupted.
func serve(out io.Writer, opts fleetOptions, addr string) error {
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	if addr == "" {
		ctx, cancel := context.WithTimeout(sigCtx, time.Minute)
		defer cancel()
		err := run(ctx, out, opts)
		if sigCtx.Err() != nil && errors.Is(err, context.Canceled) {
			return errInterrupted
		}
		return err
	}
	// Served, the fleet waits for its operator as long as it takes.
	ctx := sigCtx
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close() // when run fails before the page is served
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	served <- http.ErrServerClosed // until the page is served
	opts.hooks = pageHooks{
		start: func(h http.Handler) {
			<-served
			srv.Handler = h
			go func() { served <- srv.Serve(ln) }()
			fmt.Fprintf(out, "status page on http://%s/ (metrics at /metrics, health at /healthz and /readyz)\n", ln.Addr())
		},
		converged: func(http.Handler) {
			fmt.Fprintln(out, "the status page stays up until interrupted (Ctrl-C)")
			<-sigCtx.Done()
		},
	}
	err = run(ctx, out, opts)
	if sigCtx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil // interrupted while it converged: the way to stop a served fleet
		fmt.Fprintln(out, "interrupted: stopped")
	}
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

// pageHooks hand the fleet's HTTP handler (see newMux) out of run. The
// zero value makes none.
type pageHooks struct {
	// start, when set, gets the handler as soon as the controller exists.
	start func(http.Handler)
	// converged, when set, gets the handler once every host is ready,
	// while the controller still runs and the store is open; run returns
	// when it does.
	converged func(http.Handler)
}

// newMux returns the fleet's HTTP handler: the status page of its
// controller at /, the metrics of reg at /metrics, and health's /healthz
// and /readyz.
func newMux(ctrl *controller.Controller, reg *prom.Registry, health *statuspage.Health) (http.Handler, error) {
	page, err := statuspage.New(statuspage.Options{
		Title: "fleet",
		Controllers: []statuspage.Controller{{
			Controller: ctrl,
			States:     []controller.State{stateNew, stateProvisioning, stateInstalling, stateReady},
		}},
		Authorizer: localOperator,
		Actions:    true,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", page)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for _, p := range []string{"/healthz", "/healthz/", "/readyz", "/readyz/"} {
		mux.Handle(p, health)
	}
	return mux, nil
}

// errNotLocal refuses an action to a request from another machine.
var errNotLocal = errors.New("fleet: actions are for the machine's own operator")

// localOperator is the page's Authorizer: anyone who reaches the page
// reads it; actions are allowed to requests from a loopback address only,
// whose sender is the operator of this machine. A real program asks its
// own authentication instead.
func localOperator(r *http.Request, a statuspage.Action) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return "operator@" + host, nil
	}
	if a == statuspage.ActionRead {
		return "viewer@" + host, nil
	}
	return "", errNotLocal
}

// run converges the simulated fleet, kept in the store opts.store names,
// and writes its progress to out. It hands the fleet's HTTP handler to
// opts.hooks, if any, and the controller's log to opts.logger, when not
// nil. Quarantined hosts wait for an operator (from the page) unless
// opts.autoRelease; without a page, run then ends with them quarantined.
func run(ctx context.Context, out io.Writer, opts fleetOptions) error {
	hooks, logger := opts.hooks, opts.logger
	st, closeStore, err := stores.Open(ctx, opts.store)
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
			if h.Retries == 0 && h.Failures >= quarantineAfter {
				// Released from its quarantine: the operator replaced
				// the disk before releasing the host.
				prov.replaceDisk(h.Key)
			}
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
	served := hooks.start != nil || hooks.converged != nil
	var reg *prom.Registry
	if served {
		m, err := prometheus.New(prometheus.Options{})
		if err != nil {
			return err
		}
		if err := m.Register(controller.AllMetrics()...); err != nil {
			return err
		}
		reg = prom.NewRegistry()
		reg.MustRegister(m)
		cfg.Metrics = m
	}
	ctrl, err = controller.New(cfg)
	if err != nil {
		return err
	}
	var loop statuspage.Loop // ready while the controller runs
	var page http.Handler
	if served {
		health, err := statuspage.NewHealth(statuspage.HealthOptions{Ready: map[string]statuspage.Checker{
			"controller": loop.Check, "store": statuspage.StoreCheck(st.Store),
		}})
		if err != nil {
			return err
		}
		if page, err = newMux(ctrl, reg, health); err != nil {
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
	defer stop()
	stopped := make(chan error, 1)
	go func() { stopped <- loop.Run(runCtx, ctrl.Run) }()

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	wasQuarantined := map[string]bool{}
	var stranded []controller.Object // quarantined, and no operator to release them
	told := false
	for {
		counts, quarantined := countStates(ctrl)
		if line := render(counts, len(quarantined)); line != last {
			fmt.Fprintln(out, line)
			last = line
		}
		for _, h := range quarantined {
			wasQuarantined[h] = true
		}
		if counts[stateReady] == hosts {
			break
		}
		if len(quarantined) > 0 && counts[stateReady]+len(quarantined) == hosts {
			// Every other host is ready: the quarantined ones need the
			// operator.
			switch {
			case opts.autoRelease:
				// The program plays the operator: it looks at them,
				// replaces their disks and releases them.
				if _, err := releaseQuarantined(ctx, out, ctrl, prov); err != nil {
					stop()
					<-stopped
					prov.wait()
					return err
				}
			case hooks.start == nil:
				stranded, err = ctrl.Quarantined(ctx)
				if err != nil {
					stop()
					<-stopped
					prov.wait()
					return err
				}
			case !told:
				told = true
				fmt.Fprintf(out, "%d hosts are quarantined and wait for the operator: open each on the status page "+
					"(Needs attention, or the host's page) and press release once its disk is replaced\n", len(quarantined))
			}
		}
		if stranded != nil {
			break
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
	if hooks.converged == nil || stranded != nil {
		stop()
		if err := <-stopped; err != nil {
			return err
		}
		prov.wait()
	}
	for len(slaEvents) > 0 {
		printSLA(out, <-slaEvents)
	}
	if stranded != nil {
		fmt.Fprintf(out, "%d of %d hosts ready; %d hosts stay quarantined until an operator releases them:\n", hosts-len(stranded), hosts, len(stranded))
		for _, h := range stranded {
			fmt.Fprintf(out, "  %s in %s after %d failures in a row: %s\n", h.Key, h.State, h.Retries, h.LastError.Error)
		}
		fmt.Fprintln(out, "to release them, keep the state (-state FILE) and serve the status page (-http localhost:8080),\n"+
			"then press release on each host's page; or run with -release-quarantined to have the program do it")
		return nil
	}
	released := 0
	for h := range wasQuarantined {
		if o, ok := ctrl.Get(h); ok && o.State == stateReady {
			released++
		}
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
		// The controller still runs, so the page's release and /readyz
		// keep working while it is served.
		hooks.converged(page)
		stop()
		if err := <-stopped; err != nil {
			return err
		}
		prov.wait()
		for len(slaEvents) > 0 {
			printSLA(out, <-slaEvents)
		}
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
