package systemd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/convergekit/converge"
)

// The sentinel errors of the package. Branch on them with errors.Is; the
// typed errors (*UnitError, *NameError, *LockError, *PowerError) carry the
// unit, the operation and the state, and match them. They are made to be
// embedded after a message that names the unit, so they carry no prefix.
var (
	// ErrInvalidName means a unit name systemd would refuse (*NameError).
	ErrInvalidName = errors.New("invalid unit name")
	// ErrInvalidUnit means a Unit's own fields contradict each other or are
	// out of range (a masked unit with a unit file of ours, a template
	// started); the *UnitError says which.
	ErrInvalidUnit = errors.New("invalid unit item")
	// ErrJobFailed means a job systemd ran for the unit (start, stop,
	// restart, reload) ended with another result than "done"
	// (UnitError.JobResult: "failed", "timeout", "dependency",
	// "canceled"...).
	ErrJobFailed = errors.New("job failed")
	// ErrJobTimeout means the job did not end within Config.JobTimeout.
	// systemd goes on with it.
	ErrJobTimeout = errors.New("job did not end in time")
	// ErrUnitFailed means the unit was in the failed state right after it
	// was started or restarted: its process exited at once.
	ErrUnitFailed = errors.New("unit failed")
	// ErrNoInstall means the unit cannot be enabled: its unit file has no
	// [Install] section (systemd calls it static).
	ErrNoInstall = errors.New("unit file has no [Install] section, so it cannot be enabled")
	// ErrUnknownAction means Act was given an action other than
	// converge.ActionReboot and converge.ActionShutdown.
	ErrUnknownAction = errors.New("unknown host action")
)

// errPrefix starts every message of this package that stands on its own.
const errPrefix = "systemd: "

// cause returns err's message without this package's or the core's
// prefix, for embedding after a message that carries one.
func cause(err error) string {
	msg := err.Error()
	for _, p := range []string{errPrefix, "converge: ", "hostcfg: "} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return rest
		}
	}
	return msg
}

// UnitError is the error of one operation on one unit: which unit, which
// operation, what systemd reported, and why. It wraps the cause (one of
// the sentinels above, a D-Bus error, a hostcfg error), so errors.Is and
// errors.As see through it.
type UnitError struct {
	// Unit is the unit's name.
	Unit string
	// Op is what failed: "check" (the item's fields), "read", "write"
	// (the unit file), "remove", "daemon-reload", "start", "stop",
	// "restart", "reload", "enable", "disable", "mask", "unmask" or
	// "reset-failed".
	Op string
	// JobResult is the result of a job that did not end "done" ("failed",
	// "timeout", "dependency", "canceled", "skipped"); empty otherwise.
	JobResult string
	// ActiveState, SubState and Result are the unit's state as systemd
	// reported it right after the failure (Result is a service's, such as
	// "exit-code"); empty when it could not be read or does not matter.
	ActiveState, SubState, Result string
	// Err is the cause.
	Err error
}

// Error names the unit and the operation, then says what systemd reported.
func (e *UnitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%sunit %q: %s", errPrefix, e.Unit, e.Op)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(cause(e.Err))
	}
	if e.JobResult != "" {
		fmt.Fprintf(&b, " (job result %q)", e.JobResult)
	}
	if e.ActiveState != "" {
		fmt.Fprintf(&b, "; the unit is %s", e.ActiveState)
		if e.SubState != "" && e.SubState != e.ActiveState {
			fmt.Fprintf(&b, " (%s)", e.SubState)
		}
		if e.Result != "" && e.Result != "success" {
			fmt.Fprintf(&b, " with result %q", e.Result)
		}
		if e.ActiveState == "failed" || e.JobResult != "" {
			fmt.Fprintf(&b, "; see journalctl -u %s", e.Unit)
		}
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *UnitError) Unwrap() error { return e.Err }

// LockError is a reboot or power-off refused because an update lock is
// held: a lock file of PowerOptions.UpdateLocks exists (Lock names it),
// or PowerOptions.Guard refused (Err is its error). It matches
// converge.ErrLocked, as the docker module's *LockError does, so an agent
// tells a refusal from a failure the same way for both; a forced request
// goes past it.
type LockError struct {
	// Action is what was refused: converge.ActionReboot or
	// converge.ActionShutdown.
	Action converge.Action
	// Lock is the path of the lock file that exists, inside the
	// Manager's root; empty when Guard refused.
	Lock string
	// Err is Guard's error; nil when a lock file refused.
	Err error
}

// Error names the action and the lock that refused it.
func (e *LockError) Error() string {
	if e.Lock != "" {
		return fmt.Sprintf("%s%s refused: update lock %s is held (a forced request goes past it)", errPrefix, e.Action, e.Lock)
	}
	return fmt.Sprintf("%s%s refused: %s (a forced request goes past it)", errPrefix, e.Action, cause(e.Err))
}

// Is makes LockError match converge.ErrLocked.
func (e *LockError) Is(target error) bool { return target == converge.ErrLocked }

// Unwrap returns Guard's error, if any.
func (e *LockError) Unwrap() error { return e.Err }

// PowerError is a reboot or power-off that logind did not accept, or
// whose update locks could not be read (a lock that cannot be read never
// counts as released).
type PowerError struct {
	// Action is converge.ActionReboot or converge.ActionShutdown.
	Action converge.Action
	// Lock is the update lock that could not be read; empty when logind
	// refused.
	Lock string
	Err  error
}

// Error names the action and the cause.
func (e *PowerError) Error() string {
	if e.Lock != "" {
		return fmt.Sprintf("%s%s: update lock %s cannot be read: %s", errPrefix, e.Action, e.Lock, cause(e.Err))
	}
	return fmt.Sprintf("%s%s through logind: %s", errPrefix, e.Action, cause(e.Err))
}

// Unwrap returns the cause.
func (e *PowerError) Unwrap() error { return e.Err }
