package systemd

import (
	"context"
	"fmt"
	"path"
	"sync"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
)

// Enablement is what a Unit makes of the unit's enablement (its
// UnitFileState). The zero value, EnablementKeep, leaves it as it is.
type Enablement uint8

const (
	// EnablementKeep leaves the unit enabled, disabled or masked as it is.
	EnablementKeep Enablement = iota
	// Enabled enables the unit (systemctl enable): its [Install] section's
	// links are made, so it starts at boot. A masked unit is unmasked
	// first. A unit file without an [Install] section fails with
	// ErrNoInstall.
	Enabled
	// Disabled disables the unit (systemctl disable) and unmasks a masked
	// one. A static unit (no [Install] section) counts as disabled.
	Disabled
	// Masked masks the unit (systemctl mask): its name is linked to
	// /dev/null in /etc/systemd/system, so nothing can start it. It needs
	// the unit stopped (Active Stopped or ActivationKeep, and the item stops
	// a running unit first) and no unit file of ours (Content nil): mask a
	// unit that a package installs.
	Masked
)

var enablementNames = [...]string{"keep", "enabled", "disabled", "masked"}

// String returns "keep", "enabled", "disabled" or "masked".
func (e Enablement) String() string { return enumName("enablement", enablementNames[:], uint8(e)) }

// Activation is what a Unit makes of the unit's activity (its
// ActiveState). The zero value, ActivationKeep, leaves it as it is.
type Activation uint8

const (
	// ActivationKeep leaves the unit running or stopped as it is; a
	// running unit whose unit file changed is still restarted.
	ActivationKeep Activation = iota
	// Started starts the unit (a failed one is reset first) and keeps it
	// active.
	Started
	// Stopped stops the unit. A failed unit counts as stopped.
	Stopped
)

var activationNames = [...]string{"keep", "started", "stopped"}

// String returns "keep", "started" or "stopped".
func (a Activation) String() string { return enumName("activation", activationNames[:], uint8(a)) }

// RefreshPolicy is what Refresh does to a running unit when one of its
// dependencies changed. The zero value, RefreshRestart, restarts it.
type RefreshPolicy uint8

const (
	// RefreshRestart restarts the unit (systemctl restart).
	RefreshRestart RefreshPolicy = iota
	// RefreshReload reloads it (systemctl reload: its ExecReload=, such as
	// a SIGHUP); a unit that cannot reload fails the refresh.
	RefreshReload
	// RefreshNone does nothing.
	RefreshNone
)

var refreshNames = [...]string{"restart", "reload", "none"}

// String returns "restart", "reload" or "none".
func (p RefreshPolicy) String() string { return enumName("refresh", refreshNames[:], uint8(p)) }

func enumName(kind string, names []string, v uint8) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, v)
}

// Unit is an Item for one systemd unit: its unit file (when Content is
// set), whether it is enabled, disabled or masked, and whether it is
// active. Its state is always read from systemd over D-Bus (LoadState,
// ActiveState, SubState, UnitFileState, NeedDaemonReload and, for a
// service, MainPID and Result), never assumed.
//
// Apply, in this order: stops the unit when it must stop; unmasks,
// disables or masks it; writes the unit file atomically through hostcfg
// (or removes it); enables it; asks for a daemon-reload when a unit file
// or an enablement changed, or systemd reports NeedDaemonReload (see
// Manager for how reloads are shared); then starts it, or restarts it when
// it was running and its unit file changed, so that the new definition
// runs. Each job's result is awaited (Config.JobTimeout), and the state is
// read again. A restart due is marked in Config.StateDir before the unit
// file is written and unmarked after the restart, so a process killed in
// between restarts the unit on its next walk (UnitState.RestartPending).
// ApplyDry does the same with every write and job replaced by a
// simulation, in one code path, and lists them in UnitState.Changes.
//
// Refresh (converge.Refresher) restarts the running unit, or reloads it
// under RefreshReload, when a dependency of the item changed in the walk
// (a configuration file, as a hostcfg.File item added as its dependency),
// unless Apply already started or restarted it in the same walk. Marked
// Absent (converge.Cleaner), the unit is stopped, disabled, unmasked, and
// its unit file of ours removed.
//
// A template ("app@.service") is never loaded by systemd itself, only its
// instances: a Unit of a template manages its unit file alone (Enable and
// Active must be kept), and each instance ("app@1.service") is a Unit of
// its own, with Content nil; make the instances depend on the template's
// Unit, and they are refreshed (restarted) when the template changed.
//
// The zero value has no Manager and fails; set Manager and Name at least.
type Unit struct {
	// Manager is the connection to systemd.
	Manager *Manager
	// Name is the unit's full name, "app.service" (see ValidateName).
	Name string
	// Content is the whole unit file, written to Config.UnitDir/Name.
	// nil leaves the unit file alone: a unit that a package installs, or
	// whose file another item writes.
	Content []byte
	// Enable is the desired enablement.
	Enable Enablement
	// Active is the desired activity.
	Active Activation
	// OnRefresh is what Refresh does.
	OnRefresh RefreshPolicy

	mu sync.Mutex
	// startedIn is the walk whose Apply started or restarted the unit:
	// its Refresh has nothing to add.
	startedIn converge.WalkID
}

