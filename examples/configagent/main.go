// Command configagent is a config agent: it keeps the configuration of a
// service on a device at a target, restarts the service when its
// configuration changes, and repairs hand edits of the files it manages as
// they happen.
//
// The device is pretend (a directory standing for its root file system,
// -root), the service is real: a small HTTP server, "greeter", that this
// program starts, supervises and restarts itself (it is this same binary,
// run with CONFIGAGENT_SERVICE set), so the example needs neither systemd
// nor root.
//
// The parameters depend on each other as on a device: the target names
// the address of the management interface (/etc/network/interfaces.d/mgmt0)
// and the service's port and greeting; the service listens on the
// management address only, so its configuration (/etc/greeter/greeter.conf)
// takes the address from the state the interface item reached in the same
// walk. Moving the management address moves the service.
//
// A converge.TargetReconciler keeps the target, in a boltstore file
// (-state): a restarted agent resumes the last target it was given
// (LoadOrSet), and sets the default one only the first time. hostcfg.Watch
// triggers a pass when someone edits a managed file, so a hand edit is
// repaired within a second, not at the next periodic pass (-interval); the
// agent's own writes trigger nothing. The service item is a
// converge.Refresher: when its configuration changed in a walk, it is
// restarted once; a pass that changes nothing restarts nothing.
//
// Without -serve, the program shows all that and exits: it sets a target,
// asks the service for its greeting, edits the configuration by hand and
// watches it come back, then sets a new greeting and shows the one
// restart. With -serve it runs as an agent until interrupted; -address,
// -port and -greeting change its target (stored, so the next start
// resumes it). Edit the files under -root while it runs to see them come
// back.
//
//	go run ./examples/configagent
//	go run ./examples/configagent -serve -root /tmp/device -state /tmp/configagent.db -greeting bonjour
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/examples/internal/cli"
	"github.com/convergekit/converge/examples/internal/stores"
	"github.com/convergekit/converge/hostcfg"
)

// The files the agent manages, as paths inside the device's root.
const (
	ifacePath = "/etc/network/interfaces.d/mgmt0"
	confDir   = "/etc/greeter"
	confPath  = confDir + "/greeter.conf"
)

// confID is the ID of the service's configuration file item.
var confID = (&hostcfg.File{Path: confPath}).ID()

// serviceEnv, when set, makes this program the service: it serves the
// configuration file it names.
const serviceEnv = "CONFIGAGENT_SERVICE"

// Spec is the target: plain data, stored as JSON in the agent's store so
// that a restarted agent resumes it.
type Spec struct {
	// Address is the management interface's address, with its prefix
	// length ("127.0.0.1/8"). The service listens on it.
	Address string `json:"address"`
	// Port is the service's TCP port; 0 lets the system choose one.
	Port int `json:"port"`
	// Greeting is what the service answers.
	Greeting string `json:"greeting"`
}

// defaultSpec is the target of an agent's first start.
var defaultSpec = Spec{Address: "127.0.0.1/8", Port: 0, Greeting: "hello"}

func main() {
	if conf := os.Getenv(serviceEnv); conf != "" {
		if err := serve(conf, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "greeter:", err)
			os.Exit(1)
		}
		return
	}
	serveFlag := flag.Bool("serve", false, "run as an agent until interrupted, instead of the demonstration")
	root := flag.String("root", "", "directory standing for the device's root file system (default: a temporary one)")
	state := flag.String("state", "", "boltstore file keeping the target (default: a temporary one for the demonstration, configagent.db in the user's cache directory with -serve)")
	interval := flag.Duration("interval", 30*time.Second, "periodic pass, for drift the file watch cannot see")
	var set Spec
	flag.StringVar(&set.Address, "address", "", "with -serve, set the management address (such as 127.0.0.1/8) in the target")
	flag.IntVar(&set.Port, "port", -1, "with -serve, set the service's port in the target (0: any)")
	flag.StringVar(&set.Greeting, "greeting", "", "with -serve, set the service's greeting in the target")
	cli.Parse("configagent", "[-serve [-address a/n] [-port n] [-greeting text]] [-root dir] [-state file] [-interval d]",
		"Keeps the configuration of a small HTTP service on a pretend device (a directory) at a\n"+
			"target, restarts the service when its configuration changes and repairs hand edits of\n"+
			"its files as they happen. The target survives restarts in a boltstore file. Without\n"+
			"-serve it demonstrates this and exits. It needs no services.")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !*serveFlag && (set.Address != "" || set.Port >= 0 || set.Greeting != "") {
		fmt.Fprintln(os.Stderr, "configagent: -address, -port and -greeting go with -serve")
		os.Exit(2)
	}
	if err := run(ctx, os.Stdout, *serveFlag, set, *root, *state, *interval); err != nil {
		fmt.Fprintln(os.Stderr, "configagent:", err)
		os.Exit(1)
	}
}

