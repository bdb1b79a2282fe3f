//go:build unix

package bench

import "syscall"

// cpuTime returns the CPU time, user and system, the process used so far
// in nanoseconds, and true.
func cpuTime() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
