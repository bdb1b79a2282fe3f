//go:build unix

package hostcfg

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ownerOf returns the owner of p (not following a last link).
func ownerOf(t *testing.T, p string) []int {
	t.Helper()
	fi, err := os.Lstat(p)
	require.NoError(t, err)
	uid, gid := owner(fi)
	return []int{uid, gid}
}

// TestOwnerByNameFromTheRootsDatabases gives owners by name: they resolve
// in the root's /etc/passwd and /etc/group, not the host's.
func TestOwnerByNameFromTheRootsDatabases(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n# comment\npi:x:1000:1000::/home/pi:/bin/sh\n")
	writeFile(t, filepath.Join(dir, "etc/group"), "root:x:0:\nadm:x:4:pi\npi:x:1000:\n")
	writeFile(t, filepath.Join(dir, "srv/target"), "t")
	mustApply(t, graph(
		(&File{Root: r, Path: "/srv/f", Content: []byte("x"), Owner: &Ownership{User: "pi", Group: "adm"}}).Node(),
		(&Dir{Root: r, Path: "/srv/d", Owner: &Ownership{User: "pi", Group: "pi"}}).Node(),
		(&Symlink{Root: r, Path: "/srv/l", Target: "target", Owner: &Ownership{User: "pi", GID: 4}}).Node(),
		(&File{Root: r, Path: "/srv/n", Content: []byte("x"), Owner: &Ownership{User: "1234", Group: "4321"}}).Node(),
	))
	assert.Equal(t, []int{1000, 4}, ownerOf(t, filepath.Join(dir, "srv/f")))
	assert.Equal(t, []int{1000, 1000}, ownerOf(t, filepath.Join(dir, "srv/d")))
	assert.Equal(t, []int{1000, 4}, ownerOf(t, filepath.Join(dir, "srv/l")), "the link itself (lchown)")
	assert.Equal(t, []int{0, 0}, ownerOf(t, filepath.Join(dir, "srv/target")), "not the link's target")
	assert.Equal(t, []int{1234, 4321}, ownerOf(t, filepath.Join(dir, "srv/n")), "numbers given as names")

	// A name the host knows but the root does not is an error naming it
	// and the file looked in.
	for _, o := range []*Ownership{{User: "daemon"}, {Group: "nogroup-here"}} {
		_, err := converge.Apply(context.Background(), graph((&File{Root: r, Path: "/srv/f", Owner: o}).Node()))
		require.ErrorIs(t, err, ErrUnknownOwner)
		var oe *OwnerError
		require.ErrorAs(t, err, &oe)
		name, db := o.User, filepath.Join(dir, "etc/passwd")
		if o.Group != "" {
			name, db = o.Group, filepath.Join(dir, "etc/group")
		}
		assert.Equal(t, name, oe.Name)
		assert.Equal(t, db, oe.DB)
		assert.Contains(t, err.Error(), `"`+name+`"`)
		assert.Contains(t, err.Error(), db)
	}
}

// TestSymlinkOwner sets and changes the owner of a link, in place when
// the target is right, and converges.
func TestSymlinkOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "target"), "t")
	l := &Symlink{Root: r, Path: "/l", Target: "target", Owner: &Ownership{UID: 1234, GID: 4321}}
	mustApply(t, graph(l.Node()))
	assert.Equal(t, []int{1234, 4321}, ownerOf(t, filepath.Join(dir, "l")))
	l.Owner = &Ownership{UID: 7, GID: 8}
	rep := mustApply(t, graph(l.Node()))
	assert.Equal(t, converge.OutcomeChanged, rep.Items[0].Outcome)
	assert.Equal(t, []int{7, 8}, ownerOf(t, filepath.Join(dir, "l")))
	rep = mustApply(t, graph(l.Node()))
	assert.Equal(t, converge.OutcomeUnchanged, rep.Items[0].Outcome)
	// Re-pointing without Owner keeps the owner.
	mustApply(t, graph((&Symlink{Root: r, Path: "/l", Target: "other"}).Node()))
	assert.Equal(t, []int{7, 8}, ownerOf(t, filepath.Join(dir, "l")))

	saved := geteuid
	geteuid = func() int { return 1000 }
	t.Cleanup(func() { geteuid = saved })
	_, err := converge.Apply(context.Background(), graph((&Symlink{Root: r, Path: "/l2", Target: "target", Owner: &Ownership{UID: 0, GID: 0}}).Node()))
	require.ErrorIs(t, err, ErrNeedRoot)
}

// TestRootByNameNeedsNoDatabase gives the owner root:root by name on a root
// without /etc/passwd and /etc/group: it is 0:0, as the zero value is,
// while any other name still needs the root's own files.
func TestRootByNameNeedsNoDatabase(t *testing.T) {
	r, _, _ := newRoot(t)
	ctx := context.Background()
	f := &File{Root: r, Path: "/srv/f", Content: []byte("x"), Owner: &Ownership{User: "root", Group: "root"}}
	goal, err := f.StateGoal(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 0}, []int{goal.UID, goal.GID})
	for _, o := range []*Ownership{{User: "pi"}, {Group: "adm"}} {
		_, err := (&File{Root: r, Path: "/srv/f", Owner: o}).StateGoal(ctx, nil)
		require.ErrorIs(t, err, ErrUnknownOwner, "%+v", o)
	}
}
