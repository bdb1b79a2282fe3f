package systemd

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
)

// Defaults of Config.
const (
	// DefaultUnitDir is where unit files of ours go: the directory systemd
	// reserves for the administrator, which takes precedence over the
	// units packages install.
	DefaultUnitDir = "/etc/systemd/system"
	// DefaultStateDir holds the package's marks of restarts still due (see
	// Unit). It is under /run, a tmpfs that a reboot empties, as it
	// should: after a boot every service runs its current definition.
	DefaultStateDir = "/run/converge/systemd"
	// DefaultJobTimeout bounds the wait for one job (start, stop, restart,
	// reload) and for a daemon-reload: above systemd's own default start
	// and stop timeouts (90 s), so that systemd's verdict usually comes
	// first.
	DefaultJobTimeout = 3 * time.Minute
	// DefaultCallTimeout bounds every other D-Bus call (reading a unit's
	// state, enabling, masking, asking logind for a reboot).
	DefaultCallTimeout = 30 * time.Second
)

// Config configures a Manager. Root is required; every other zero field
// takes its default.
type Config struct {
	// Root is the file system of the host systemd runs: unit files, the
	// marks of restarts due and update lock files are read and written
	// through it, atomically (see hostcfg). On a device it is
	// hostcfg.OpenRoot("/"): systemd reads its unit files from the real
	// root, whatever Root says, so another root only makes sense for tests
	// that stand in for systemd.
	Root *hostcfg.Root
	// UnitDir is the directory unit files of ours are written to, inside
	// Root; "" means DefaultUnitDir. It must be on systemd's unit search
	// path (/etc/systemd/system, /run/systemd/system,
	// /usr/local/lib/systemd/system, /usr/lib/systemd/system...), or
	// systemd will not find the units by name.
	UnitDir string
	// StateDir is where the marks of restarts due are kept, inside Root;
	// "" means DefaultStateDir. It is created when first needed.
	StateDir string
	// JobTimeout bounds the wait for a job's result and for a
	// daemon-reload; 0 means DefaultJobTimeout. A job still running when
	// it passes fails the item with ErrJobTimeout; systemd goes on with it.
	JobTimeout time.Duration
	// CallTimeout bounds each other D-Bus call; 0 means
	// DefaultCallTimeout.
	CallTimeout time.Duration
}

// DefaultConfig returns a Config with every default filled in and no
// Root.
func DefaultConfig() Config {
	return Config{UnitDir: DefaultUnitDir, StateDir: DefaultStateDir, JobTimeout: DefaultJobTimeout, CallTimeout: DefaultCallTimeout}
}

// Validate reports the first field out of range as a *converge.ConfigError.
func (c Config) Validate() error {
	bad := func(field, format string, a ...any) error {
		return &converge.ConfigError{Field: field, Reason: fmt.Sprintf(format, a...)}
	}
	switch {
	case c.Root == nil:
		return bad("Root", "must not be nil (hostcfg.OpenRoot(\"/\") on a device)")
	case c.JobTimeout < 0:
		return bad("JobTimeout", "must not be negative, got %s", c.JobTimeout)
	case c.CallTimeout < 0:
		return bad("CallTimeout", "must not be negative, got %s", c.CallTimeout)
	}
	for _, d := range []struct{ field, dir string }{{"UnitDir", c.UnitDir}, {"StateDir", c.StateDir}} {
		if d.dir != "" && (!path.IsAbs(d.dir) || path.Clean(d.dir) != d.dir) {
			return bad(d.field, "must be a clean absolute path, got %q", d.dir)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	def := DefaultConfig()
	if c.UnitDir == "" {
		c.UnitDir = def.UnitDir
	}
	if c.StateDir == "" {
		c.StateDir = def.StateDir
	}
	if c.JobTimeout == 0 {
		c.JobTimeout = def.JobTimeout
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = def.CallTimeout
	}
	return c
}

// Manager is one connection to systemd (over the system bus) shared by the
// Units of a program, and the way to reboot or power off the host through
// logind (Reboot, PowerOff, Act).
//
// It coalesces daemon-reloads: a reload covers every unit file written
// before it started, so units whose files changed in one walk share
// reloads instead of taking one each (one reload when their files were
// written before the first reload began, two at most while they are
// written concurrently with it).
//
// Create it with New (the zero value is not usable) and Close it when
// done. Its methods and the Units using it are safe for concurrent use.
type Manager struct {
	cfg  Config
	root *hostcfg.Root
	bus  bus

	// Daemon-reload coalescing: requested counts the requests, reloaded
	// the requests the last successful reload covered; sem lets one
	// reload run at a time.
	rmu       sync.Mutex
	requested uint64
	reloaded  uint64
	sem       chan struct{}
	reloads   atomic.Int64

	closed atomic.Bool
}

// New validates cfg and connects to systemd on the system bus (as root
// without a system bus, to systemd's private socket). ctx bounds the
// connection only.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, err := dialBus(ctx)
	if err != nil {
		return nil, fmt.Errorf("%sconnect to systemd: %w", errPrefix, err)
	}
	return newManager(cfg, b), nil
}

func newManager(cfg Config, b bus) *Manager {
	cfg = cfg.withDefaults()
	return &Manager{cfg: cfg, root: cfg.Root, bus: b, sem: make(chan struct{}, 1)}
}

// Config returns the Manager's configuration, defaults filled in.
func (m *Manager) Config() Config { return m.cfg }

// Close closes the connection to systemd. Units using the Manager fail
// after it. Closing twice does nothing.
func (m *Manager) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.bus.close()
	return nil
}