// run runs the agent over root with its target in state: the
// demonstration, or with keep until ctx ends, after setting the fields of
// set that are given (non-empty, Port >= 0) in its target.
func run(ctx context.Context, out io.Writer, keep bool, set Spec, root, state string, interval time.Duration) error {
	if root == "" {
		dir, err := os.MkdirTemp("", "converge-configagent-root-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		root = dir
	}
	if state == "" && keep {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		state = filepath.Join(dir, "converge", "configagent.db")
	}
	a, err := startAgent(ctx, agentConfig{Root: root, State: state, Interval: interval, Out: out})
	if err != nil {
		return err
	}
	defer a.Close()
	if keep {
		spec, _ := a.rec.Target()
		next := spec
		if set.Address != "" {
			next.Address = set.Address
		}
		if set.Port >= 0 {
			next.Port = set.Port
		}
		if set.Greeting != "" {
			next.Greeting = set.Greeting
		}
		if next != spec {
			// Stored before it is applied: a restarted agent resumes it.
			if err := a.rec.SetTarget(ctx, next); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "new target of revision %d: %+v\n", a.rec.Revision(), next)
		}
		fmt.Fprintf(a.out, "keeping %s converged (target in %s); Ctrl-C to stop\n", root, a.where)
		<-ctx.Done()
		return nil
	}
	return demo(ctx, a, a.out)
}

// demo shows the agent at work: the service answering, a hand edit
// repaired, and a new greeting restarting the service once.
func demo(ctx context.Context, a *agent, out io.Writer) error {
	passes := a.passes()
	defer passes.close()
	if err := passes.next(ctx); err != nil {
		return err
	}
	greeting, err := a.ask(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "the service at %s says %q\n", a.sup.state().Addr, greeting)

	fmt.Fprintf(out, "== someone edits %s by hand\n", confPath)
	want, err := os.ReadFile(a.host(confPath))
	if err != nil {
		return err
	}
	start := time.Now()
	if err := os.WriteFile(a.host(confPath), []byte("listen = 0.0.0.0:80\n"), 0o644); err != nil {
		return err
	}
	if err := passes.changed(ctx, confID); err != nil {
		return err
	}
	got, err := os.ReadFile(a.host(confPath))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  repaired in %s (restored: %v); the service kept running: restarts %d\n",
		time.Since(start).Round(time.Millisecond), string(got) == string(want), a.sup.restarts())
	if err := passes.next(ctx); err != nil {
		return err
	}

	spec, _ := a.rec.Target()
	spec.Greeting = "hello from revision " + fmt.Sprint(a.rec.Revision()+1)
	fmt.Fprintf(out, "== new target: greeting %q\n", spec.Greeting)
	if err := a.rec.SetTarget(ctx, spec); err != nil {
		return err
	}
	if err := passes.next(ctx); err != nil {
		return err
	}
	if greeting, err = a.ask(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "  restarts %d; the service at %s says %q\n", a.sup.restarts(), a.sup.state().Addr, greeting)

	fmt.Fprintln(out, "== a pass that changes nothing")
	a.rec.Trigger()
	if err := passes.next(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "  restarts %d\n", a.sup.restarts())
	return nil
}

