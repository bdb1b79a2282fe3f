//go:build !unix

package bench

// cpuTime reports false: the process's CPU time is read only on unix.
func cpuTime() (int64, bool) { return 0, false }