// DaemonReloads returns how many daemon-reloads the Manager asked systemd
// for since it was created.
func (m *Manager) DaemonReloads() int64 { return m.reloads.Load() }

// DaemonReload asks systemd to reload its unit files (systemctl
// daemon-reload) and waits until it is done, at most Config.JobTimeout.
// Units call it themselves after they changed a unit file or its
// enablement; a program calls it after changing unit files by other means.
// It returns once a reload that started after the call has finished, so
// concurrent callers share reloads (see Manager).
func (m *Manager) DaemonReload(ctx context.Context) error {
	if m.closed.Load() {
		return errClosed
	}
	m.rmu.Lock()
	m.requested++
	mine := m.requested
	m.rmu.Unlock()

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, m.cfg.JobTimeout)
	defer cancel()
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return m.waitError(parent)
	}
	defer func() { <-m.sem }()

	m.rmu.Lock()
	if m.reloaded >= mine {
		// A reload that began after our request has finished.
		m.rmu.Unlock()
		return nil
	}
	upto := m.requested
	m.rmu.Unlock()
	if err := m.bus.reload(ctx); err != nil {
		if ctx.Err() != nil {
			return m.waitError(parent)
		}
		return fmt.Errorf("%sdaemon-reload: %w", errPrefix, err)
	}
	m.reloads.Add(1)
	m.rmu.Lock()
	if upto > m.reloaded {
		m.reloaded = upto
	}
	m.rmu.Unlock()
	return nil
}

// errClosed is the error of a call on a closed Manager.
var errClosed = errors.New(errPrefix + "the Manager is closed")

// waitError is the error of a daemon-reload whose wait ended: the
// caller's cancellation (parent's error) as it is, or ErrJobTimeout when
// the Manager's own bound passed.
func (m *Manager) waitError(parent context.Context) error {
	if err := parent.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%sdaemon-reload: %w (%s)", errPrefix, ErrJobTimeout, m.cfg.JobTimeout)
}

// runJob runs a job for unit and waits for its result, at most
// Config.JobTimeout. A result other than "done" (or "skipped", which
// systemd gives a job that does not apply to the unit's state, such as
// a reload of a stopped unit) is a *UnitError matching ErrJobFailed,
// with the unit's state read right after.
func (m *Manager) runJob(ctx context.Context, op jobOp, unit string) error {
	if m.closed.Load() {
		return errClosed
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, m.cfg.JobTimeout)
	defer cancel()
	done := make(chan string, 1)
	if err := m.bus.job(ctx, op, unit, done); err != nil {
		return m.unitError(parent, unit, string(op), "", err)
	}
	select {
	case r := <-done:
		if r == "done" || r == "skipped" {
			return nil
		}
		return m.unitError(parent, unit, string(op), r, ErrJobFailed)
	case <-ctx.Done():
		if parent.Err() != nil {
			return &UnitError{Unit: unit, Op: string(op), Err: parent.Err()}
		}
		return m.unitError(parent, unit, string(op), "", fmt.Errorf("%w (%s)", ErrJobTimeout, m.cfg.JobTimeout))
	}
}

// unitError builds the *UnitError of op on unit, with the unit's state
// read at once (on a context of its own, since ctx may have ended).
func (m *Manager) unitError(ctx context.Context, unit, op, result string, err error) *UnitError {
	e := &UnitError{Unit: unit, Op: op, JobResult: result, Err: err}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CallTimeout)
	defer cancel()
	if props, perr := m.bus.properties(rctx, unit); perr == nil {
		e.ActiveState, _ = props["ActiveState"].(string)
		e.SubState, _ = props["SubState"].(string)
		e.Result, _ = props["Service.Result"].(string)
	}
	return e
}

// call runs one D-Bus call bounded by Config.CallTimeout and wraps its
// error in a *UnitError.
func (m *Manager) call(ctx context.Context, unit, op string, f func(ctx context.Context) error) error {
	if m.closed.Load() {
		return errClosed
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		return &UnitError{Unit: unit, Op: op, Err: err}
	}
	return nil
}

// status is what systemd says of a unit.
type status struct {
	LoadState, ActiveState, SubState, UnitFileState string
	NeedDaemonReload                                bool
	MainPID                                         uint32
	Result                                          string
}

// status reads the unit's state from systemd.
func (m *Manager) status(ctx context.Context, unit string) (status, error) {
	var props map[string]any
	err := m.call(ctx, unit, "read", func(ctx context.Context) error {
		var err error
		props, err = m.bus.properties(ctx, unit)
		return err
	})
	if err != nil {
		return status{}, err
	}
	var s status
	s.LoadState, _ = props["LoadState"].(string)
	s.ActiveState, _ = props["ActiveState"].(string)
	s.SubState, _ = props["SubState"].(string)
	s.UnitFileState, _ = props["UnitFileState"].(string)
	s.NeedDaemonReload, _ = props["NeedDaemonReload"].(bool)
	s.MainPID, _ = props["Service.MainPID"].(uint32)
	s.Result, _ = props["Service.Result"].(string)
	return s, nil
}