// UnitState is the state of a Unit: what systemd reports and what the
// unit file holds. In a goal, ActiveState is "active", "inactive" or ""
// (any), UnitFileState "enabled", "disabled", "masked" or "" (any), and
// File is the desired unit file.
type UnitState struct {
	// Name is the unit's name.
	Name string
	// File is the unit file, when the item manages it (Content set); the
	// zero value otherwise.
	File hostcfg.FileState
	// LoadState is systemd's: "loaded", "not-found", "masked", "error",
	// "bad-setting".
	LoadState string
	// ActiveState is systemd's: "active", "reloading", "inactive",
	// "failed", "activating", "deactivating".
	ActiveState string
	// SubState is the unit type's own state, such as "running", "dead",
	// "exited".
	SubState string
	// UnitFileState is systemd's: "enabled", "disabled", "static",
	// "masked", "indirect", "generated"...; "" when there is no unit file.
	UnitFileState string
	// NeedDaemonReload is true when a unit file changed on disk since
	// systemd loaded it.
	NeedDaemonReload bool
	// MainPID is a service's main process; 0 when none (or not a service).
	MainPID uint32
	// Result is a service's result: "success", "exit-code", "signal"...
	Result string
	// RestartPending is true when a restart for a changed unit file is
	// marked and has not happened yet.
	RestartPending bool
	// Changes lists, in order, what Apply did or ApplyDry would do: "stop",
	// "write /etc/systemd/system/app.service", "daemon-reload", "enable",
	// "start"... Set only on the states they return.
	Changes []string `json:",omitempty"`
}

var (
	_ converge.Item[UnitState]      = (*Unit)(nil)
	_ converge.Cleaner[UnitState]   = (*Unit)(nil)
	_ converge.Refresher[UnitState] = (*Unit)(nil)
)

// ID returns "unit:" and the unit's name.
func (u *Unit) ID() converge.ID { return converge.ID("unit:" + u.Name) }

// Node returns the item wrapped for a graph.
func (u *Unit) Node() converge.Node { return converge.Wrap[UnitState](u) }

// validate checks the item's fields.
func (u *Unit) validate() error {
	kind, err := ValidateName(u.Name)
	if err != nil {
		return err
	}
	bad := func(format string, a ...any) error {
		return &UnitError{Unit: u.Name, Op: "check", Err: fmt.Errorf("%w: %s", ErrInvalidUnit, fmt.Sprintf(format, a...))}
	}
	switch {
	case u.Manager == nil:
		return bad("Manager is nil")
	case int(u.Enable) >= len(enablementNames):
		return bad("Enable is %s", u.Enable)
	case int(u.Active) >= len(activationNames):
		return bad("Active is %s", u.Active)
	case int(u.OnRefresh) >= len(refreshNames):
		return bad("OnRefresh is %s", u.OnRefresh)
	case u.Enable == Masked && u.Content != nil:
		return bad("a masked unit has no unit file of ours: masking links %s to /dev/null; set Content nil, or disable the unit instead", u.Name)
	case u.Enable == Masked && u.Active == Started:
		return bad("a masked unit cannot be started")
	case kind == NameTemplate && (u.Active != ActivationKeep || u.Enable != EnablementKeep):
		return bad("a template is never loaded, started or enabled itself: manage one of its instances (name@instance.service) with a Unit of its own")
	}
	return nil
}

