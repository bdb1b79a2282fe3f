//go:build windows

package hostcfg

// Windows has no named pipes in the file system and no O_NOFOLLOW:
// resolution already followed the links, and the file opened is checked
// to be the one resolution saw.
const (
	openNoFollow = 0
	openNonBlock = 0
)
