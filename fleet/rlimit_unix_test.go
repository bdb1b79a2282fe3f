//go:build unix

package fleet_test

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// raiseFileLimit raises the process's open file limit to n for the
// test, or as far as the hard limit when the process may not raise that
// (without CAP_SYS_RESOURCE even root may not); it returns the
// limit obtained.
func raiseFileLimit(t *testing.T, n uint64) uint64 {
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old))
	if old.Cur >= n {
		return old.Cur
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	lim := syscall.Rlimit{Cur: n, Max: max(n, old.Max)}
	err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	if err != nil && n > old.Max {
		t.Logf("open file limit: %d refused above the hard limit %d (%v)", n, old.Max, err)
		lim = syscall.Rlimit{Cur: old.Max, Max: old.Max}
		err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	require.NoError(t, err)
	t.Logf("open file limit raised from %d to %d", old.Cur, lim.Cur)
	return lim.Cur
}
