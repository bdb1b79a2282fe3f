//go:build unix

package hostcfg

import (
	"io/fs"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// openNonBlock opens a file to read without blocking on a named pipe.
const openNonBlock = syscall.O_NONBLOCK

// openLeaf opens the file at rel (root-relative, resolved) without
// following a last symbolic link: its directory is opened through the
// os.Root (so a directory swapped for a link to outside is refused), and
// the last component is opened relative to that directory handle with
// O_NOFOLLOW, so a link swapped in there fails (ELOOP) instead of being
// followed. The caller checks that it opened the file it expected.
func (r *Root) openLeaf(rel string, flag int) (*os.File, error) {
	dir, base := path.Split(rel)
	d, err := r.r.Open(dirName(dir))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	for {
		fd, err := unix.Openat(int(d.Fd()), base, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch err {
		case nil:
			return os.NewFile(uintptr(fd), rel), nil
		case unix.EINTR:
			continue
		default:
			return nil, &fs.PathError{Op: "openat", Path: rel, Err: err}
		}
	}
}