// syncWriter serialises the writes of the agent's goroutines (the loop's
// events, the watch, the supervisor, the demonstration).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// agentConfig says where an agent keeps things.
type agentConfig struct {
	// Root is the device's root directory.
	Root string
	// State is the boltstore file; "" means a temporary one.
	State string
	// Interval is the reconciler's periodic pass.
	Interval time.Duration
	// NoWatch leaves the file watch off (drift waits for Interval).
	NoWatch bool
	// Settle is the watch's quiet period; 0 means hostcfg's default.
	Settle time.Duration
	// Out gets a line per change; nil means none.
	Out io.Writer
}

// agent is a running config agent: a reconcile loop over the device's
// root, the file watch, and the supervised service.
type agent struct {
	root  *hostcfg.Root
	rec   *converge.TargetReconciler[Spec]
	sup   *supervisor
	where string // where the target is kept
	found bool   // a stored target was resumed
	out   io.Writer

	// triggers counts the passes the file watch asked for.
	triggers chan struct{}
	stopMu   sync.Mutex
	unwatch  func()
	closers  []func()
}

// startAgent opens the store and the root, resumes the stored target (or
// sets defaultSpec on a first start), starts the file watch and the
// reconcile loop.
func startAgent(ctx context.Context, cfg agentConfig) (_ *agent, err error) {
	a := &agent{out: &syncWriter{w: cfg.Out}, triggers: make(chan struct{}, 100)}
	if cfg.Out == nil {
		a.out = io.Discard
	}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	// The pretend device has its network configuration directory, as
	// ifupdown installs it.
	if err := os.MkdirAll(filepath.Join(cfg.Root, "etc/network/interfaces.d"), 0o755); err != nil {
		return nil, err
	}
	if a.root, err = hostcfg.OpenRoot(cfg.Root); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { a.root.Close() })
	st, closeStore, err := stores.Open(ctx, stores.Options{Path: cfg.State})
	if err != nil {
		return nil, err
	}
	a.where = st.Where
	a.closers = append(a.closers, func() { _ = closeStore() })
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	a.sup = &supervisor{exe: exe, conf: a.host(confPath), out: a.out}
	a.closers = append(a.closers, a.sup.stop)

	a.rec, err = converge.NewTargetReconciler(converge.TargetReconcilerConfig[Spec]{
		Name:     "greeter",
		Build:    func(_ context.Context, s Spec) ([]converge.TargetStage, error) { return a.build(s) },
		Store:    st.Store,
		Interval: cfg.Interval,
	})
	if err != nil {
		return nil, err
	}
	unsubscribe := a.rec.Subscribe(func(e converge.TargetEvent) {
		switch e.Kind {
		case converge.TargetStateChanged:
			for _, id := range e.Report.IDs(converge.OutcomeChanged) {
				r, _ := e.Report.Item(id)
				if !r.Decision.Required() && len(r.Refresh) > 0 {
					fmt.Fprintf(a.out, "  pass %d refreshed %s for %s\n", e.Pass, id, r.Refresh)
					continue
				}
				fmt.Fprintf(a.out, "  pass %d changed %s\n", e.Pass, id)
			}
		case converge.TargetPassFailed:
			fmt.Fprintf(a.out, "  pass %d failed (retry in %s): %v\n", e.Pass, e.Retry.Round(time.Millisecond), e.Err)
		}
	})
	a.closers = append(a.closers, unsubscribe)
	if a.found, err = a.rec.LoadOrSet(ctx, defaultSpec); err != nil {
		return nil, err
	}
	if a.found {
		fmt.Fprintf(a.out, "resumed the target of revision %d from %s\n", a.rec.Revision(), a.where)
	} else {
		fmt.Fprintf(a.out, "no target in %s: starting with the default\n", a.where)
	}
	if !cfg.NoWatch {
		// Watch returns once the watch is in place: every hand edit from
		// now on triggers a pass.
		a.unwatch, err = hostcfg.Watch(ctx, a.root, []string{ifacePath, confPath}, func() {
			fmt.Fprintln(a.out, "managed files changed by hand: reconciling")
			select {
			case a.triggers <- struct{}{}:
			default:
			}
			a.rec.Trigger()
		}, hostcfg.WatchConfig{Settle: cfg.Settle})
		if err != nil {
			return nil, err
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := a.rec.Run(runCtx); err != nil {
			fmt.Fprintln(a.out, "reconciler:", err)
		}
	}()
	// Closed in reverse: the loop stops before the service and the store.
	a.closers = append(a.closers, func() { cancel(); <-stopped }, a.StopWatch)
	return a, nil
}

