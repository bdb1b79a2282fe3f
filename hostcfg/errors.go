package hostcfg

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
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
	// ErrRepeatedKey means a single-valued ConfigKey would change a key
	// that its section holds more than once; see RepeatedKeyError.
	ErrRepeatedKey = errors.New("hostcfg: key appears more than once")
	// ErrUnknownOwner means a user or group name does not resolve in the
	// root's /etc/passwd or /etc/group; see OwnerError.
	ErrUnknownOwner = errors.New("hostcfg: unknown user or group")
	// ErrHardLinked means a change in place (the runtime value of a
	// Sysctl, or a mode or owner change that raced with a new link) met a
	// regular file with other hard links, which may lie outside the root;
	// it is refused, the file unchanged. File, Line, ConfigKey and Hostname
	// give such a file a new inode instead of changing it in place.
	ErrHardLinked = errors.New("hostcfg: file has other hard links")
	// ErrOwnerUnsupported means an item sets an owner on a system that
	// has no numeric owners (Windows).
	ErrOwnerUnsupported = errors.New("hostcfg: owners are not supported on this system")
)

// RepeatedKeyError reports a single-valued ConfigKey (ConfigFile.Key) on a
// key that its section holds more than once: changing one entry would
// leave the others, removing all would touch lines that are not the
// item's. Manage each entry with ConfigFile.Entry instead. It matches
// ErrRepeatedKey.
type RepeatedKeyError struct {
	// Path is the file's canonical path.
	Path string
	// Section is the filter ("" for unconditional lines).
	Section string
	Key     string
	// Lines are the 1-based line numbers of the key's entries.
	Lines []int
}

// Error describes the problem, naming its culprit.
func (e *RepeatedKeyError) Error() string {
	nums := make([]string, len(e.Lines))
	for i, n := range e.Lines {
		nums[i] = strconv.Itoa(n)
	}
	where := ""
	if e.Section != "" {
		where = " in [" + e.Section + "]"
	}
	return fmt.Sprintf("hostcfg: %s: key %q%s appears on lines %s; use ConfigFile.Entry for each entry", e.Path, e.Key, where, strings.Join(nums, ", "))
}

// Is makes RepeatedKeyError match ErrRepeatedKey.
func (e *RepeatedKeyError) Is(target error) bool { return target == ErrRepeatedKey }

// OwnerError reports a user or group name that does not resolve. It
// matches ErrUnknownOwner.
type OwnerError struct {
	// Path is the item's path.
	Path string
	// Kind is "user" or "group".
	Kind string
	// Name is the name that did not resolve.
	Name string
	// DB is the file looked in, as a host path ("/mnt/img/etc/passwd").
	DB string
	// Err is the error reading DB, if any.
	Err error
}

// Error describes the problem, naming its culprit.
func (e *OwnerError) Error() string {
	s := fmt.Sprintf("hostcfg: owner of %s: %s %q not found in %s", displayPath(e.Path), e.Kind, e.Name, e.DB)
	if e.Err != nil {
		s += ": " + message(e.Err)
	}
	return s
}

// Is makes OwnerError match ErrUnknownOwner.
func (e *OwnerError) Is(target error) bool { return target == ErrUnknownOwner }

// Unwrap returns the error reading the database, if any.
func (e *OwnerError) Unwrap() error { return e.Err }

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
		fmt.Fprintf(&b, ": %s", message(e.Err))
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

// Error describes the problem, naming its culprit once: the path the item
// names (never a temporary file), "(empty path)" when there is none.
func (e *PathError) Error() string {
	return fmt.Sprintf("hostcfg: %s %s: %s", e.Op, displayPath(e.Path), message(e.Err))
}

// displayPath names a path in a message.
func displayPath(p string) string {
	if p == "" {
		return "(empty path)"
	}
	return p
}

// message renders an error wrapped by a hostcfg error: without the paths
// of the file system call (they name the root-relative or temporary file,
// while the wrapper names the item's path) and without a second "hostcfg: "
// prefix.
func message(err error) string {
	for {
		switch e := err.(type) {
		case *fs.PathError:
			err = e.Err
		case *os.LinkError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err
		default:
			return strings.TrimPrefix(err.Error(), "hostcfg: ")
		}
	}
}

// Unwrap returns the underlying error.
func (e *PathError) Unwrap() error { return e.Err }

// ItemError reports an item whose fields are invalid. It matches
// ErrInvalidItem.
type ItemError struct {
	// Item is the item's ID (the path, for a Root method). The message
	// does not repeat it: a walk's *converge.ItemError names the item
	// already, so the item is named once.
	Item string
	// Reason says what is wrong, naming the field or value at fault.
	Reason string
}

// Error describes the problem, naming the field or value at fault
// (`hostcfg: invalid key "gpu=mem"`).
func (e *ItemError) Error() string {
	return "hostcfg: " + e.Reason
}

// Is makes ItemError match ErrInvalidItem.
func (e *ItemError) Is(target error) bool { return target == ErrInvalidItem }

// wrongType is the error of op on name finding a file of mode m where
// another kind of file is needed. It matches ErrWrongType.
func wrongType(op, name string, m fs.FileMode) error {
	return &PathError{Op: op, Path: name, Err: fmt.Errorf("%w (a %s)", ErrWrongType, kindOf(m))}
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
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	default:
		return "special file"
	}
}