// file is the hostcfg item of the unit file; nil when Content is nil.
func (u *Unit) file() *hostcfg.File {
	if u.Content == nil {
		return nil
	}
	return &hostcfg.File{Root: u.Manager.root, Path: path.Join(u.Manager.cfg.UnitDir, u.Name), Content: u.Content, Mode: 0o644}
}

// mark is the hostcfg item of the mark of a restart due.
func (u *Unit) mark() *hostcfg.File {
	return &hostcfg.File{Root: u.Manager.root, Path: path.Join(u.Manager.cfg.StateDir, u.Name+".restart"), Content: []byte("restart due: the unit file changed while the unit ran\n"), Mode: 0o644}
}

// StateCurrent reads the unit file and asks systemd for the unit's state.
func (u *Unit) StateCurrent(ctx context.Context, _ converge.DepStates) (UnitState, error) {
	if err := u.validate(); err != nil {
		return UnitState{}, err
	}
	return u.read(ctx)
}

func (u *Unit) read(ctx context.Context) (UnitState, error) {
	s := UnitState{Name: u.Name}
	if f := u.file(); f != nil {
		fs, err := f.StateCurrent(ctx, nil)
		if err != nil {
			return UnitState{}, &UnitError{Unit: u.Name, Op: "read", Err: err}
		}
		s.File = fs
	}
	mark, err := u.mark().StateCurrent(ctx, nil)
	if err != nil {
		return UnitState{}, &UnitError{Unit: u.Name, Op: "read", Err: err}
	}
	s.RestartPending = mark.Exists
	if kind, _ := ValidateName(u.Name); kind == NameTemplate {
		// systemd loads instances, never a template itself: only the
		// unit file is managed, and a changed one reloaded.
		return s, nil
	}
	st, err := u.Manager.status(ctx, u.Name)
	if err != nil {
		return UnitState{}, err
	}
	s.LoadState, s.ActiveState, s.SubState, s.UnitFileState = st.LoadState, st.ActiveState, st.SubState, st.UnitFileState
	s.NeedDaemonReload, s.MainPID, s.Result = st.NeedDaemonReload, st.MainPID, st.Result
	return s, nil
}

// StateGoal is the unit file with Content, the enablement of Enable and
// the activity of Active.
func (u *Unit) StateGoal(ctx context.Context, _ converge.DepStates) (UnitState, error) {
	if err := u.validate(); err != nil {
		return UnitState{}, err
	}
	s := UnitState{Name: u.Name}
	if f := u.file(); f != nil {
		fs, err := f.StateGoal(ctx, nil)
		if err != nil {
			return UnitState{}, &UnitError{Unit: u.Name, Op: "check", Err: err}
		}
		s.File = fs
	}
	s.UnitFileState = map[Enablement]string{Enabled: "enabled", Disabled: "disabled", Masked: "masked"}[u.Enable]
	s.ActiveState = map[Activation]string{Started: "active", Stopped: "inactive"}[u.Active]
	if u.Enable == Masked {
		s.ActiveState = "inactive"
	}
	return s, nil
}

// StateClean is the unit stopped, disabled and unmasked, without a unit
// file of ours.
func (u *Unit) StateClean(ctx context.Context, _ converge.DepStates) (UnitState, error) {
	if err := u.validate(); err != nil {
		return UnitState{}, err
	}
	s := UnitState{Name: u.Name, ActiveState: "inactive", UnitFileState: "disabled"}
	if f := u.file(); f != nil {
		fs, err := f.StateClean(ctx, nil)
		if err != nil {
			return UnitState{}, &UnitError{Unit: u.Name, Op: "check", Err: err}
		}
		s.File = fs
	}
	return s, nil
}

