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

// readResolved resolves the item path p (following every link) and reads
// the regular file there. A missing file is not an error; a path holding
// another kind of file is ErrWrongType.
//
// The file is opened by its host path without following a last link, and
// kept only if it is the very file resolution saw; otherwise (a component
// was swapped meanwhile) it is opened again through os.Root.
func (r *Root) readResolved(p string) (name, rel string, fi fileInfo, err error) {
	name, err = cleanPath(p)
	if err != nil {
		return "", "", fileInfo{}, err
	}
	if r == nil || r.r == nil {
		return "", "", fileInfo{}, &ItemError{Item: name, Reason: "nil Root"}
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
	f, err := os.OpenFile(r.host(rel), os.O_RDONLY|openNoFollow|openNonBlock, 0)
	if err == nil {
		if st, serr := f.Stat(); serr != nil || !os.SameFile(st, seen) {
			f.Close()
			f, err = nil, errors.New("changed")
		}
	}
	if err != nil {
		if f, err = r.r.OpenFile(rel, os.O_RDONLY|openNonBlock, 0); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return name, rel, fileInfo{}, nil
			}
			return "", "", fileInfo{}, r.fail("read", name, err)
		}
	}
	fi, err = readOpen(name, f)
	return name, rel, fi, err
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
