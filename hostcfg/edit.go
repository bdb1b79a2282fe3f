package hostcfg

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
)

// editResult is the outcome of an edit of a file's content.
type editResult struct {
	// name is the canonical path of the file.
	name string
	// before and after are the content before and after the edit; exists
	// and existsAfter say whether the file exists.
	before, after       []byte
	exists, existsAfter bool
	// leftovers counts temporary files of ours next to the file (before).
	leftovers int
	// diff is the unified diff of the edit, "" when nothing changes; only
	// computed for a dry run.
	diff string
}

// changed reports whether the edit changes the content.
func (e editResult) changed() bool {
	return e.exists != e.existsAfter || !bytes.Equal(e.before, e.after)
}

// edit reads the file at p (following links inside the root), computes its
// new content with fn, and, when write is set, writes it atomically, keeping
// the file's mode and owner (a new file gets newMode). fn receives nil for a
// missing file and returns nil to leave it missing. The file is locked for
// the whole edit, so concurrent edits of one file never lose each other's
// changes.
func (r *Root) edit(ctx context.Context, p string, write bool, newMode fs.FileMode, fn func(cur []byte) ([]byte, error)) (editResult, error) {
	if err := ctx.Err(); err != nil {
		return editResult{}, err
	}
	name, rel, err := resolveItem(r, p, true)
	if err != nil {
		return editResult{}, err
	}
	unlock := r.lock(rel)
	defer unlock()
	// Read again under the lock: another edit may have just written.
	name, rel2, cur, err := r.readResolved(p)
	if err != nil {
		return editResult{}, err
	}
	if rel2 != rel {
		return editResult{}, &PathError{Op: "edit", Path: name, Err: errors.New("the path changed while it was edited")}
	}
	var in []byte
	if cur.exists {
		in = cur.content
		if in == nil {
			in = []byte{}
		}
	}
	next, err := fn(in)
	if err != nil {
		return editResult{}, err
	}
	res := editResult{name: name, before: cur.content, after: next, exists: cur.exists, existsAfter: next != nil || cur.exists}
	if res.existsAfter && next == nil {
		res.after = cur.content
	}
	res.leftovers = len(r.leftovers(rel))
	if !write {
		res.diff = unifiedDiff(name, res.before, res.after, res.exists, res.existsAfter)
		return res, nil
	}
	if err := r.sweep(name, rel); err != nil {
		return editResult{}, err
	}
	if !res.changed() {
		return res, nil
	}
	m, err := planMeta(name, cur.exists, cur.mode, cur.uid, cur.gid, 0, -1, -1, newMode)
	if err != nil {
		return editResult{}, err
	}
	if err := r.writeAtomic(ctx, name, rel, res.after, m.spec()); err != nil {
		return editResult{}, err
	}
	return res, nil
}
