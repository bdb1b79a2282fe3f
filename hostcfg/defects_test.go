//go:build unix

package hostcfg

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadingFIFOIsWrongTypeNotHang puts a named pipe where items read a
// file: each fails at once with ErrWrongType instead of waiting for a
// writer.
func TestReadingFIFOIsWrongTypeNotHang(t *testing.T) {
	r, dir, _ := newRoot(t)
	fifo := filepath.Join(dir, "etc/pipe")
	require.NoError(t, os.MkdirAll(filepath.Dir(fifo), 0o755))
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	require.NoError(t, os.Symlink("pipe", filepath.Join(dir, "etc/pipe-link")))
	for _, p := range []string{"/etc/pipe", "/etc/pipe-link"} {
		for _, n := range []converge.Node{
			(&File{Root: r, Path: p, Content: []byte("x")}).Node(),
			(&Line{Root: r, Path: p, Line: "x"}).Node(),
			NewConfigFile(r, p).Key("", "a", "1").Node(),
		} {
			done := make(chan error, 1)
			go func() {
				_, err := converge.Apply(context.Background(), graph(n))
				done <- err
			}()
			select {
			case err := <-done:
				require.ErrorIs(t, err, ErrWrongType, n.ID())
				assert.Contains(t, err.Error(), "named pipe")
			case <-time.After(10 * time.Second):
				// Release the reader so that the goroutine ends, then fail.
				w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
				if err == nil {
					w.Close()
				}
				<-done
				t.Fatalf("%s: reading a named pipe hangs", n.ID())
			}
		}
	}
}

// TestDotDotAfterSymlinkFollowsTheLink resolves ".." after a link from
// the link's target, as the kernel and os.Root do, not lexically.
func TestDotDotAfterSymlinkFollowsTheLink(t *testing.T) {
	r, dir, _ := newRoot(t)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	require.NoError(t, os.Symlink("a/b", filepath.Join(dir, "l")))
	writeFile(t, filepath.Join(dir, "a/conf"), "k=1\n")
	mustApply(t, graph((&File{Root: r, Path: "/l/../x", Content: []byte("x")}).Node()))
	assert.Equal(t, "x", readFile(t, filepath.Join(dir, "a/x")))
	assert.NoFileExists(t, filepath.Join(dir, "x"))

	f := &File{Root: r, Path: "/l/../conf"}
	st, err := f.StateCurrent(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, "k=1\n", string(st.Content))
	mustApply(t, graph(NewConfigFile(r, "/l/../conf").Key("", "k", "2").Node()))
	assert.Equal(t, "k=2\n", readFile(t, filepath.Join(dir, "a/conf")))
}

func TestFileAbsentHonoursCancelledContext(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "x"), "x")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &File{Root: r, Path: "/x"}
	clean, err := f.StateClean(context.Background(), nil)
	require.NoError(t, err)
	_, err = f.Apply(ctx, FileState{}, clean)
	require.ErrorIs(t, err, context.Canceled)
	assert.FileExists(t, filepath.Join(dir, "x"))
}

func TestDirAbsentOnSymlinkRefused(t *testing.T) {
	r, dir, _ := newRoot(t)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "real"), 0o755))
	require.NoError(t, os.Symlink("real", filepath.Join(dir, "l")))
	g := converge.NewGraph()
	g.Add((&Dir{Root: r, Path: "/l"}).Node(), converge.Absent)
	for _, run := range []func(context.Context, *converge.Graph) (*converge.Report, error){converge.ApplyDry, converge.Apply} {
		_, err := run(context.Background(), g)
		require.ErrorIs(t, err, ErrWrongType)
		assert.Contains(t, err.Error(), "symlink")
	}
	target, err := os.Readlink(filepath.Join(dir, "l"))
	require.NoError(t, err)
	assert.Equal(t, "real", target)
	assert.DirExists(t, filepath.Join(dir, "real"))
}