// Close stops the watch, the loop and the service, and closes the store
// and the root.
func (a *agent) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// StopWatch stops the file watch: drift then waits for the periodic pass.
func (a *agent) StopWatch() {
	a.stopMu.Lock()
	defer a.stopMu.Unlock()
	if a.unwatch != nil {
		a.unwatch()
		a.unwatch = nil
	}
}

// host returns the host path of a path on the device.
func (a *agent) host(p string) string { return filepath.Join(a.root.Dir(), filepath.FromSlash(p)) }

// build turns the target into one stage: the interface, the service's
// configuration (which takes its address from the interface) and the
// service, refreshed when its configuration changes.
func (a *agent) build(s Spec) ([]converge.TargetStage, error) {
	if _, err := netip.ParsePrefix(s.Address); err != nil {
		return nil, fmt.Errorf("management address: %w", err)
	}
	if s.Port < 0 || s.Port > 65535 {
		return nil, fmt.Errorf("port %d is out of range", s.Port)
	}
	if strings.ContainsAny(s.Greeting, "\r\n") {
		return nil, fmt.Errorf("greeting %q: one line only", s.Greeting)
	}
	iface := &hostcfg.File{Root: a.root, Path: ifacePath,
		Content: fmt.Appendf(nil, "auto mgmt0\niface mgmt0 inet static\n  address %s\n", s.Address)}
	dir := &hostcfg.Dir{Root: a.root, Path: confDir, Mode: 0o755}
	conf := &serviceConf{File: hostcfg.File{Root: a.root, Path: confPath, Mode: 0o644}, iface: iface.ID(), port: s.Port, greeting: s.Greeting}
	svc := &service{sup: a.sup}

	g := converge.NewGraph()
	g.Add(iface.Node(), converge.Present)
	g.Add(dir.Node(), converge.Present)
	g.Add(conf.Node(), converge.Present, iface.ID(), dir.ID())
	// The service depends on its configuration: it reads it, and a
	// change of it refreshes (restarts) the service.
	g.Add(converge.Wrap[ServiceState](svc), converge.Present, conf.ID())
	return []converge.TargetStage{{Name: "greeter", Graph: g}}, nil
}

// serviceConf is the service's configuration file. Its listen address is
// the management interface's, read from the state the interface item
// reached in the same walk, so it can never disagree with the interface.
type serviceConf struct {
	hostcfg.File
	iface    converge.ID
	port     int
	greeting string
}

// Node wraps the item itself (not its File) for a graph.
func (c *serviceConf) Node() converge.Node { return converge.Wrap[hostcfg.FileState](c) }

// StateGoal reads the interface's address and renders the configuration.
func (c *serviceConf) StateGoal(ctx context.Context, deps converge.DepStates) (hostcfg.FileState, error) {
	st, err := converge.DepState[hostcfg.FileState](deps, c.iface)
	if err != nil {
		return hostcfg.FileState{}, err
	}
	addr, err := addressOf(string(st.Content))
	if err != nil {
		return hostcfg.FileState{}, fmt.Errorf("interface %s: %w", c.iface, err)
	}
	c.Content = fmt.Appendf(nil, "listen = %s\ngreeting = %s\n", netip.AddrPortFrom(addr, uint16(c.port)), c.greeting)
	return c.File.StateGoal(ctx, deps)
}

