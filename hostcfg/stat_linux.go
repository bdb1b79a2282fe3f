package hostcfg

import (
	"io/fs"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// stampOf returns what identifies the version of a file whose stat is fi,
// for the read cache. ok is false when fi carries no such data.
func stampOf(fi fs.FileInfo) (st fileStamp, ok bool) {
	sys, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat {
		return fileStamp{}, false
	}
	return fileStamp{
		dev: uint64(sys.Dev), ino: uint64(sys.Ino), size: int64(sys.Size),
		mtime: sys.Mtim.Nano(), ctime: sys.Ctim.Nano(),
	}, true
}

// stampBeneath returns the stamp of the regular file at rel (root-relative,
// already cleaned) as one openat2 call finds it below the root's directory,
// refusing any symbolic link on the way and anything outside the root, and
// an fstat of what it opened (O_PATH: the file is not read). ok is false
// when it finds no regular file there, or cannot look (an old kernel): the
// caller then takes the slow path, which tells why.
func (r *Root) stampBeneath(rel string) (st fileStamp, ok bool) {
	if r.dirf == nil {
		return fileStamp{}, false
	}
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(int(r.dirf.Fd()), rel, &how)
	if err != nil {
		return fileStamp{}, false
	}
	var sys unix.Stat_t
	err = unix.Fstat(fd, &sys)
	unix.Close(fd)
	if err != nil || sys.Mode&unix.S_IFMT != unix.S_IFREG {
		return fileStamp{}, false
	}
	return fileStamp{
		dev: uint64(sys.Dev), ino: uint64(sys.Ino), size: int64(sys.Size),
		mtime: sys.Mtim.Nano(), ctime: sys.Ctim.Nano(),
	}, true
}

// lchownLeaf changes the owner of the symbolic link rel (resolved from
// name) in place, through a handle opened through the root without
// following it (O_PATH), so that nothing can be swapped in between the
// check and the change: the handle must be the link read (same) and have
// no other hard link.
func (r *Root) lchownLeaf(name, rel string, same fs.FileInfo, uid, gid int) error {
	dir, base := path.Split(rel)
	d, err := r.r.Open(dirName(dir))
	if err != nil {
		return r.fail("lchown", name, err)
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return r.fail("lchown", name, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &PathError{Op: "lchown", Path: name, Err: err}
	}
	if sys, ok := same.Sys().(*syscall.Stat_t); !ok || uint64(sys.Dev) != uint64(st.Dev) || uint64(sys.Ino) != uint64(st.Ino) {
		return &PathError{Op: "lchown", Path: name, Err: errMetaChanged}
	}
	if st.Nlink != 1 {
		return &PathError{Op: "lchown", Path: name, Err: ErrHardLinked}
	}
	if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &PathError{Op: "lchown", Path: name, Err: err}
	}
	return nil
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