// TestSymlinkTempFilesCleanedUp leaves no temporary link behind: not when
// the rename fails, and not when a crashed run left one.
func TestSymlinkTempFilesCleanedUp(t *testing.T) {
	t.Run("failed rename", func(t *testing.T) {
		r, dir, _ := newRoot(t)
		r.afterResolve = func(string) {
			r.afterResolve = nil
			writeFile(t, filepath.Join(dir, "l/inside"), "x") // a directory takes the place
		}
		_, err := converge.Apply(context.Background(), graph((&Symlink{Root: r, Path: "/l", Target: "t"}).Node()))
		require.Error(t, err)
		assert.Equal(t, []string{"l"}, names(t, dir))
	})
	t.Run("crash leftover", func(t *testing.T) {
		r, dir, _ := newRoot(t)
		require.NoError(t, os.Symlink("old", filepath.Join(dir, ".l"+tempMarker+"0123456789abcdef")))
		require.NoError(t, os.Symlink("t", filepath.Join(dir, "l")))
		l := &Symlink{Root: r, Path: "/l", Target: "t"}
		st, err := l.StateCurrent(context.Background(), nil)
		require.NoError(t, err)
		assert.Equal(t, 1, st.Leftovers)
		rep := mustApply(t, graph(l.Node()))
		assert.Equal(t, converge.OutcomeChanged, rep.Items[0].Outcome)
		assert.Equal(t, []string{"l"}, names(t, dir))
	})
}

// names lists the entries of dir, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// TestNestedDirSyncsEveryCreatedDirsParent creates a/b/c in an empty root:
// the parent of every directory created is synced, so that none of them
// can vanish in a crash.
func TestNestedDirSyncsEveryCreatedDirsParent(t *testing.T) {
	r, dir, _ := newRoot(t)
	var synced []string
	r.syncHook = func(d string) { synced = append(synced, d) }
	mustApply(t, graph((&Dir{Root: r, Path: "/a/b/c", Mode: 0o750}).Node()))
	sort.Strings(synced)
	assert.Equal(t, []string{".", "a", "a/b"}, synced)
	for _, p := range []string{"a", "a/b", "a/b/c"} {
		assert.DirExists(t, filepath.Join(dir, p))
	}
}