// The groups of systemd's states that Check tells apart.
func running(active string) bool { return active == "active" || active == "reloading" }

func stopped(active string) bool { return active == "inactive" || active == "failed" || active == "" }

func enabled(fileState string) bool { return fileState == "enabled" || fileState == "enabled-runtime" }

func masked(s UnitState) bool {
	return s.UnitFileState == "masked" || s.UnitFileState == "masked-runtime" || s.LoadState == "masked"
}

// Check requires Apply when the unit file differs (or a crashed write left
// a temporary file), systemd has not loaded the current unit files
// (NeedDaemonReload), a restart is due, or the enablement or activity
// differs from the target's.
func (u *Unit) Check(ctx context.Context, current, target UnitState) (converge.Decision, error) {
	if err := u.validate(); err != nil {
		return converge.Decision{}, err
	}
	if f := u.file(); f != nil && target.File.Path != "" {
		d, err := f.Check(ctx, current.File, target.File)
		if err != nil {
			return converge.Decision{}, err
		}
		if d.Required() {
			return d, nil
		}
	}
	if current.NeedDaemonReload || current.RestartPending {
		return converge.Required(1), nil
	}
	switch target.ActiveState {
	case "active":
		if !running(current.ActiveState) {
			return converge.Required(1), nil
		}
	case "inactive":
		if !stopped(current.ActiveState) {
			return converge.Required(1), nil
		}
	}
	switch target.UnitFileState {
	case "enabled":
		if current.UnitFileState != "enabled" || masked(current) {
			return converge.Required(1), nil
		}
	case "disabled":
		if enabled(current.UnitFileState) || masked(current) {
			return converge.Required(1), nil
		}
	case "masked":
		if current.UnitFileState != "masked" || current.LoadState != "masked" {
			return converge.Required(1), nil
		}
	}
	return converge.NotRequired(), nil
}

// Apply converges the unit (see Unit) and returns the state systemd
// reports afterwards.
func (u *Unit) Apply(ctx context.Context, current, target UnitState) (UnitState, error) {
	return u.converge(ctx, current, target, true)
}

// ApplyDry returns the state Apply would reach, with the unit file's diff
// in File.Diff and the steps in Changes, writing nothing and running no
// job.
func (u *Unit) ApplyDry(ctx context.Context, current, target UnitState) (UnitState, error) {
	return u.converge(ctx, current, target, false)
}

