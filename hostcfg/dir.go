package hostcfg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/convergekit/converge"
)

// Dir is an Item for a directory (with its missing parents), its mode and,
// when Owner is set, its owner. Every directory created is made durable:
// the directory holding it is synced. Absent removes it when it is empty;
// a directory that still holds files fails to be removed, and a path that
// is a symbolic link (to a directory) is refused with ErrWrongType, the
// link left alone.
//
// The zero value has no Root and fails; set Root and Path at least.
type Dir struct {
	Root *Root
	// Path is the directory's path inside the root.
	Path string
	// Mode is the desired permission bits; 0 keeps an existing directory's
	// mode and creates new ones with 0755.
	Mode fs.FileMode
	// Owner, when set, is the desired owner and group, by number or name
	// (see Ownership). nil keeps the owner of an existing directory.
	Owner *Ownership
}

// DirState is the state of a Dir. In a goal, Mode 0 and UID/GID -1 mean
// "any".
type DirState struct {
	Path     string
	Exists   bool
	Mode     fs.FileMode
	UID, GID int
	// Diff is set on the state ApplyDry returns: the change it simulated
	// ("mkdir ...").
	Diff string
}

func (s DirState) diffText() string { return s.Diff }

var (
	_ converge.Item[DirState]    = (*Dir)(nil)
	_ converge.Cleaner[DirState] = (*Dir)(nil)
)

// ID returns "dir:" and the canonical path.
func (d *Dir) ID() converge.ID { return converge.ID("dir:" + canonical(d.Path)) }

// Node returns the item wrapped for a graph.
func (d *Dir) Node() converge.Node { return converge.Wrap[DirState](d) }

// read looks at the directory rel (resolved from name) through the root,
// and returns its state and its Lstat (nil when it does not exist).
func (d *Dir) read(name, rel string) (DirState, fs.FileInfo, error) {
	fi, err := d.Root.r.Lstat(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return DirState{Path: name, UID: -1, GID: -1}, nil, nil
		}
		return DirState{}, nil, d.Root.fail("stat", name, err)
	}
	if !fi.IsDir() {
		return DirState{}, nil, wrongType("stat", name, fi.Mode())
	}
	uid, gid := owner(fi)
	return DirState{Path: name, Exists: true, Mode: fi.Mode() & permBits, UID: uid, GID: gid}, fi, nil
}

// StateCurrent reads the directory.
func (d *Dir) StateCurrent(ctx context.Context, _ converge.DepStates) (DirState, error) {
	name, rel, err := resolveItem(d.Root, d.Path, true)
	if err != nil {
		return DirState{}, err
	}
	st, _, err := d.read(name, rel)
	return st, err
}

// StateGoal is the directory with Mode and Owner.
func (d *Dir) StateGoal(context.Context, converge.DepStates) (DirState, error) {
	name, err := cleanPath(d.Path)
	if err != nil {
		return DirState{}, err
	}
	if d.Mode&^permBits != 0 {
		return DirState{}, &ItemError{Item: string(d.ID()), Reason: fmt.Sprintf("mode %v has bits other than permissions", d.Mode)}
	}
	s := DirState{Path: name, Exists: true, Mode: d.Mode, UID: -1, GID: -1}
	if d.Owner != nil {
		if d.Root == nil || d.Root.r == nil {
			return DirState{}, &ItemError{Item: string(d.ID()), Reason: "Root is nil"}
		}
		if s.UID, s.GID, err = d.Root.ownerIDs(name, d.Owner); err != nil {
			return DirState{}, err
		}
	}
	return s, nil
}

// StateClean is the directory absent.
func (d *Dir) StateClean(context.Context, converge.DepStates) (DirState, error) {
	name, err := cleanPath(d.Path)
	if err != nil {
		return DirState{}, err
	}
	return DirState{Path: name, UID: -1, GID: -1}, nil
}