// TestErrorMessagesNameThePathOnce checks the messages of failures of every
// kind of item: one "hostcfg: " prefix, the path the user gave (or
// "(empty path)"), never a temporary file.
func TestErrorMessagesNameThePathOnce(t *testing.T) {
	type setup func(t *testing.T, r *Root, dir string)
	dirAt := func(p string) setup {
		return func(t *testing.T, _ *Root, dir string) { writeFile(t, filepath.Join(dir, p, "inside"), "x") }
	}
	fileAt := func(p string) setup {
		return func(t *testing.T, _ *Root, dir string) { writeFile(t, filepath.Join(dir, p), "k=1\n") }
	}
	// swapInDir replaces the file at p with a directory once the path is
	// resolved: the rename of the temporary file over it fails.
	swapInDir := func(p string) setup {
		return func(t *testing.T, r *Root, dir string) {
			writeFile(t, filepath.Join(dir, p), "k=1\n")
			r.afterResolve = func(string) {
				r.afterResolve = nil
				require.NoError(t, os.Remove(filepath.Join(dir, p)))
				writeFile(t, filepath.Join(dir, p, "inside"), "x")
			}
		}
	}
	cases := []struct {
		name  string
		setup setup
		item  func(r *Root) converge.Node
		path  string
	}{
		{"file empty path", nil, func(r *Root) converge.Node { return (&File{Root: r}).Node() }, "(empty path)"},
		{"dir empty path", nil, func(r *Root) converge.Node { return (&Dir{Root: r}).Node() }, "(empty path)"},
		{"symlink empty path", nil, func(r *Root) converge.Node { return (&Symlink{Root: r, Target: "x"}).Node() }, "(empty path)"},
		{"line empty path", nil, func(r *Root) converge.Node { return (&Line{Root: r, Line: "x"}).Node() }, "(empty path)"},
		{"configkey empty path", nil, func(r *Root) converge.Node { return NewConfigFile(r, "").Key("", "a", "1").Node() }, "(empty path)"},
		{"file wrong type", dirAt("etc/x"), func(r *Root) converge.Node { return (&File{Root: r, Path: "/etc/x"}).Node() }, "/etc/x"},
		{"line wrong type", dirAt("etc/x"), func(r *Root) converge.Node { return (&Line{Root: r, Path: "/etc/x", Line: "a"}).Node() }, "/etc/x"},
		{"configkey wrong type", dirAt("etc/x"), func(r *Root) converge.Node { return NewConfigFile(r, "/etc/x").Key("", "a", "1").Node() }, "/etc/x"},
		{"sysctl wrong type", dirAt("etc/s.conf"), func(r *Root) converge.Node {
			return (&Sysctl{Root: r, Key: "k", Value: "1", Persist: "/etc/s.conf"}).Node()
		}, "/etc/s.conf"},
		{"hostname wrong type", dirAt("etc/hostname"), func(r *Root) converge.Node { return (&Hostname{Root: r, Name: "h"}).Node() }, "/etc/hostname"},
		{"dir wrong type", fileAt("etc/d"), func(r *Root) converge.Node { return (&Dir{Root: r, Path: "/etc/d"}).Node() }, "/etc/d"},
		{"symlink wrong type", fileAt("etc/l"), func(r *Root) converge.Node { return (&Symlink{Root: r, Path: "/etc/l", Target: "x"}).Node() }, "/etc/l"},
		{"file failed rename", swapInDir("etc/x"), func(r *Root) converge.Node {
			return (&File{Root: r, Path: "/etc/x", Content: []byte("new")}).Node()
		}, "/etc/x"},
		{"line failed rename", swapInDir("etc/x"), func(r *Root) converge.Node { return (&Line{Root: r, Path: "/etc/x", Line: "a"}).Node() }, "/etc/x"},
		{"configkey failed rename", swapInDir("etc/x"), func(r *Root) converge.Node { return NewConfigFile(r, "/etc/x").Key("", "k", "2").Node() }, "/etc/x"},
		{"sysctl failed rename", swapInDir("etc/s.conf"), func(r *Root) converge.Node {
			return (&Sysctl{Root: r, Key: "k", Value: "1", Persist: "/etc/s.conf"}).Node()
		}, "/etc/s.conf"},
		{"hostname failed rename", swapInDir("etc/hostname"), func(r *Root) converge.Node { return (&Hostname{Root: r, Name: "h"}).Node() }, "/etc/hostname"},
		{"symlink failed rename", func(t *testing.T, r *Root, dir string) {
			r.afterResolve = func(string) { r.afterResolve = nil; writeFile(t, filepath.Join(dir, "etc/l/inside"), "x") }
		}, func(r *Root) converge.Node { return (&Symlink{Root: r, Path: "/etc/l", Target: "x"}).Node() }, "/etc/l"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, dir, _ := newRoot(t)
			writeFile(t, filepath.Join(dir, "proc/sys/k"), "0\n")
			if tc.setup != nil {
				tc.setup(t, r, dir)
			}
			_, err := converge.Apply(context.Background(), graph(tc.item(r)))
			require.Error(t, err)
			msg := err.Error()
			assert.Equal(t, 1, strings.Count(msg, "hostcfg:"), msg)
			assert.NotContains(t, msg, tempMarker, msg)
			assert.Contains(t, msg, tc.path, msg)
			_, own, _ := strings.Cut(msg, "hostcfg:")
			assert.Equal(t, 1, strings.Count(own, tc.path), "hostcfg names the path once: %s", msg)
		})
	}
}
