//go:build unix

package docker

import (
	"context"
	"errors"
	"io/fs"
	"syscall"
)

// statfsFree is the default FreeSpaceFunc: statfs(2) of dir, the space
// available to unprivileged users. A dir that is empty or not visible
// from this process (an agent in a container without the engine's data
// root mounted) is unknown.
func statfsFree(_ context.Context, dir string) (uint64, bool, error) {
	if dir == "" {
		return 0, false, nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return 0, false, nil
		}
		return 0, false, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true, nil //nolint:gosec // sizes are not negative
}
