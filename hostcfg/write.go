package hostcfg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// tempMarker is in the name of every temporary file hostcfg creates:
// ".<base>" + tempMarker + random hex, next to the file it replaces.
const tempMarker = ".hostcfg-tmp-"

// tempName returns the directory of rel (as path.Split gives it) and a
// new name for a temporary file next to rel:
// <dir>.<base><tempMarker><random hex>.
func tempName(rel string) (dir, tmp string) {
	dir, base := path.Split(rel)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return dir, dir + "." + base + tempMarker + hex.EncodeToString(rnd[:])
}

// writeSpec says how writeAtomic creates a file.
type writeSpec struct {
	mode     fs.FileMode
	uid, gid int // -1: leave as created
}

// writeAtomic replaces rel (resolved from name) with data: a temporary file
// in the same directory is written, synced, renamed over rel, and the
// directory is synced. A crash leaves rel old or new, and at most a
// temporary file that the next write (or any item's next run) removes.
func (r *Root) writeAtomic(ctx context.Context, name, rel string, data []byte, spec writeSpec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.afterResolve != nil {
		r.afterResolve(rel)
	}
	dir, tmp := tempName(rel)
	// Noted before it exists, so that no listing takes it for a leftover.
	r.noteTemp(dir, path.Base(tmp))
	f, err := r.r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, spec.mode&fs.ModePerm)
	if err != nil {
		r.forgetTemp(dir, path.Base(tmp))
		return r.fail("write", name, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = r.r.Remove(tmp)
			r.forgetTemp(dir, path.Base(tmp))
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return &PathError{Op: "write", Path: name, Err: err}
	}
	// Set mode and owner only where creation did not already give them:
	// some file systems (vfat) refuse any chmod that changes nothing they
	// can store.
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return &PathError{Op: "stat", Path: name, Err: err}
	}
	if fi.Mode()&permBits != spec.mode {
		if err := f.Chmod(spec.mode); err != nil {
			f.Close()
			return &PathError{Op: "chmod", Path: name, Err: err}
		}
	}
	if uid, gid := owner(fi); (spec.uid >= 0 && spec.uid != uid) || (spec.gid >= 0 && spec.gid != gid) {
		if err := f.Chown(spec.uid, spec.gid); err != nil {
			f.Close()
			return &PathError{Op: "chown", Path: name, Err: err}
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return &PathError{Op: "sync", Path: name, Err: err}
	}
	if err := f.Close(); err != nil {
		return &PathError{Op: "write", Path: name, Err: err}
	}
	if err := r.r.Rename(tmp, rel); err != nil {
		return r.fail("rename", name, err)
	}
	ok = true
	r.forgetTemp(dir, path.Base(tmp))
	return r.syncDir(name, dir)
}

// syncDir fsyncs a directory so that a rename or removal in it is durable.
func (r *Root) syncDir(name, dir string) error {
	if r.syncHook != nil {
		r.syncHook(dirName(dir))
	}
	d, err := r.r.Open(dirName(dir))
	if err != nil {
		return r.fail("sync dir", name, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return &PathError{Op: "sync dir", Path: name, Err: err}
	}
	return nil
}

// dirName turns a directory as path.Split returns it ("a/b/", or "" for
// the root) into a name os.Root opens ("a/b", or ".").
func dirName(dir string) string {
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	return dir
}

// remove removes the file at rel (a file or an empty directory); a missing
// one is not an error.
func (r *Root) remove(name, rel string) error {
	if r.afterResolve != nil {
		r.afterResolve(rel)
	}
	if err := r.r.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return r.fail("remove", name, err)
	}
	dir, _ := path.Split(rel)
	return r.syncDir(name, dir)
}
