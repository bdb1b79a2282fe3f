//go:build !unix

package docker

import "context"

// statfsFree is the default FreeSpaceFunc; on this system the free space
// is unknown, so no space is checked.
func statfsFree(context.Context, string) (uint64, bool, error) { return 0, false, nil }
