//go:build unix

package hostcfg

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// statOf returns the Lstat of p as a syscall.Stat_t.
func statOf(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(p)
	require.NoError(t, err)
	return fi.Sys().(*syscall.Stat_t)
}

// TestHardLinkedFilesNeverChangedInPlace gives every kind of item a file
// inside the root that is a hard link to a file outside it, and changes
// its content, mode or owner: the outside file keeps its content, mode and
// owner; the file inside gets the change on a new inode (or, for the
// runtime value of a Sysctl, which is written in place, the change is
// refused with ErrHardLinked).
func TestHardLinkedFilesNeverChangedInPlace(t *testing.T) {
	root := os.Geteuid() == 0
	cases := []struct {
		name     string
		path     string // the hard link inside the root
		content  string
		item     func(r *Root) converge.Node
		needRoot bool
		refused  error
	}{
		{name: "file mode", path: "etc/f", content: "same\n", item: func(r *Root) converge.Node {
			return (&File{Root: r, Path: "/etc/f", Content: []byte("same\n"), Mode: 0o600}).Node()
		}},
		{name: "file owner", path: "etc/f", content: "same\n", needRoot: true, item: func(r *Root) converge.Node {
			return (&File{Root: r, Path: "/etc/f", Content: []byte("same\n"), Owner: &Ownership{UID: 4321, GID: 4321}}).Node()
		}},
		{name: "file content", path: "etc/f", content: "old\n", item: func(r *Root) converge.Node {
			return (&File{Root: r, Path: "/etc/f", Content: []byte("new\n")}).Node()
		}},
		{name: "line", path: "etc/f", content: "a\n", item: func(r *Root) converge.Node {
			return (&Line{Root: r, Path: "/etc/f", Line: "b"}).Node()
		}},
		{name: "configkey", path: "config.txt", content: "a=1\n", item: func(r *Root) converge.Node {
			return NewConfigFile(r, "/config.txt").Key("", "a", "2").Node()
		}},
		{name: "hostname", path: "etc/hostname", content: "old\n", item: func(r *Root) converge.Node {
			return (&Hostname{Root: r, Name: "new"}).Node()
		}},
		{name: "sysctl runtime", path: "proc/sys/net/ipv4/ip_forward", content: "0\n", refused: ErrHardLinked, item: func(r *Root) converge.Node {
			return (&Sysctl{Root: r, Key: "net.ipv4.ip_forward", Value: "1"}).Node()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needRoot && !root {
				t.Skip("needs root")
			}
			r, dir, outside := newRoot(t)
			out := filepath.Join(outside, "linked")
			writeFile(t, out, tc.content)
			in := filepath.Join(dir, tc.path)
			require.NoError(t, os.MkdirAll(filepath.Dir(in), 0o755))
			require.NoError(t, os.Link(out, in))
			before := snapshot(t, outside)
			outStat := *statOf(t, out)

			_, err := converge.Apply(context.Background(), graph(tc.item(r)))
			assert.Equal(t, before, snapshot(t, outside), "outside content and mode")
			after := statOf(t, out)
			assert.Equal(t, outStat.Uid, after.Uid, "outside owner")
			assert.Equal(t, outStat.Gid, after.Gid, "outside group")
			if tc.refused != nil {
				require.ErrorIs(t, err, tc.refused)
				assert.Equal(t, tc.content, readFile(t, in), "a refused change leaves the file")
				return
			}
			require.NoError(t, err)
			assert.NotEqual(t, outStat.Ino, statOf(t, in).Ino, "the change went to a new inode")
			assert.EqualValues(t, 1, statOf(t, in).Nlink)
			assert.EqualValues(t, 2-1, after.Nlink, "the outside file lost its link inside")
		})
	}
}

// TestHardLinkedSymlinkGetsANewLink changes the owner of a symbolic link
// inside the root that is a hard link of a symbolic link outside it: the
// outside link keeps its owner, the inside one is a new link.
func TestHardLinkedSymlinkGetsANewLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	r, dir, outside := newRoot(t)
	out := filepath.Join(outside, "link")
	require.NoError(t, os.Symlink("secret", out))
	in := filepath.Join(dir, "link")
	require.NoError(t, os.Link(out, in)) // linkat without following: the link itself
	require.EqualValues(t, 2, statOf(t, out).Nlink)
	outStat := *statOf(t, out)

	mustApply(t, graph((&Symlink{Root: r, Path: "/link", Target: "secret", Owner: &Ownership{UID: 4321, GID: 4321}}).Node()))
	after := statOf(t, out)
	assert.Equal(t, outStat.Uid, after.Uid, "outside owner")
	assert.EqualValues(t, 4321, statOf(t, in).Uid)
	assert.NotEqual(t, outStat.Ino, statOf(t, in).Ino)
}

// TestSetMetaRefusesAHardLinkedFile covers the guard of a change of mode
// in place against a hard link made after the file was read: it is
// refused with ErrHardLinked and the file (both names) keeps its mode; a
// file swapped in since the read is refused too.
func TestSetMetaRefusesAHardLinkedFile(t *testing.T) {
	r, dir, outside := newRoot(t)
	in := filepath.Join(dir, "f")
	writeFile(t, in, "x\n")
	read, err := os.Lstat(in)
	require.NoError(t, err)
	m := meta{mode: 0o600, uid: os.Geteuid(), gid: os.Getegid()}

	out := filepath.Join(outside, "f")
	require.NoError(t, os.Link(in, out))
	err = r.setMeta("/f", "f", false, read, m)
	require.ErrorIs(t, err, ErrHardLinked)
	assert.Equal(t, fs.FileMode(0o644), statMode(t, out))

	require.NoError(t, os.Remove(out))
	writeFile(t, in+".new", "y\n")
	require.NoError(t, os.Rename(in+".new", in))
	err = r.setMeta("/f", "f", false, read, m)
	require.ErrorIs(t, err, errMetaChanged, "another file than the one read")
	assert.Equal(t, fs.FileMode(0o644), statMode(t, in))

	read, err = os.Lstat(in)
	require.NoError(t, err)
	require.NoError(t, r.setMeta("/f", "f", false, read, m))
	assert.Equal(t, fs.FileMode(0o600), statMode(t, in))
}

func statMode(t *testing.T, p string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	require.NoError(t, err)
	return fi.Mode().Perm()
}