// addressOf finds the address of an interface stanza ("address a/n").
func addressOf(stanza string) (netip.Addr, error) {
	for _, line := range strings.Split(stanza, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "address" {
			p, err := netip.ParsePrefix(f[1])
			if err != nil {
				return netip.Addr{}, err
			}
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, errors.New("no address line")
}

// ServiceState is the state of the service.
type ServiceState struct {
	Running bool
	// PID is the process's ID; Addr where it listens; ConfigSum the hash
	// of the configuration it started with.
	PID       int    `json:",omitempty"`
	Addr      string `json:",omitempty"`
	ConfigSum string `json:",omitempty"`
}

// service is the greeter process, as an Item: converged when it runs.
// It is a converge.Refresher: a walk that changed its configuration
// restarts it, once.
type service struct{ sup *supervisor }

var _ converge.Refresher[ServiceState] = (*service)(nil)

// ID names the service.
func (s *service) ID() converge.ID { return "service:greeter" }

// StateCurrent asks the supervisor whether the process runs.
func (s *service) StateCurrent(context.Context, converge.DepStates) (ServiceState, error) {
	return s.sup.state(), nil
}

// StateGoal is a running service.
func (s *service) StateGoal(context.Context, converge.DepStates) (ServiceState, error) {
	return ServiceState{Running: true}, nil
}

// Check requires a start when the service does not run.
func (s *service) Check(_ context.Context, current, target ServiceState) (converge.Decision, error) {
	if current.Running != target.Running {
		return converge.Required(1), nil
	}
	return converge.NotRequired(), nil
}

// Apply starts the service.
func (s *service) Apply(ctx context.Context, _, _ ServiceState) (ServiceState, error) {
	if err := s.sup.start(ctx); err != nil {
		return ServiceState{}, err
	}
	return s.sup.state(), nil
}

// ApplyDry says the service would run.
func (s *service) ApplyDry(context.Context, ServiceState, ServiceState) (ServiceState, error) {
	return ServiceState{Running: true}, nil
}

// Refresh restarts the service after its configuration changed, unless
// the running process already started with the configuration on disk
// (the walk started it after writing the file, or a hand edit was undone
// before the service read it): a restart is for a process running an old
// configuration.
func (s *service) Refresh(ctx context.Context, current ServiceState, changed []converge.ID) (ServiceState, error) {
	sum, err := s.sup.configSum()
	if err != nil {
		return ServiceState{}, err
	}
	if current.Running && current.ConfigSum == sum {
		fmt.Fprintln(s.sup.out, "  greeter already runs this configuration: no restart")
		return current, nil
	}
	fmt.Fprintf(s.sup.out, "  restarting greeter (pid %d): %s changed\n", current.PID, changed)
	if err := s.sup.restart(ctx); err != nil {
		return ServiceState{}, err
	}
	return s.sup.state(), nil
}

// supervisor starts, watches and stops the service process.
type supervisor struct {
	exe  string    // the service's program (this one)
	conf string    // host path of its configuration
	out  io.Writer // gets a line per start and restart

	mu      sync.Mutex
	cmd     *exec.Cmd
	stdin   io.Closer     // closing it stops the service
	exited  chan struct{} // closed when the process ended
	addr    string
	sum     string
	started int
}

// state reports the process.
func (s *supervisor) state() ServiceState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return ServiceState{}
	}
	select {
	case <-s.exited:
		return ServiceState{}
	default:
	}
	return ServiceState{Running: true, PID: s.cmd.Process.Pid, Addr: s.addr, ConfigSum: s.sum}
}

// restarts counts the starts after the first.
func (s *supervisor) restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.started-1, 0)
}

func (s *supervisor) configSum() (string, error) {
	b, err := os.ReadFile(s.conf)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", sha256.Sum256(b)), nil
}