// converge is Apply (write) and ApplyDry (!write): every step that
// changes the system is taken only when write is set, and simulated on
// out otherwise.
func (u *Unit) converge(ctx context.Context, cur, target UnitState, write bool) (UnitState, error) {
	if err := u.validate(); err != nil {
		return UnitState{}, err
	}
	if err := ctx.Err(); err != nil {
		return UnitState{}, err
	}
	m := u.Manager
	out := cur
	out.Changes = nil
	step := func(change string, do func() error) error {
		out.Changes = append(out.Changes, change)
		if !write {
			return nil
		}
		return do()
	}
	unitCall := func(op string, f func(ctx context.Context, unit string) error) func() error {
		return func() error {
			return m.call(ctx, u.Name, op, func(ctx context.Context) error { return f(ctx, u.Name) })
		}
	}
	job := func(op jobOp) func() error { return func() error { return m.runJob(ctx, op, u.Name) } }
	reload := cur.NeedDaemonReload

	// 1. Stop a unit that must stop, with the definition it runs under,
	// before it is masked or its file removed.
	if target.ActiveState == "inactive" && !stopped(cur.ActiveState) {
		if err := step("stop", job(opStop)); err != nil {
			return UnitState{}, err
		}
		out.ActiveState, out.SubState, out.MainPID = "inactive", "dead", 0
	}
	isRunning := running(out.ActiveState)

	// 2. Links that go before the unit file changes: unmask, disable, mask.
	if masked(cur) && target.UnitFileState != "" && target.UnitFileState != "masked" {
		if err := step("unmask", unitCall("unmask", m.bus.unmask)); err != nil {
			return UnitState{}, err
		}
		out.UnitFileState, out.LoadState, reload = "disabled", "loaded", true
	}
	if target.UnitFileState == "disabled" && enabled(cur.UnitFileState) {
		if err := step("disable", unitCall("disable", m.bus.disable)); err != nil {
			return UnitState{}, err
		}
		out.UnitFileState, reload = "disabled", true
	}
	if target.UnitFileState == "masked" && cur.UnitFileState != "masked" {
		if err := step("mask", unitCall("mask", m.bus.mask)); err != nil {
			return UnitState{}, err
		}
		out.UnitFileState, reload = "masked", true
	}

	// 3. The unit file. A running unit whose definition changes is
	// restarted below; the mark goes first, so that a crash after the
	// write still restarts it on the next walk.
	restart := cur.RestartPending
	marked := cur.RestartPending
	if f := u.file(); f != nil && target.File.Path != "" {
		d, err := f.Check(ctx, cur.File, target.File)
		if err != nil {
			return UnitState{}, err
		}
		if d.Required() {
			defChanged := cur.File.Exists != target.File.Exists || string(cur.File.Content) != string(target.File.Content)
			if defChanged && target.File.Exists && isRunning && target.ActiveState != "inactive" {
				restart = true
				if write && !marked {
					if err := u.setMark(ctx, true); err != nil {
						return UnitState{}, err
					}
					marked = true
				}
				out.RestartPending = true
			}
			var fs hostcfg.FileState
			if write {
				fs, err = f.Apply(ctx, cur.File, target.File)
			} else {
				fs, err = f.ApplyDry(ctx, cur.File, target.File)
			}
			op := "write"
			if !target.File.Exists {
				op = "remove"
			}
			if err != nil {
				return UnitState{}, &UnitError{Unit: u.Name, Op: op, Err: err}
			}
			out.File = fs
			out.Changes = append(out.Changes, op+" "+fs.Path)
			if defChanged {
				reload = true
				if !target.File.Exists {
					out.LoadState, out.UnitFileState = "not-found", ""
				}
			}
		}
	}

	// 4. Enable, once the unit file is there.
	if target.UnitFileState == "enabled" && (cur.UnitFileState != "enabled" || masked(cur)) {
		err := step("enable", func() error {
			var install bool
			err := m.call(ctx, u.Name, "enable", func(ctx context.Context) error {
				var err error
				install, err = m.bus.enable(ctx, u.Name)
				return err
			})
			if err == nil && !install {
				err = &UnitError{Unit: u.Name, Op: "enable", Err: ErrNoInstall}
			}
			return err
		})
		if err != nil {
			return UnitState{}, err
		}
		out.UnitFileState, reload = "enabled", true
	}

	// 5. One daemon-reload (shared with the other units of the walk) before
	// the unit is started or read again.
	if reload {
		err := step("daemon-reload", func() error {
			if err := m.DaemonReload(ctx); err != nil {
				return &UnitError{Unit: u.Name, Op: "daemon-reload", Err: err}
			}
			return nil
		})
		if err != nil {
			return UnitState{}, err
		}
		out.NeedDaemonReload = false
		if target.UnitFileState == "masked" {
			out.LoadState = "masked"
		} else if out.LoadState == "" || out.LoadState == "not-found" && out.File.Exists {
			out.LoadState = "loaded"
		}
	}

	// 6. Start, or restart for a new definition.
	started := false
	switch {
	case target.ActiveState == "active" && !running(out.ActiveState):
		if out.ActiveState == "failed" {
			if err := step("reset-failed", unitCall("reset-failed", m.bus.resetFailed)); err != nil {
				return UnitState{}, err
			}
		}
		if err := step("start", job(opStart)); err != nil {
			return UnitState{}, err
		}
		started = true
	case restart && isRunning && target.ActiveState != "inactive":
		if err := step("restart", job(opRestart)); err != nil {
			return UnitState{}, err
		}
		started = true
	}
	if started {
		out.ActiveState, out.SubState = "active", "running"
	}
	out.RestartPending = false
	if write && marked && (started || !running(out.ActiveState)) {
		if err := u.setMark(ctx, false); err != nil {
			return UnitState{}, err
		}
	}
	if started && write {
		if w, ok := converge.CurrentWalk(ctx); ok {
			u.mu.Lock()
			u.startedIn = w
			u.mu.Unlock()
		}
	}
	if !write {
		return out, nil
	}

	// 7. What systemd says now.
	changes := out.Changes
	out, err := u.read(ctx)
	if err != nil {
		return UnitState{}, err
	}
	out.Changes = changes
	if started && out.ActiveState == "failed" {
		op := "start"
		if restart && isRunning {
			op = "restart"
		}
		return out, &UnitError{Unit: u.Name, Op: op, ActiveState: out.ActiveState, SubState: out.SubState, Result: out.Result, Err: ErrUnitFailed}
	}
	return out, nil
}