// Check compares existence and, when the target names them, mode and owner.
func (d *Dir) Check(_ context.Context, current, target DirState) (converge.Decision, error) {
	switch {
	case current.Exists != target.Exists:
		return converge.Required(1), nil
	case !target.Exists:
		return converge.NotRequired(), nil
	case target.Mode != 0 && current.Mode != target.Mode,
		target.UID >= 0 && current.UID != target.UID,
		target.GID >= 0 && current.GID != target.GID:
		return converge.Required(1), nil
	}
	return converge.NotRequired(), nil
}

// Apply creates (or removes) the directory and sets its mode and owner.
func (d *Dir) Apply(ctx context.Context, _, target DirState) (DirState, error) {
	return d.converge(ctx, target, true)
}

// ApplyDry returns the state Apply would reach, writing nothing.
func (d *Dir) ApplyDry(ctx context.Context, _, target DirState) (DirState, error) {
	return d.converge(ctx, target, false)
}

func (d *Dir) converge(ctx context.Context, target DirState, write bool) (DirState, error) {
	if err := ctx.Err(); err != nil {
		return DirState{}, err
	}
	name, rel, err := resolveItem(d.Root, d.Path, true)
	if err != nil {
		return DirState{}, err
	}
	unlock := d.Root.lock(rel)
	defer unlock()
	cur, seen, err := d.read(name, rel)
	if err != nil {
		return DirState{}, err
	}
	if !target.Exists {
		out := DirState{Path: name, UID: -1, GID: -1}
		if cur.Exists {
			// The path itself must be the directory: a symbolic link to
			// one is refused, not removed in its place.
			_, lrel, err := resolveItem(d.Root, d.Path, false)
			if err != nil {
				return DirState{}, err
			}
			if fi, err := d.Root.r.Lstat(lrel); err == nil && !fi.IsDir() {
				return DirState{}, wrongType("remove", name, fi.Mode())
			}
			out.Diff = fmt.Sprintf("rmdir %s\n", name)
			if write {
				if err := d.Root.remove(name, lrel); err != nil {
					return DirState{}, err
				}
			}
		}
		return out, nil
	}
	m, err := planMeta(name, cur.Exists, cur.Mode, cur.UID, cur.GID, target.Mode, target.UID, target.GID, 0o755)
	if err != nil {
		return DirState{}, err
	}
	out := DirState{Path: name, Exists: true, Mode: m.mode, UID: m.uid, GID: m.gid}
	if !cur.Exists {
		out.Diff = fmt.Sprintf("mkdir %s (%04o)\n", name, uint32(m.mode.Perm()))
	} else {
		out.Diff = metaDiff(name, cur.Mode, m.mode, cur.UID, cur.GID, m.uid, m.gid)
	}
	if !write {
		return out, nil
	}
	if d.Root.afterResolve != nil {
		d.Root.afterResolve(rel)
	}
	if !cur.Exists {
		if err := d.Root.mkdirAll(name, rel, m.mode&fs.ModePerm); err != nil {
			return DirState{}, err
		}
		seen = nil // just made: whatever is there now
	}
	if err := d.Root.setMeta(name, rel, true, seen, m); err != nil {
		return DirState{}, err
	}
	return out, nil
}

// mkdirAll creates the directory rel (resolved from name) and its missing
// parents with mode perm, as os.Root.MkdirAll does, and syncs the
// directory holding each one created.
func (r *Root) mkdirAll(name, rel string, perm fs.FileMode) error {
	comps := splitRel(rel)
	var created []string
	for i := range comps {
		p := path.Join(comps[:i+1]...)
		fi, err := r.r.Lstat(p)
		if err == nil {
			if !fi.IsDir() {
				// A link swapped in is reported as the escape it may be.
				return r.fail("mkdir", name, fmt.Errorf("%w (a %s)", ErrWrongType, kindOf(fi.Mode())))
			}
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return r.fail("mkdir", name, err)
		}
		if err := r.r.Mkdir(p, perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return r.fail("mkdir", name, err)
		}
		created = append(created, p)
	}
	for _, p := range created {
		if err := r.syncDir(name, path.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}
