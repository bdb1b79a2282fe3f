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

// openBeneath has no fast path outside Linux.
func (r *Root) openBeneath(string) (f *os.File, missing, ok bool) { return nil, false, false }
