//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package boltstore

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// errLocked means another process holds the file.
var errLocked = errors.New("locked")

// lockShared takes a shared lock on f, as a reader of the file, waiting up
// to timeout for a process that holds it for writing (bbolt's exclusive
// lock) to let go. Closing f releases it.
func lockShared(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return err
		case time.Now().After(deadline):
			return errLocked
		}
		time.Sleep(min(50*time.Millisecond, time.Until(deadline)+time.Millisecond))
	}
}
