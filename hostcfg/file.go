package hostcfg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/convergekit/converge"
)

// File is an Item for a regular file: its content, mode and, when Owner is
// set, its owner and group. Present writes the file atomically; Absent
// removes it. Symbolic links on the way to the file, the last one
// included, are followed inside the root; a directory or other special
// file at the path is refused with ErrWrongType.
//
// A file that has other hard links (which may lie outside the root) is
// never changed in place: a new content, mode or owner is written to a new
// inode renamed over the path, so the other names keep the old file. A
// file with one link gets a mode or owner change in place, through a
// handle that is checked to be the file read.
//
// The zero value has no Root and fails; set Root and Path at least.
type File struct {
	// Root resolves Path.
	Root *Root
	// Path is the file's path inside the root, such as "/etc/motd".
	Path string
	// Content is the whole desired content.
	Content []byte
	// Mode is the desired permission bits; 0 keeps the mode of an existing
	// file and creates new files with 0644.
	Mode fs.FileMode
	// Owner, when set, is the desired owner and group, by number or name
	// (see Ownership); changing them needs root. nil keeps the owner of an
	// existing file.
	Owner *Ownership
	// Sensitive keeps the content out of dry-run diffs: the diff says only
	// that the content changes and its sizes. Use it for keys, tokens and
	// passwords. The states in a Report still hold the content in memory.
	Sensitive bool
}

// FileState is the state of a File.
type FileState struct {
	// Path is the canonical path ("/etc/motd").
	Path   string
	Exists bool
	// Content is the file's content (nil when it does not exist).
	Content []byte
	// Mode holds the permission bits; 0 in a goal means "any".
	Mode fs.FileMode
	// UID and GID are the owner; -1 in a goal means "any".
	UID, GID int
	// Leftovers counts temporary files of ours next to the file, left by a
	// crashed write. A current state with leftovers requires Apply, which
	// removes them.
	Leftovers int
	// Diff is the unified diff of the change ApplyDry simulated; it is set
	// only on the states ApplyDry returns.
	Diff string
}

func (s FileState) diffText() string { return s.Diff }

var (
	_ converge.Item[FileState]    = (*File)(nil)
	_ converge.Cleaner[FileState] = (*File)(nil)
)

// ID returns "file:" and the canonical path.
func (f *File) ID() converge.ID { return converge.ID("file:" + canonical(f.Path)) }

// Node returns the item wrapped for a graph.
func (f *File) Node() converge.Node { return converge.Wrap[FileState](f) }

// StateCurrent reads the file.
func (f *File) StateCurrent(ctx context.Context, _ converge.DepStates) (FileState, error) {
	if f.Root == nil || f.Root.r == nil {
		return FileState{}, &ItemError{Item: string(f.ID()), Reason: "Root is nil"}
	}
	name, rel, fi, err := f.Root.readResolved(f.Path)
	if err != nil {
		return FileState{}, err
	}
	return fileState(name, fi, len(f.Root.leftovers(rel))), nil
}

func fileState(name string, fi fileInfo, leftovers int) FileState {
	if !fi.exists {
		return FileState{Path: name, UID: -1, GID: -1, Leftovers: leftovers}
	}
	return FileState{Path: name, Exists: true, Content: fi.content, Mode: fi.mode, UID: fi.uid, GID: fi.gid, Leftovers: leftovers}
}

// StateGoal is the file with Content, Mode and Owner.
func (f *File) StateGoal(context.Context, converge.DepStates) (FileState, error) {
	name, err := cleanPath(f.Path)
	if err != nil {
		return FileState{}, err
	}
	if f.Mode&^permBits != 0 {
		return FileState{}, &ItemError{Item: string(f.ID()), Reason: fmt.Sprintf("mode %v has bits other than permissions", f.Mode)}
	}
	s := FileState{Path: name, Exists: true, Content: f.Content, Mode: f.Mode, UID: -1, GID: -1}
	if s.Content == nil {
		s.Content = []byte{}
	}
	if f.Owner != nil {
		if f.Root == nil || f.Root.r == nil {
			return FileState{}, &ItemError{Item: string(f.ID()), Reason: "Root is nil"}
		}
		if s.UID, s.GID, err = f.Root.ownerIDs(name, f.Owner); err != nil {
			return FileState{}, err
		}
	}
	return s, nil
}

