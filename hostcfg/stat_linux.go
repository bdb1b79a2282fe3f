package hostcfg

import (
	"io/fs"
	"syscall"
	"time"
)

// statID returns what identifies a version of a file for the read cache:
// device, inode and change time. ok is false when fi carries no such data.
func statID(fi fs.FileInfo) (dev, ino uint64, ctime time.Time, ok bool) {
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat {
		return 0, 0, time.Time{}, false
	}
	return uint64(st.Dev), st.Ino, time.Unix(st.Ctim.Sec, st.Ctim.Nsec), true
}
