package systemd_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/errtext"
	"github.com/convergekit/converge/systemd"
)

// TestErrorMessagesReadOnce sweeps the package's sentinels and typed
// errors as the other modules' sweeps do: one "systemd: " prefix, first,
// where an error stands on its own, none where a sentinel is made to be
// embedded after another error's text, and the right articles.
func TestErrorMessagesReadOnce(t *testing.T) {
	prefixes := []string{"systemd: ", "converge: ", "hostcfg: "}
	_, nameErr := systemd.ValidateName("app")
	prefixed := []error{
		nameErr,
		&systemd.UnitError{Unit: "app.service", Op: "start", JobResult: "failed", ActiveState: "failed", SubState: "failed", Result: "exit-code", Err: systemd.ErrJobFailed},
		&systemd.UnitError{Unit: "app.service", Op: "check", Err: systemd.ErrInvalidUnit},
		&systemd.UnitError{Unit: "app.service", Op: "read", Err: errors.New("hostcfg: /etc/systemd/system/app.service: permission denied")},
		&systemd.LockError{Action: converge.ActionReboot, Lock: "/tmp/app/updates.lock"},
		&systemd.LockError{Action: converge.ActionShutdown, Err: errors.New("container web holds its update lock")},
		&systemd.PowerError{Action: converge.ActionReboot, Err: errors.New("Interactive authentication required.")},
		&systemd.PowerError{Action: converge.ActionReboot, Lock: "/tmp/app", Err: errors.New("hostcfg: /tmp/app: path holds another kind of file")},
	}
	embedded := []error{
		systemd.ErrInvalidName, systemd.ErrInvalidUnit, systemd.ErrJobFailed, systemd.ErrJobTimeout,
		systemd.ErrUnitFailed, systemd.ErrNoInstall, systemd.ErrUnknownAction,
	}
	for _, err := range prefixed {
		assert.Empty(t, errtext.Problems("systemd", err.Error(), prefixes), "%q", err.Error())
	}
	for _, err := range embedded {
		assert.Empty(t, errtext.Problems("", err.Error(), prefixes), "%q", err.Error())
	}
}
