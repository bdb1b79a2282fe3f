package systemd

import (
	"context"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
)

// PowerOptions says what may hold back a reboot or a power-off.
type PowerOptions struct {
	// UpdateLocks are paths, inside the Manager's Root, of update lock
	// files, as a device supervisor keeps them (balena's updates.lock): an
	// application creates its file around work that must not be
	// interrupted and removes it afterwards. While any of them exists the
	// request is refused with a *LockError. A lock that cannot be read
	// (another kind of file, a path escaping the root) refuses it too, with
	// a *PowerError: it never counts as released.
	UpdateLocks []string
	// Guard, when set, is asked right after the lock files: an error
	// refuses the request with a *LockError wrapping it. Use it for locks
	// kept elsewhere, such as the update locks inside containers (the
	// docker module's).
	Guard func(ctx context.Context) error
	// Force goes past UpdateLocks and Guard, as a context made by
	// converge.WithForce does.
	Force bool
}

// Reboot asks logind (org.freedesktop.login1.Manager.Reboot) to reboot
// the host, unless an update lock is held (see Act).
func (m *Manager) Reboot(ctx context.Context, opts PowerOptions) error {
	return m.Act(ctx, converge.ActionReboot, opts)
}

// PowerOff asks logind (org.freedesktop.login1.Manager.PowerOff) to power
// the host off, unless an update lock is held (see Act).
func (m *Manager) PowerOff(ctx context.Context, opts PowerOptions) error {
	return m.Act(ctx, converge.ActionShutdown, opts)
}

// Act carries out a host action that items asked for
// (converge.RequiredAction, which a TargetReconciler reports in a
// TargetActionRequired event): converge.ActionReboot reboots through
// logind, converge.ActionShutdown powers off; another action fails with
// ErrUnknownAction.
//
// Unless forced (opts.Force, or converge.Forced(ctx) as in a forced pass),
// it first looks at each of opts.UpdateLocks and then asks opts.Guard, and
// refuses while one is held with a *LockError matching converge.ErrLocked:
// nothing is asked of logind then, and the agent tries again later (or
// forces). The locks are looked at right before the call to logind; an
// application that takes its lock after that look is not waited for,
// which is how device supervisors treat a reboot too.
//
// logind's answer is awaited (Config.CallTimeout), not the reboot itself:
// a nil error means logind accepted the request and the host is going
// down. A refusal from logind (not allowed, inhibited) is a *PowerError.
// logind is asked not to prompt anyone for authorisation.
func (m *Manager) Act(ctx context.Context, a converge.Action, opts PowerOptions) error {
	if a != converge.ActionReboot && a != converge.ActionShutdown {
		return &PowerError{Action: a, Err: ErrUnknownAction}
	}
	if m.closed.Load() {
		return errClosed
	}
	if !opts.Force && !converge.Forced(ctx) {
		if err := m.checkLocks(ctx, a, opts); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	if err := m.bus.power(ctx, a); err != nil {
		return &PowerError{Action: a, Err: err}
	}
	return nil
}

// checkLocks returns a *LockError when a lock of opts is held.
func (m *Manager) checkLocks(ctx context.Context, a converge.Action, opts PowerOptions) error {
	for _, lock := range opts.UpdateLocks {
		f := &hostcfg.File{Root: m.root, Path: lock}
		st, err := f.StateCurrent(ctx, nil)
		if err != nil {
			return &PowerError{Action: a, Lock: lock, Err: err}
		}
		if st.Exists {
			return &LockError{Action: a, Lock: st.Path}
		}
	}
	if opts.Guard != nil {
		if err := opts.Guard(ctx); err != nil {
			return &LockError{Action: a, Err: err}
		}
	}
	return nil
}
