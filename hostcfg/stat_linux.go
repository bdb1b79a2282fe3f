package hostcfg

import (
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

// openBeneath opens the regular file at rel (root-relative, already
// cleaned) below the root's directory in one openat2 call that refuses
// any symbolic link and anything outside the root. ok is false when the
// fast path cannot answer (a link on the way, an old kernel): the caller
// then resolves the path step by step. missing is true when a component
// does not exist (no link came before it).
func (r *Root) openBeneath(rel string) (f *os.File, missing, ok bool) {
	if r.dirf == nil {
		return nil, false, false
	}
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(int(r.dirf.Fd()), rel, &how)
		switch err {
		case nil:
			return os.NewFile(uintptr(fd), rel), false, true
		case unix.EINTR, unix.EAGAIN:
			continue
		case unix.ENOENT:
			return nil, true, true
		default:
			return nil, false, false
		}
	}
}
