package hostcfg

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// maxLinks bounds the symbolic links followed while resolving one path.
const maxLinks = 40

// cleanPath turns an item path into its canonical form "/a/b" (for IDs and
// messages): "." components and repeated slashes go, ".." stays, for it is
// resolved from where the components before it lead (through links, the
// way os.Root and the kernel do), not lexically. A path that climbs above
// the root even lexically is an escape, and one that names the root is
// invalid.
func cleanPath(p string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", &PathError{Op: "resolve", Path: p, Err: ErrInvalidPath}
	}
	var out []string
	depth := 0
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if depth == 0 {
				return "", &EscapeError{Path: p}
			}
			depth--
		default:
			depth++
		}
		out = append(out, c)
	}
	if depth == 0 {
		return "", &PathError{Op: "resolve", Path: p, Err: ErrInvalidPath}
	}
	return "/" + strings.Join(out, "/"), nil
}

// canonical returns the canonical form of p for IDs, or p itself when it is
// invalid (the error surfaces when the item runs).
func canonical(p string) string {
	c, err := cleanPath(p)
	if err != nil {
		return p
	}
	return c
}

// resolve returns the root-relative path ("a/b") of name with every
// symbolic link resolved, the last component too when followLast. Missing
// components are kept as they are. It refuses escapes with *EscapeError.
func (r *Root) resolve(name string, followLast bool) (string, error) {
	rel, _, err := r.resolveInfo(name, followLast)
	return rel, err
}

// host returns the host path of a resolved root-relative path.
func (r *Root) host(rel string) string {
	if r.dir == "/" {
		return "/" + rel
	}
	return r.dir + "/" + rel
}

// resolveInfo is resolve that also returns the Lstat of the last component
// when followLast and it exists (nil otherwise).
//
// Resolution looks at each component through the os.Root, one lstat (and
// readlink) each, never at a host path: a directory swapped for a symbolic
// link to outside the root is refused by os.Root, so nothing it returns
// describes a file outside the root. It is a check, not the guard: every
// access then goes through os.Root too, which refuses a link swapped in
// since, and readResolved verifies that it opened the file resolution saw.
func (r *Root) resolveInfo(name string, followLast bool) (string, fs.FileInfo, error) {
	if r == nil || r.r == nil {
		return "", nil, &ItemError{Item: name, Reason: "Root is nil"}
	}
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return "", nil, &PathError{Op: "resolve", Path: name, Err: ErrInvalidPath}
	}
	comps := strings.Split(name, "/")
	var stack []string
	var last fs.FileInfo
	links := 0
	missing := false // a component does not exist: the rest cannot be links
	notDir := ""     // the last component pushed is known not to be a directory
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return "", nil, &EscapeError{Path: name}
			}
			// ".." leads up from where the components before it resolved
			// to; after a missing component or a file it leads nowhere.
			if missing {
				return "", nil, &PathError{Op: "resolve", Path: name, Err: fs.ErrNotExist}
			}
			if notDir != "" {
				return "", nil, &PathError{Op: "resolve", Path: name, Err: fmt.Errorf("/%s is not a directory", notDir)}
			}
			stack = stack[:len(stack)-1]
			last = nil
			continue
		}
		last = nil
		notDir = ""
		if missing || (!followLast && !hasMore(comps)) {
			stack = append(stack, c)
			continue
		}
		cand := strings.Join(append(stack, c), "/")
		if r.beforeLook != nil {
			r.beforeLook(cand)
		}
		fi, err := r.r.Lstat(cand)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				missing = true
				stack = append(stack, c)
				continue
			}
			return "", nil, &PathError{Op: "resolve", Path: name, Err: err}
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			stack = append(stack, c)
			last = fi
			if !fi.IsDir() {
				notDir = strings.Join(stack, "/")
			}
			continue
		}
		links++
		if links > maxLinks {
			return "", nil, &PathError{Op: "resolve", Path: name, Err: ErrTooManyLinks}
		}
		target, err := r.r.Readlink(cand)
		if err != nil {
			return "", nil, &PathError{Op: "resolve", Path: name, Err: err}
		}
		if path.IsAbs(target) {
			rel, ok := r.inside(target)
			if !ok {
				return "", nil, &EscapeError{Path: name, Link: cand, Target: target}
			}
			stack = stack[:0]
			comps = append(strings.Split(rel, "/"), comps...)
			continue
		}
		// A relative target is resolved from the link's directory; check
		// that it does not climb out before following it.
		if escapes(stack, target) {
			return "", nil, &EscapeError{Path: name, Link: cand, Target: target}
		}
		comps = append(strings.Split(target, "/"), comps...)
	}
	if len(stack) == 0 {
		return "", nil, &PathError{Op: "resolve", Path: name, Err: ErrInvalidPath}
	}
	rel := strings.Join(stack, "/")
	if followLast && !missing && last == nil {
		// The path ended with ".." (from a link target): look at where it
		// leads.
		fi, err := r.r.Lstat(rel)
		switch {
		case err == nil:
			last = fi
		case !errors.Is(err, fs.ErrNotExist):
			return "", nil, &PathError{Op: "resolve", Path: name, Err: err}
		}
	}
	return rel, last, nil
}

// hasMore reports whether comps holds a component other than "" and ".".
func hasMore(comps []string) bool {
	for _, c := range comps {
		if c != "" && c != "." {
			return true
		}
	}
	return false
}

// escapes reports whether the relative link target, read from the
// directory stack, climbs above the root lexically.
func escapes(stack []string, target string) bool {
	depth := len(stack)
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

// inside maps an absolute host path to a root-relative one when it lies
// inside the root's directory.
func (r *Root) inside(abs string) (string, bool) {
	abs = path.Clean(abs)
	if r.dir == "/" {
		return strings.TrimPrefix(abs, "/"), true
	}
	if abs == r.dir {
		return ".", true
	}
	if rest, ok := strings.CutPrefix(abs, r.dir+"/"); ok {
		return rest, true
	}
	return "", false
}

// fail wraps the error of an os.Root operation on rel (resolved from name).
// When resolving name again shows an escape (a link swapped in after the
// first resolution), the escape is reported instead.
func (r *Root) fail(op, name string, err error) error {
	if _, rerr := r.resolve(name, true); errors.Is(rerr, ErrEscape) {
		if ee, ok := rerr.(*EscapeError); ok {
			ee.Err = err
			return ee
		}
		return rerr
	}
	return &PathError{Op: op, Path: name, Err: err}
}

// resolveItem checks an item path and resolves it in root.
func resolveItem(root *Root, p string, followLast bool) (name, rel string, err error) {
	name, err = cleanPath(p)
	if err != nil {
		return "", "", err
	}
	if root == nil || root.r == nil {
		return "", "", &ItemError{Item: name, Reason: "Root is nil"}
	}
	rel, err = root.resolve(name, followLast)
	return name, rel, err
}

// splitDir returns the directory components of a root-relative path.
func splitDir(rel string) []string {
	dir := path.Dir(rel)
	if dir == "." {
		return nil
	}
	return splitRel(dir)
}

func splitRel(rel string) []string {
	var out []string
	for _, c := range bytes.Split([]byte(rel), []byte("/")) {
		out = append(out, string(c))
	}
	return out
}
