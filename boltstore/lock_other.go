//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package boltstore

import (
	"errors"
	"os"
	"time"
)

// errLocked means another process holds the file.
var errLocked = errors.New("locked")

// lockShared does nothing on this system: the check of the pages before
// bbolt opens the file runs without a lock, and a process writing the file
// at the same time can make it report damage that is not there (bbolt's
// own lock is still taken by bbolt.Open afterwards).
func lockShared(*os.File, time.Duration) error { return nil }
