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
// Absent removes it. A Target that would lead outside the root is refused
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
}

// SymlinkState is the state of a Symlink.
type SymlinkState struct {
	Path   string
	Exists bool
	// Target is the link's content.
	Target string
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

func (l *Symlink) read(name, rel string) (SymlinkState, error) {
	fi, err := l.Root.r.Lstat(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return SymlinkState{Path: name}, nil
		}
		return SymlinkState{}, l.Root.fail("stat", name, err)
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return SymlinkState{}, wrongType("stat", name, fi.Mode())
	}
	t, err := l.Root.r.Readlink(rel)
	if err != nil {
		return SymlinkState{}, l.Root.fail("readlink", name, err)
	}
	return SymlinkState{Path: name, Exists: true, Target: t}, nil
}

// StateCurrent reads the link.
func (l *Symlink) StateCurrent(ctx context.Context, _ converge.Deps) (SymlinkState, error) {
	name, rel, err := resolveItem(l.Root, l.Path, false)
	if err != nil {
		return SymlinkState{}, err
	}
	return l.read(name, rel)
}

// StateGoal is the link pointing to Target. A target leading outside the
// root is an *EscapeError.
func (l *Symlink) StateGoal(context.Context, converge.Deps) (SymlinkState, error) {
	name, rel, err := resolveItem(l.Root, l.Path, false)
	if err != nil {
		return SymlinkState{}, err
	}
	if l.Target == "" {
		return SymlinkState{}, &ItemError{Item: string(l.ID()), Reason: "empty Target"}
	}
	if path.IsAbs(l.Target) {
		if _, ok := l.Root.inside(l.Target); !ok {
			return SymlinkState{}, &EscapeError{Path: name, Link: rel, Target: l.Target}
		}
	} else if escapes(splitDir(rel), l.Target) {
		return SymlinkState{}, &EscapeError{Path: name, Link: rel, Target: l.Target}
	}
	return SymlinkState{Path: name, Exists: true, Target: l.Target}, nil
}

// StateClean is the link absent.
func (l *Symlink) StateClean(context.Context, converge.Deps) (SymlinkState, error) {
	name, err := cleanPath(l.Path)
	if err != nil {
		return SymlinkState{}, err
	}
	return SymlinkState{Path: name}, nil
}

// Check compares existence and target.
func (l *Symlink) Check(_ context.Context, current, target SymlinkState) (converge.Decision, error) {
	if current.Exists != target.Exists || (target.Exists && current.Target != target.Target) {
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
	cur, err := l.read(name, rel)
	if err != nil {
		return SymlinkState{}, err
	}
	if !target.Exists {
		out := SymlinkState{Path: name}
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
	out := SymlinkState{Path: name, Exists: true, Target: target.Target}
	if cur.Exists {
		out.Diff = fmt.Sprintf("ln -sf %s %s (was -> %s)\n", target.Target, name, cur.Target)
	} else {
		out.Diff = fmt.Sprintf("ln -s %s %s\n", target.Target, name)
	}
	if !write {
		return out, nil
	}
	if l.Root.afterResolve != nil {
		l.Root.afterResolve(rel)
	}
	dir, tmp := tempName(rel)
	if err := l.Root.r.Symlink(target.Target, tmp); err != nil {
		return SymlinkState{}, l.Root.fail("symlink", name, err)
	}
	if err := l.Root.r.Rename(tmp, rel); err != nil {
		_ = l.Root.r.Remove(tmp)
		return SymlinkState{}, l.Root.fail("rename", name, err)
	}
	if err := l.Root.syncDir(name, dir); err != nil {
		return SymlinkState{}, err
	}
	return out, nil
}
