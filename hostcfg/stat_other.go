//go:build !linux

package hostcfg

import (
	"io/fs"
	"os"
)

// stampOf reports no identity outside Linux, which turns the read cache of
// ConfigFile off: every look reads the file.
func stampOf(fs.FileInfo) (fileStamp, bool) { return fileStamp{}, false }

// stampBeneath has no fast path outside Linux.
func (r *Root) stampBeneath(string) (fileStamp, bool) { return fileStamp{}, false }

// lchownLeaf changes the owner of the symbolic link rel (resolved from
// name) through the os.Root, which keeps the change inside the root.
func (r *Root) lchownLeaf(name, rel string, _ fs.FileInfo, uid, gid int) error {
	if err := r.r.Lchown(rel, uid, gid); err != nil {
		return r.fail("lchown", name, err)
	}
	return nil
}

// openBeneath has no fast path outside Linux.
func (r *Root) openBeneath(string) (f *os.File, missing, ok bool) { return nil, false, false }
