//go:build windows

package hostcfg

import "os"

// openNonBlock is 0: Windows has no named pipes in the file system.
const openNonBlock = 0

// openLeaf opens the file at rel (root-relative, resolved) through the
// os.Root. Windows cannot refuse a last link here: the caller checks that
// it opened the file it expected.
func (r *Root) openLeaf(rel string, flag int) (*os.File, error) {
	return r.r.OpenFile(rel, flag, 0)
}
