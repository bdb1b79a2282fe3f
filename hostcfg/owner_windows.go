//go:build windows

package hostcfg

import "io/fs"

// ownersSupported says whether files have numeric owners here: not on
// Windows, where an item with an Owner fails with ErrOwnerUnsupported.
const ownersSupported = false

// owner returns -1s: Windows files have no numeric owner.
func owner(fs.FileInfo) (int, int) { return -1, -1 }
