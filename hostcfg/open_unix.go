//go:build unix

package hostcfg

import "syscall"

// Flags for opening a file to read: without following a last symbolic link
// (resolution already followed the links, inside the root), and without
// blocking on a named pipe.
const (
	openNoFollow = syscall.O_NOFOLLOW
	openNonBlock = syscall.O_NONBLOCK
)
