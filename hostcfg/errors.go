package hostcfg

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// Sentinel errors. Branch on them with errors.Is; the typed errors carry
// the path at fault.
var (
	// ErrEscape means a path, or a symbolic link met while resolving it,
	// leads outside the root. Nothing is written.
	ErrEscape = errors.New("hostcfg: path escapes the root")
	// ErrInvalidPath means a path is empty, names the root itself where a
	// file is needed, or contains a NUL byte.
	ErrInvalidPath = errors.New("hostcfg: invalid path")
	// ErrTooManyLinks means resolving a path followed more than 40
	// symbolic links.
	ErrTooManyLinks = errors.New("hostcfg: too many levels of symbolic links")
	// ErrWrongType means the path holds another kind of file than the item
	// manages (a directory where a file should be, a file where a symlink
	// should be). The item refuses to replace it.
	ErrWrongType = errors.New("hostcfg: path holds another kind of file")
	// ErrNeedRoot means an item must change the owner of a file and the
	// process does not run as root.
	ErrNeedRoot = errors.New("hostcfg: changing the owner needs root")
	// ErrInvalidItem means an item's own fields are wrong (an empty key,
	// a host name with forbidden characters, a nil Root).
	ErrInvalidItem = errors.New("hostcfg: invalid item")
)

// EscapeError reports a path that leads outside the root. Link is the
// symbolic link (root-relative) whose target escapes, or empty when the
// path itself climbs out with "..". It matches ErrEscape.
type EscapeError struct {
	// Path is the path as the item names it.
	Path string
	// Link is the root-relative symbolic link that points outside, if any.
	Link string
	// Target is the content of Link.
	Target string
	// Err is the underlying error when the escape was caught by os.Root
	// while writing (a link swapped in after the path was resolved).
	Err error
}

// Error describes the problem, naming its culprit.
func (e *EscapeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hostcfg: path %q escapes the root", e.Path)
	if e.Link != "" {
		fmt.Fprintf(&b, " through symlink %q -> %q", "/"+e.Link, e.Target)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Is makes EscapeError match ErrEscape.
func (e *EscapeError) Is(target error) bool { return target == ErrEscape }

// Unwrap returns the underlying os.Root error, if any.
func (e *EscapeError) Unwrap() error { return e.Err }

// PathError is an error of an operation on one path inside the root.
type PathError struct {
	Op   string
	Path string
	Err  error
}

// Error describes the problem, naming its culprit.
func (e *PathError) Error() string { return fmt.Sprintf("hostcfg: %s %s: %v", e.Op, e.Path, e.Err) }

// Unwrap returns the underlying error.
func (e *PathError) Unwrap() error { return e.Err }

// ItemError reports an item whose fields are invalid. It matches
// ErrInvalidItem.
type ItemError struct {
	Item   string
	Reason string
}

// Error describes the problem, naming its culprit.
func (e *ItemError) Error() string {
	return fmt.Sprintf("hostcfg: invalid item %s: %s", e.Item, e.Reason)
}

// Is makes ItemError match ErrInvalidItem.
func (e *ItemError) Is(target error) bool { return target == ErrInvalidItem }

// wrongType is the error of op on name finding a file of mode m where
// another kind of file is needed. It matches ErrWrongType.
func wrongType(op, name string, m fs.FileMode) error {
	return &PathError{Op: op, Path: name, Err: fmt.Errorf("%w: %s is a %s", ErrWrongType, name, kindOf(m))}
}

// kindOf names the kind of file a mode describes.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	default:
		return "special file"
	}
}
