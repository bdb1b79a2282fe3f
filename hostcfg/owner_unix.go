//go:build unix

package hostcfg

import (
	"io/fs"
	"syscall"
)

// ownersSupported says whether files have numeric owners here.
const ownersSupported = true

// linkCount returns the number of hard links of fi, 0 when unknown.
func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 0
}

// owner returns the numeric owner of fi, or -1s when unknown.
func owner(fi fs.FileInfo) (int, int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}
