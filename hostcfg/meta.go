package hostcfg

import (
	"errors"
	"io/fs"
	"os"
)

// permBits are the mode bits hostcfg manages.
const permBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// geteuid is os.Geteuid, replaceable in tests.
var geteuid = os.Geteuid

// Ownership is the owner and group of a file, by number or by name.
//
// User, when set, names the owner instead of UID, and Group the group
// instead of GID. A name resolves in the root's /etc/passwd or /etc/group
// (<root>/etc/passwd, read through the root: a device image mounted
// elsewhere resolves its own names, not the host's; name services such as
// LDAP are not asked); a name that is not there but is a number is that
// number, and any other is an *OwnerError (ErrUnknownOwner). The name
// "root" (as User or Group) is 0 and needs no database, as the zero value
// needs none: an image without /etc/passwd can still be given root:root
// by name. The zero value is root:root (UID and GID 0). Owners are not supported on Windows
// (ErrOwnerUnsupported).
type Ownership struct {
	UID, GID int
	// User and Group, when set, name the owner and the group.
	User, Group string
}

// meta is the mode and owner a write gives a file.
type meta struct {
	mode     fs.FileMode
	uid, gid int
	chown    bool // the owner must be set explicitly
}

func (m meta) spec() writeSpec {
	if !m.chown {
		return writeSpec{mode: m.mode, uid: -1, gid: -1}
	}
	return writeSpec{mode: m.mode, uid: m.uid, gid: m.gid}
}

// planMeta decides the mode and owner of a file from what exists and what
// the target asks (0 mode and -1 ids mean "keep"); it refuses an owner
// change without root.
func planMeta(name string, exists bool, curMode fs.FileMode, curUID, curGID int, mode fs.FileMode, uid, gid int, defMode fs.FileMode) (meta, error) {
	if !ownersSupported && (uid >= 0 || gid >= 0) {
		return meta{}, &PathError{Op: "chown", Path: name, Err: ErrOwnerUnsupported}
	}
	m := meta{mode: mode, uid: uid, gid: gid}
	euid, egid := geteuid(), os.Getegid()
	baseUID, baseGID := euid, egid // what a new file gets
	if exists {
		baseUID, baseGID = curUID, curGID
	}
	if m.mode == 0 {
		m.mode = defMode
		if exists {
			m.mode = curMode
		}
	}
	if m.uid < 0 {
		m.uid = baseUID
	}
	if m.gid < 0 {
		m.gid = baseGID
	}
	// Keeping the owner of an existing file through a rewrite needs an
	// explicit chown too, which only root may do for another owner.
	m.chown = m.uid != euid || m.gid != egid
	if (m.uid != baseUID || m.gid != baseGID) && euid != 0 {
		return meta{}, &PathError{Op: "chown", Path: name, Err: ErrNeedRoot}
	}
	if m.chown && euid != 0 && m.uid != euid {
		// Not root and the file belongs to someone else: a rewrite makes it
		// ours; the owner cannot be kept.
		m.chown = false
		m.uid, m.gid = euid, egid
	}
	return m, nil
}

// errMetaChanged is the cause of a change of mode or owner that found
// another file at the path than the one read.
var errMetaChanged = errors.New("the path changed before its mode and owner were set")

// hardLinked reports whether the regular file fi has other hard links
// than its path, or may have (a link count this system does not tell).
func hardLinked(fi fs.FileInfo) bool {
	return fi != nil && fi.Mode().IsRegular() && linkCount(fi) != 1
}

// setMeta changes the mode and owner of the file or directory rel in
// place, through a handle opened through the root without following a
// last link (openLeaf), so that no component can be swapped between the
// check and the change. It must be a directory when dir is set, a regular
// file otherwise. The handle must lead to the file read (same, when
// not nil), and a regular file must have no other hard link: one that has
// is refused with ErrHardLinked (File rewrites such a file instead, so
// this is a race with whoever linked it since the read).
func (r *Root) setMeta(name, rel string, dir bool, same fs.FileInfo, m meta) error {
	f, err := r.openLeaf(rel, os.O_RDONLY|openNonBlock)
	if errors.Is(err, fs.ErrPermission) && geteuid() != 0 {
		// A directory we may not list (mode 0311) cannot be opened to
		// read; os.Root changes it by name instead (a directory has no
		// hard links, and os.Root keeps the change inside the root).
		if fi, lerr := r.r.Lstat(rel); lerr == nil && fi.IsDir() && (same == nil || os.SameFile(fi, same)) {
			return r.setMetaByName(name, rel, fi, m)
		}
	}
	if err != nil {
		return r.fail("chmod", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return &PathError{Op: "stat", Path: name, Err: err}
	}
	if same != nil && !os.SameFile(st, same) {
		return &PathError{Op: "chmod", Path: name, Err: errMetaChanged}
	}
	if st.IsDir() != dir || !dir && !st.Mode().IsRegular() {
		return wrongType("chmod", name, st.Mode())
	}
	if hardLinked(st) {
		return &PathError{Op: "chmod", Path: name, Err: ErrHardLinked}
	}
	if st.Mode()&permBits != m.mode {
		if err := f.Chmod(m.mode); err != nil {
			return &PathError{Op: "chmod", Path: name, Err: err}
		}
	}
	if uid, gid := owner(st); uid != m.uid || gid != m.gid {
		if err := f.Chown(m.uid, m.gid); err != nil {
			return &PathError{Op: "chown", Path: name, Err: err}
		}
	}
	return nil
}

// setMetaByName is setMeta for a directory that cannot be opened, whose
// Lstat is fi.
func (r *Root) setMetaByName(name, rel string, fi fs.FileInfo, m meta) error {
	if fi.Mode()&permBits != m.mode {
		if err := r.r.Chmod(rel, m.mode); err != nil {
			return r.fail("chmod", name, err)
		}
	}
	if uid, gid := owner(fi); uid != m.uid || gid != m.gid {
		if err := r.r.Chown(rel, m.uid, m.gid); err != nil {
			return r.fail("chown", name, err)
		}
	}
	return nil
}
