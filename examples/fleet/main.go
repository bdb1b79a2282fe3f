// Command fleet is a fleet controller in miniature: 500 simulated hosts move
// through their lifecycle (new -> provisioning -> installing -> ready) under
// one controller.Controller. Provisioning fails transiently now and then (the
// controller retries with per-host backoff); installing waits for the host
// to report, as a real agent would. The program prints the number of hosts
// per state as the fleet converges, then one host's history.
//
// The hosts' states and histories are kept in a durable store: PostgreSQL
// when a DSN is given (-pg, or CONVERGE_PG_DSN), where several copies of
// the program may run at once as replicas sharing the work; otherwise the
// embedded boltstore file named by -state (a temporary one by default). A
// second run on the same store resumes where the first one stopped.
//
//	go run ./examples/fleet
//	go run ./examples/fleet -state /tmp/fleet.db
//	CONVERGE_PG_DSN=postgres://... go run ./examples/fleet
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/examples/internal/stores"
)

const hosts = 500

// Lifecycle states of a host.
const (
	stateNew          controller.State = "new"
	stateProvisioning controller.State = "provisioning"
	stateInstalling   controller.State = "installing"
	stateReady        controller.State = "ready"
)

var errProviderBusy = errors.New("provider: try again")

func main() {
	var opts stores.Options
	flag.StringVar(&opts.DSN, "pg", os.Getenv(stores.DSNEnv), "PostgreSQL DSN of the shared store (default $"+stores.DSNEnv+")")
	flag.StringVar(&opts.Path, "state", "", "embedded store file when no DSN is given (default: a temporary file)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, opts); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// run converges the simulated fleet, kept in the store opts names, and
// writes its progress to out.
func run(ctx context.Context, out io.Writer, opts stores.Options) error {
	st, closeStore, err := stores.Open(ctx, opts)
	if err != nil {
		return err
	}
	defer closeStore()
	appCtx := ctx
	prov := &provider{installed: map[string]bool{}, started: map[string]bool{}, rand: rand.New(rand.NewPCG(1, 2))}
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
	cfg := controller.Config{
		Kind:    "host",
		Store:   st.Store,
		Handler: handler,
		Workers: 16,
		Backoff: converge.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond, Jitter: 0.5},
		SLA:     map[controller.State]time.Duration{stateInstalling: time.Minute},
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
	fmt.Fprintf(out, "state kept in %s\n", st.Where)
	for i := range hosts {
		err := ctrl.Add(ctx, fmt.Sprintf("host-%03d", i), stateNew, nil)
		if err != nil && !errors.Is(err, controller.ErrObjectExists) {
			return err
		}
	}
	// Hosts added by an earlier run are known once Run has read the store.
	last := render(countStates(ctrl))
	if last != "" {
		fmt.Fprintln(out, last)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- ctrl.Run(runCtx) }()

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		counts := countStates(ctrl)
		if line := render(counts); line != last {
			fmt.Fprintln(out, line)
			last = line
		}
		if counts[stateReady] == hosts {
			break
		}
		select {
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
	fmt.Fprintf(out, "all %d hosts ready; provider refused %d requests, each retried\n", hosts, prov.refusals())

	history, err := ctrl.History(ctx, "host-007")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "history of host-007:")
	for _, h := range history {
		fmt.Fprintf(out, "  %-14q -> %-14q %s\n", h.From, h.To, h.Reason)
	}
	return nil
}

func countStates(c *controller.Controller) map[controller.State]int {
	counts := map[controller.State]int{}
	for _, o := range c.Objects() {
		counts[o.State]++
	}
	return counts
}

func render(counts map[controller.State]int) string {
	states := make([]string, 0, len(counts))
	for s := range counts {
		states = append(states, string(s))
	}
	sort.Strings(states)
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = fmt.Sprintf("%s=%d", s, counts[controller.State(s)])
	}
	return strings.Join(parts, " ")
}

// provider simulates the machine provider and the hosts' install agents.
type provider struct {
	mu        sync.Mutex
	rand      *rand.Rand
	installed map[string]bool
	started   map[string]bool
	refused   int
	wg        sync.WaitGroup
}

// provision fails one request in five, as a busy provider does.
func (p *provider) provision(host string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rand.IntN(5) == 0 {
		p.refused++
		return fmt.Errorf("provision %s: %w", host, errProviderBusy)
	}
	return nil
}

// install finishes after a few milliseconds and calls done, as a host
// agent reporting back would.
func (p *provider) install(host string, done func()) {
	p.mu.Lock()
	p.started[host] = true
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		time.Sleep(time.Duration(2+len(host)%5) * time.Millisecond)
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