// setMark writes or removes the mark of a restart due, creating
// Config.StateDir when needed.
func (u *Unit) setMark(ctx context.Context, on bool) error {
	mk := u.mark()
	var (
		goal hostcfg.FileState
		err  error
	)
	if on {
		dir := &hostcfg.Dir{Root: u.Manager.root, Path: u.Manager.cfg.StateDir}
		if err := applyItem[hostcfg.DirState](ctx, dir, false); err != nil {
			return &UnitError{Unit: u.Name, Op: "write", Err: err}
		}
		goal, err = mk.StateGoal(ctx, nil)
	} else {
		goal, err = mk.StateClean(ctx, nil)
	}
	if err == nil {
		var cur hostcfg.FileState
		if cur, err = mk.StateCurrent(ctx, nil); err == nil {
			var d converge.Decision
			if d, err = mk.Check(ctx, cur, goal); err == nil && d.Required() {
				_, err = mk.Apply(ctx, cur, goal)
			}
		}
	}
	if err != nil {
		return &UnitError{Unit: u.Name, Op: "write", Err: err}
	}
	return nil
}

// applyItem converges one item outside a walk: to its goal, or to its
// clean state when clean is set.
func applyItem[S any](ctx context.Context, it interface {
	converge.Item[S]
	converge.Cleaner[S]
}, clean bool) error {
	cur, err := it.StateCurrent(ctx, nil)
	if err != nil {
		return err
	}
	var goal S
	if clean {
		goal, err = it.StateClean(ctx, nil)
	} else {
		goal, err = it.StateGoal(ctx, nil)
	}
	if err != nil {
		return err
	}
	d, err := it.Check(ctx, cur, goal)
	if err != nil || !d.Required() {
		return err
	}
	_, err = it.Apply(ctx, cur, goal)
	return err
}

// Refresh restarts the unit (or reloads it, under RefreshReload) when it
// is running, a dependency of the item changed, and the item's Apply did
// not already start or restart it in this walk; it returns the state
// systemd reports afterwards. A stopped unit, or one whose goal is
// Stopped, reads its configuration when it starts, and is left alone;
// RefreshNone does nothing.
func (u *Unit) Refresh(ctx context.Context, current UnitState, _ []converge.ID) (UnitState, error) {
	if err := u.validate(); err != nil {
		return UnitState{}, err
	}
	if u.OnRefresh == RefreshNone || u.Active == Stopped || !running(current.ActiveState) {
		return current, nil
	}
	if w, ok := converge.CurrentWalk(ctx); ok {
		u.mu.Lock()
		fresh := u.startedIn == w
		u.mu.Unlock()
		if fresh {
			return current, nil
		}
	}
	op := opRestart
	if u.OnRefresh == RefreshReload {
		op = opReload
	}
	if err := u.Manager.runJob(ctx, op, u.Name); err != nil {
		return UnitState{}, err
	}
	out, err := u.read(ctx)
	if err != nil {
		return UnitState{}, err
	}
	out.Changes = []string{string(op)}
	if out.ActiveState == "failed" {
		return out, &UnitError{Unit: u.Name, Op: string(op), ActiveState: out.ActiveState, SubState: out.SubState, Result: out.Result, Err: ErrUnitFailed}
	}
	return out, nil
}