// StateClean is the file absent.
func (f *File) StateClean(context.Context, converge.DepStates) (FileState, error) {
	name, err := cleanPath(f.Path)
	if err != nil {
		return FileState{}, err
	}
	return FileState{Path: name, UID: -1, GID: -1}, nil
}

// Check compares existence, content and, when the target names them, mode
// and owner. Leftover temporary files also require Apply.
func (f *File) Check(_ context.Context, current, target FileState) (converge.Decision, error) {
	switch {
	case current.Leftovers > 0:
		return converge.Required(1), nil
	case current.Exists != target.Exists:
		return converge.Required(len(target.Content)), nil
	case !target.Exists:
		return converge.NotRequired(), nil
	case !bytes.Equal(current.Content, target.Content):
		return converge.Required(len(target.Content)), nil
	case target.Mode != 0 && current.Mode != target.Mode,
		target.UID >= 0 && current.UID != target.UID,
		target.GID >= 0 && current.GID != target.GID:
		return converge.Required(1), nil
	}
	return converge.NotRequired(), nil
}

// Apply writes (or removes) the file.
func (f *File) Apply(ctx context.Context, _, target FileState) (FileState, error) {
	return f.converge(ctx, target, true)
}

// ApplyDry returns the state Apply would reach, with its diff, writing
// nothing.
func (f *File) ApplyDry(ctx context.Context, _, target FileState) (FileState, error) {
	return f.converge(ctx, target, false)
}

// diff renders the content change for a dry run, hiding the content of a
// Sensitive file.
func (f *File) diff(name string, old, new []byte, oldExists, newExists bool) string {
	if !f.Sensitive {
		return unifiedDiff(name, old, new, oldExists, newExists)
	}
	if oldExists == newExists && bytes.Equal(old, new) {
		return ""
	}
	size := func(b []byte, exists bool) string {
		if !exists {
			return "absent"
		}
		return fmt.Sprintf("%d bytes", len(b))
	}
	return fmt.Sprintf("content of %s changes (sensitive, not shown): %s -> %s\n", name, size(old, oldExists), size(new, newExists))
}

func (f *File) converge(ctx context.Context, target FileState, write bool) (FileState, error) {
	if err := ctx.Err(); err != nil {
		return FileState{}, err
	}
	name, rel, err := resolveItem(f.Root, f.Path, true)
	if err != nil {
		return FileState{}, err
	}
	unlock := f.Root.lock(rel)
	defer unlock()
	_, rel2, cur, err := f.Root.readResolved(f.Path)
	if err != nil {
		return FileState{}, err
	}
	if rel2 != rel {
		return FileState{}, &PathError{Op: "write", Path: name, Err: errors.New("the path changed while it was written")}
	}
	if write {
		if err := f.Root.sweep(name, rel); err != nil {
			return FileState{}, err
		}
	}
	if !target.Exists {
		out := FileState{Path: name, UID: -1, GID: -1}
		if !write {
			out.Diff = f.diff(name, cur.content, nil, cur.exists, false)
		}
		if write && cur.exists {
			_, lrel, err := resolveItem(f.Root, f.Path, false)
			if err != nil {
				return FileState{}, err
			}
			if err := f.Root.remove(name, lrel); err != nil {
				return FileState{}, err
			}
		}
		return out, nil
	}
	meta, err := planMeta(name, cur.exists, cur.mode, cur.uid, cur.gid, target.Mode, target.UID, target.GID, 0o644)
	if err != nil {
		return FileState{}, err
	}
	out := FileState{Path: name, Exists: true, Content: target.Content, Mode: meta.mode, UID: meta.uid, GID: meta.gid}
	if !write {
		out.Diff = f.diff(name, cur.content, target.Content, cur.exists, true)
		if cur.exists {
			out.Diff += metaDiff(name, cur.mode, meta.mode, cur.uid, cur.gid, meta.uid, meta.gid)
		}
		return out, nil
	}
	// A file with another hard link (maybe outside the root) is never
	// changed in place: a new mode or owner comes with a new inode.
	if !cur.exists || !bytes.Equal(cur.content, target.Content) || hardLinked(cur.stat) {
		err = f.Root.writeAtomic(ctx, name, rel, target.Content, meta.spec())
	} else {
		err = f.Root.setMeta(name, rel, false, cur.stat, meta)
	}
	if err != nil {
		return FileState{}, err
	}
	return out, nil
}
