package hostcfg

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strings"
)

// fileInfo is what hostcfg reads of a regular file.
type fileInfo struct {
	exists  bool
	content []byte
	mode    fs.FileMode
	uid     int
	gid     int
	// stat is the fstat of the file read (nil when it does not exist).
	stat fs.FileInfo
}

// readAttempts bounds how often readResolved resolves a path again when
// the file it opened is not the one resolution saw.
const readAttempts = 4

// errReadChanged is the cause of a read that kept finding another file at
// the path than the one resolution had seen (the path is being swapped).
var errReadChanged = errors.New("the path changed while it was read")

// readResolved resolves the item path p (following every link) and reads
// the regular file there. A missing file is not an error; a path holding
// another kind of file is ErrWrongType.
//
// Nothing is looked at by its host path. A path without links is opened
// in one openat2 call that cannot leave the root. Otherwise resolution
// looks at each component through the os.Root, and the file it found is
// opened through the os.Root as well, its last component without
// following a link (openLeaf); the file is kept only if it is the very
// file resolution saw (os.SameFile), else the path is resolved again (a
// component was swapped meanwhile), and after readAttempts the read fails.
func (r *Root) readResolved(p string) (name, rel string, fi fileInfo, err error) {
	name, err = cleanPath(p)
	if err != nil {
		return "", "", fileInfo{}, err
	}
	if r == nil || r.r == nil {
		return "", "", fileInfo{}, &ItemError{Item: name, Reason: "Root is nil"}
	}
	r.reads.Add(1)
	// Fast path: no link on the way, one kernel call that cannot leave the
	// root. Paths with ".." take the slow path, whose rel is resolved.
	if strings.Contains(name, "/..") {
		// resolveInfo below
	} else if f, missing, ok := r.openBeneath(name[1:]); ok {
		if missing {
			return name, name[1:], fileInfo{}, nil
		}
		fi, err = readOpen(name, f)
		return name, name[1:], fi, err
	}
	for attempt := 1; ; attempt++ {
		rel, seen, err := r.resolveInfo(name, true)
		if err != nil {
			return "", "", fileInfo{}, err
		}
		if seen == nil {
			return name, rel, fileInfo{}, nil
		}
		if !seen.Mode().IsRegular() {
			return "", "", fileInfo{}, wrongType("read", name, seen.Mode())
		}
		if r.beforeOpen != nil {
			r.beforeOpen(rel)
		}
		f, err := r.openLeaf(rel, os.O_RDONLY|openNonBlock)
		if err == nil {
			st, serr := f.Stat()
			if serr == nil && os.SameFile(st, seen) {
				fi, err = readOpen(name, f)
				return name, rel, fi, err
			}
			f.Close()
			err = errReadChanged
		}
		// Whatever failed (the file swapped, removed, a link or a
		// directory swapped in), resolving again tells what is there now.
		if attempt == readAttempts {
			if errors.Is(err, errReadChanged) {
				return "", "", fileInfo{}, &PathError{Op: "read", Path: name, Err: err}
			}
			return "", "", fileInfo{}, r.fail("read", name, err)
		}
	}
}

// readOpen reads the open file f, which must be a regular file, and
// closes it. f is opened without blocking (openNonBlock), so that a named
// pipe at the path is refused here instead of waiting for a writer.
func readOpen(name string, f *os.File) (fileInfo, error) {
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fileInfo{}, &PathError{Op: "read", Path: name, Err: err}
	}
	if !st.Mode().IsRegular() {
		return fileInfo{}, wrongType("read", name, st.Mode())
	}
	var buf bytes.Buffer
	buf.Grow(int(st.Size()) + 512)
	if _, err := buf.ReadFrom(f); err != nil {
		return fileInfo{}, &PathError{Op: "read", Path: name, Err: err}
	}
	uid, gid := owner(st)
	return fileInfo{exists: true, content: buf.Bytes(), mode: st.Mode() & permBits, uid: uid, gid: gid, stat: st}, nil
}

// peek reads the file at p for StateCurrent: its content (nil when
// missing) and the number of leftover temporary files next to it.
func (r *Root) peek(p string) (name string, content []byte, exists bool, leftovers int, err error) {
	name, rel, fi, err := r.readResolved(p)
	if err != nil {
		return "", nil, false, 0, err
	}
	return name, fi.content, fi.exists, len(r.leftovers(rel)), nil
}
