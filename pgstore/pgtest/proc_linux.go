package pgtest

import "syscall"

// sysProcAttr runs a PostgreSQL program as cred (nil: as the test), and
// kills it when the test binary dies, so that no server outlives a
// crashed run.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}
