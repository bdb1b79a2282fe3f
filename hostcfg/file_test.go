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

func TestFileLifecycle(t *testing.T) {
	ctx := context.Background()
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "etc/app.conf")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "etc"), 0o755))
	f := &File{Root: r, Path: "/etc/app.conf", Content: []byte("a\nb\n"), Mode: 0o640}
	g := graph(f.Node())

	rep := mustApply(t, g)
	assert.Equal(t, converge.OutcomeChanged, rep.Items[0].Outcome)
	assert.Equal(t, "a\nb\n", readFile(t, p))
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())

	// Content change, shown by a dry run as a unified diff first.
	f.Content = []byte("a\nc\n")
	rep, err = converge.ApplyDry(ctx, g)
	require.NoError(t, err)
	assert.Equal(t, []ItemDiff{{ID: "file:/etc/app.conf", Diff: "--- a/etc/app.conf\n+++ b/etc/app.conf\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"}}, Diffs(rep))
	assert.Equal(t, "a\nb\n", readFile(t, p))
	mustApply(t, g)
	assert.Equal(t, "a\nc\n", readFile(t, p))

	// Mode drift is repaired in place; the diff says so.
	require.NoError(t, os.Chmod(p, 0o666))
	rep, err = converge.ApplyDry(ctx, g)
	require.NoError(t, err)
	require.Len(t, Diffs(rep), 1)
	assert.Contains(t, Diffs(rep)[0].Diff, "mode /etc/app.conf: 0666 -> 0640")
	mustApply(t, g)
	fi, err = os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())

	// Mode 0 keeps whatever mode the file has.
	require.NoError(t, os.Chmod(p, 0o600))
	f.Mode = 0
	rep = mustApply(t, g)
	assert.Equal(t, converge.OutcomeUnchanged, rep.Items[0].Outcome)

	// A content rewrite keeps the mode of the existing file.
	f.Content = []byte("d\n")
	mustApply(t, g)
	fi, err = os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// Absent removes it.
	g2 := converge.NewGraph()
	g2.Add(f.Node(), converge.Absent)
	mustApply(t, g2)
	assert.NoFileExists(t, p)
}

func TestFileOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	r, dir, _ := newRoot(t)
	f := &File{Root: r, Path: "/x", Content: []byte("x"), Owner: &Ownership{UID: 1234, GID: 4321}}
	mustApply(t, graph(f.Node()))
	fi, err := os.Stat(filepath.Join(dir, "x"))
	require.NoError(t, err)
	uid, gid := owner(fi)
	assert.Equal(t, []int{1234, 4321}, []int{uid, gid})
	// A rewrite without Owner keeps the owner.
	mustApply(t, graph((&File{Root: r, Path: "/x", Content: []byte("y")}).Node()))
	fi, err = os.Stat(filepath.Join(dir, "x"))
	require.NoError(t, err)
	uid, gid = owner(fi)
	assert.Equal(t, []int{1234, 4321}, []int{uid, gid})
	// An owner change in place.
	f.Content, f.Owner = []byte("y"), &Ownership{UID: 1, GID: 1}
	mustApply(t, graph(f.Node()))
	fi, err = os.Stat(filepath.Join(dir, "x"))
	require.NoError(t, err)
	uid, gid = owner(fi)
	assert.Equal(t, []int{1, 1}, []int{uid, gid})
	// Dir owner.
	mustApply(t, graph((&Dir{Root: r, Path: "/d", Owner: &Ownership{UID: 7, GID: 8}}).Node()))
	fi, err = os.Stat(filepath.Join(dir, "d"))
	require.NoError(t, err)
	uid, gid = owner(fi)
	assert.Equal(t, []int{7, 8}, []int{uid, gid})
}
