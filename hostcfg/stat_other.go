//go:build !linux

package hostcfg

import (
	"io/fs"
	"os"
	"time"
)

// statID reports no identity outside Linux, which turns the read cache of
// ConfigFile off: every look reads the file.
func statID(fs.FileInfo) (dev, ino uint64, ctime time.Time, ok bool) {
	return 0, 0, time.Time{}, false
}

// openBeneath has no fast path outside Linux.
func (r *Root) openBeneath(string) (f *os.File, missing, ok bool) { return nil, false, false }
