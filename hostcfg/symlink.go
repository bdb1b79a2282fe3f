package hostcfg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/convergekit/converge"
)

// Symlink is an Item for a symbolic link at Path pointing to Target. The
// link is created atomically (a temporary link renamed into place);
// Absent removes it. A link that has other hard links is never changed in
// place: a new owner comes with a new link renamed over it. A Target that would lead outside the root is refused
// with an *EscapeError, and a file or directory at Path with ErrWrongType.
//
// The zero value has no Root and fails; set Root, Path and Target.
type Symlink struct {
	Root *Root
	// Path is where the link is, inside the root.
	Path string
	// Target is the link's content, relative to the link's directory or
	// absolute (an absolute target must lie inside the root's directory).
	Target string
	// Owner, when set, is the desired owner and group of the link itself
	// (not of its target), by number or name (see Ownership); changing
	// them needs root. nil keeps the owner of an existing link.
	Owner *Ownership
}

// SymlinkState is the state of a Symlink.
type SymlinkState struct {
	Path   string
	Exists bool
	// Target is the link's content.
	Target string
	// UID and GID are the owner of the link; -1 in a goal means "any".
	UID, GID int
	// Leftovers counts temporary links of ours next to the link, left by a
	// crashed run. A current state with leftovers requires Apply, which
	// removes them.
	Leftovers int
	// Diff is set on the state ApplyDry returns: the change it simulated.
	Diff string
}

func (s SymlinkState) diffText() string { return s.Diff }

var (
	_ converge.Item[SymlinkState]    = (*Symlink)(nil)
	_ converge.Cleaner[SymlinkState] = (*Symlink)(nil)
)

// ID returns "symlink:" and the canonical path.
func (l *Symlink) ID() converge.ID { return converge.ID("symlink:" + canonical(l.Path)) }

// Node returns the item wrapped for a graph.
func (l *Symlink) Node() converge.Node { return converge.Wrap[SymlinkState](l) }

// read looks at the link rel (resolved from name) through the root, and
// returns its state and its Lstat (nil when it does not exist).
func (l *Symlink) read(name, rel string) (SymlinkState, fs.FileInfo, error) {
	fi, err := l.Root.r.Lstat(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return SymlinkState{Path: name, UID: -1, GID: -1}, nil, nil
		}
		return SymlinkState{}, nil, l.Root.fail("stat", name, err)
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return SymlinkState{}, nil, wrongType("stat", name, fi.Mode())
	}
	t, err := l.Root.r.Readlink(rel)
	if err != nil {
		return SymlinkState{}, nil, l.Root.fail("readlink", name, err)
	}
	uid, gid := owner(fi)
	return SymlinkState{Path: name, Exists: true, Target: t, UID: uid, GID: gid}, fi, nil
}

// StateCurrent reads the link.
func (l *Symlink) StateCurrent(ctx context.Context, _ converge.DepStates) (SymlinkState, error) {
	name, rel, err := resolveItem(l.Root, l.Path, false)
	if err != nil {
		return SymlinkState{}, err
	}
	st, _, err := l.read(name, rel)
	if err != nil {
		return SymlinkState{}, err
	}
	st.Leftovers = len(l.Root.leftovers(rel))
	return st, nil
}

// StateGoal is the link pointing to Target. A target leading outside the
// root is an *EscapeError.
func (l *Symlink) StateGoal(context.Context, converge.DepStates) (SymlinkState, error) {
	name, rel, err := resolveItem(l.Root, l.Path, false)
	if err != nil {
		return SymlinkState{}, err
	}
	if l.Target == "" {
		return SymlinkState{}, &ItemError{Item: string(l.ID()), Reason: "Target is empty"}
	}
	if path.IsAbs(l.Target) {
		if _, ok := l.Root.inside(l.Target); !ok {
			return SymlinkState{}, &EscapeError{Path: name, Link: rel, Target: l.Target}
		}
	} else if escapes(splitDir(rel), l.Target) {
		return SymlinkState{}, &EscapeError{Path: name, Link: rel, Target: l.Target}
	}
	st := SymlinkState{Path: name, Exists: true, Target: l.Target, UID: -1, GID: -1}
	if l.Owner != nil {
		if st.UID, st.GID, err = l.Root.ownerIDs(name, l.Owner); err != nil {
			return SymlinkState{}, err
		}
	}
	return st, nil
}

// StateClean is the link absent.
func (l *Symlink) StateClean(context.Context, converge.DepStates) (SymlinkState, error) {
	name, err := cleanPath(l.Path)
	if err != nil {
		return SymlinkState{}, err
	}
	return SymlinkState{Path: name, UID: -1, GID: -1}, nil
}

