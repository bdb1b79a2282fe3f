//go:build windows

package hostcfg

import "io/fs"

// ownersSupported says whether files have numeric owners here: not on
// Windows, where an item with an Owner fails with ErrOwnerUnsupported.
const ownersSupported = false

// linkCount returns 0: the link count is not known here, and a file
// whose count is not 1 is treated as hard linked.
func linkCount(fs.FileInfo) uint64 { return 0 }

// owner returns -1s: Windows files have no numeric owner.
func owner(fs.FileInfo) (int, int) { return -1, -1 }
