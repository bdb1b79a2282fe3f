//go:build unix && !linux

package pgtest

import "syscall"

// sysProcAttr runs a PostgreSQL program as cred (nil: as the test).
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