// Check compares existence, target and, when the target state names them,
// owner and group; leftover temporary links also require Apply.
func (l *Symlink) Check(_ context.Context, current, target SymlinkState) (converge.Decision, error) {
	if current.Exists != target.Exists || current.Leftovers > 0 ||
		(target.Exists && (current.Target != target.Target ||
			target.UID >= 0 && current.UID != target.UID || target.GID >= 0 && current.GID != target.GID)) {
		return converge.Required(1), nil
	}
	return converge.NotRequired(), nil
}

// Apply creates, re-points or removes the link.
func (l *Symlink) Apply(ctx context.Context, _, target SymlinkState) (SymlinkState, error) {
	return l.converge(ctx, target, true)
}

// ApplyDry returns the state Apply would reach, writing nothing.
func (l *Symlink) ApplyDry(ctx context.Context, _, target SymlinkState) (SymlinkState, error) {
	return l.converge(ctx, target, false)
}

func (l *Symlink) converge(ctx context.Context, target SymlinkState, write bool) (SymlinkState, error) {
	if err := ctx.Err(); err != nil {
		return SymlinkState{}, err
	}
	name, rel, err := resolveItem(l.Root, l.Path, false)
	if err != nil {
		return SymlinkState{}, err
	}
	unlock := l.Root.lock(rel)
	defer unlock()
	cur, seen, err := l.read(name, rel)
	if err != nil {
		return SymlinkState{}, err
	}
	if write {
		if err := l.Root.sweep(name, rel); err != nil {
			return SymlinkState{}, err
		}
	}
	if !target.Exists {
		out := SymlinkState{Path: name, UID: -1, GID: -1}
		if cur.Exists {
			out.Diff = fmt.Sprintf("rm %s (-> %s)\n", name, cur.Target)
			if write {
				if err := l.Root.remove(name, rel); err != nil {
					return SymlinkState{}, err
				}
			}
		}
		return out, nil
	}
	m, err := planMeta(name, cur.Exists, 0, cur.UID, cur.GID, 0, target.UID, target.GID, 0)
	if err != nil {
		return SymlinkState{}, err
	}
	out := SymlinkState{Path: name, Exists: true, Target: target.Target, UID: m.uid, GID: m.gid}
	relink := !cur.Exists || cur.Target != target.Target
	switch {
	case !relink:
		out.Diff = metaDiff(name, 0, 0, cur.UID, cur.GID, m.uid, m.gid)
	case cur.Exists:
		out.Diff = fmt.Sprintf("ln -sf %s %s (was -> %s)\n", target.Target, name, cur.Target)
	default:
		out.Diff = fmt.Sprintf("ln -s %s %s\n", target.Target, name)
	}
	if !write || out.Diff == "" {
		return out, nil
	}
	if l.Root.afterResolve != nil {
		l.Root.afterResolve(rel)
	}
	// A link with other hard links (maybe outside the root) gets its new
	// owner as a new link, never in place.
	if relink || linkCount(seen) != 1 {
		err = l.Root.symlinkAtomic(ctx, name, rel, target.Target, m.spec())
	} else if err = ctx.Err(); err == nil {
		err = l.Root.lchownLeaf(name, rel, seen, m.uid, m.gid)
	}
	if err != nil {
		return SymlinkState{}, err
	}
	return out, nil
}

// symlinkAtomic makes rel (resolved from name) a symbolic link to target,
// owned as spec says: a temporary link next to it is given its owner,
// renamed over it, and the directory is synced. The temporary link never
// outlives a failure.
func (r *Root) symlinkAtomic(ctx context.Context, name, rel, target string, spec writeSpec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir, tmp := tempName(rel)
	r.noteTemp(dir, path.Base(tmp))
	defer r.forgetTemp(dir, path.Base(tmp))
	if err := r.r.Symlink(target, tmp); err != nil {
		return r.fail("symlink", name, err)
	}
	err := func() error {
		if spec.uid >= 0 || spec.gid >= 0 {
			if err := r.r.Lchown(tmp, spec.uid, spec.gid); err != nil {
				return &PathError{Op: "lchown", Path: name, Err: err}
			}
		}
		if err := r.r.Rename(tmp, rel); err != nil {
			return r.fail("rename", name, err)
		}
		return nil
	}()
	if err != nil {
		if rerr := r.r.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, &PathError{Op: "remove temporary link", Path: name, Err: rerr})
		}
		return err
	}
	return r.syncDir(name, dir)
}