// start starts the service unless it runs, and waits until it listens.
func (s *supervisor) start(ctx context.Context) error {
	if s.state().Running {
		return nil
	}
	s.stop() // reap one that exited
	sum, err := s.configSum()
	if err != nil {
		return err
	}
	cmd := exec.Command(s.exe)
	cmd.Env = append(os.Environ(), serviceEnv+"="+s.conf)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // the service ends when it closes, with the agent too
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				select {
				case ready <- addr:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.stdin, s.exited, s.sum = cmd, stdin, exited, sum
	s.started++
	s.mu.Unlock()
	select {
	case addr := <-ready:
		s.mu.Lock()
		s.addr = addr
		s.mu.Unlock()
		fmt.Fprintf(s.out, "  greeter started (pid %d), listening on %s\n", cmd.Process.Pid, addr)
		return nil
	case <-exited:
		return errors.New("greeter exited at start (its error is on stderr)")
	case <-time.After(10 * time.Second):
		s.stop()
		return errors.New("greeter did not listen within 10s")
	case <-ctx.Done():
		s.stop()
		return ctx.Err()
	}
}

// restart stops the service and starts it again.
func (s *supervisor) restart(ctx context.Context) error {
	s.stop()
	return s.start(ctx)
}

// stop stops the service: it closes its input, and kills it when it has
// not ended within 5s.
func (s *supervisor) stop() {
	s.mu.Lock()
	cmd, stdin, exited := s.cmd, s.stdin, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	stdin.Close()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// ask asks the service for its greeting.
func (a *agent) ask(ctx context.Context) (string, error) {
	st := a.sup.state()
	if !st.Running {
		return "", errors.New("the service does not run")
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+st.Addr+"/", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

// passWatch delivers an agent's pass events to the demonstration and the
// tests.
type passWatch struct {
	events      chan converge.TargetEvent
	done        chan struct{}
	once        sync.Once
	unsubscribe func()
}

// passes subscribes to the agent's pass events.
func (a *agent) passes() *passWatch {
	w := &passWatch{events: make(chan converge.TargetEvent, 64), done: make(chan struct{})}
	w.unsubscribe = a.rec.Subscribe(func(e converge.TargetEvent) {
		select {
		case w.events <- e:
		case <-w.done:
		}
	})
	return w
}

// close unsubscribes; it may be called more than once.
func (w *passWatch) close() {
	w.once.Do(func() {
		close(w.done)
		w.unsubscribe()
	})
}

// next waits for the next pass to end and fails when it failed.
func (w *passWatch) next(ctx context.Context) error {
	for {
		e, err := w.event(ctx)
		if err != nil {
			return err
		}
		switch e.Kind {
		case converge.TargetPassFinished:
			return nil
		case converge.TargetPassFailed:
			return e.Err
		}
	}
}

// changed waits until a walk changed the item id.
func (w *passWatch) changed(ctx context.Context, id converge.ID) error {
	for {
		e, err := w.event(ctx)
		if err != nil {
			return err
		}
		if e.Kind == converge.TargetStateChanged {
			if r, ok := e.Report.Item(id); ok && r.Outcome == converge.OutcomeChanged {
				return nil
			}
		}
		if e.Kind == converge.TargetPassFailed {
			return e.Err
		}
	}
}

// event waits for the next event, for 10s at most.
func (w *passWatch) event(ctx context.Context) (converge.TargetEvent, error) {
	select {
	case e := <-w.events:
		return e, nil
	case <-ctx.Done():
		return converge.TargetEvent{}, ctx.Err()
	case <-time.After(10 * time.Second):
		return converge.TargetEvent{}, errors.New("no pass event within 10s")
	}
}

// serve is the service: it reads its configuration (listen, greeting),
// listens, says so on out ("listening on <addr>"), and answers every
// request with the greeting until in ends.
func serve(conf string, in io.Reader, out io.Writer) error {
	b, err := os.ReadFile(conf)
	if err != nil {
		return err
	}
	var listen, greeting string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, "=")
		switch k, v = strings.TrimSpace(k), strings.TrimSpace(v); {
		case !ok:
		case k == "listen":
			listen = v
		case k == "greeting":
			greeting = v
		}
	}
	if listen == "" {
		return fmt.Errorf("%s: no listen address", conf)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, greeting)
	})}
	go func() {
		_, _ = io.Copy(io.Discard, in)
		_ = srv.Close()
	}()
	fmt.Fprintf(out, "listening on %s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
