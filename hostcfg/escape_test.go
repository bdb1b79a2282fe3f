package hostcfg

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// escapeItems returns one item of every kind writing at p. A Symlink item
// manages the link itself (it does not follow it), so it is left out when
// only the last component of p points outside (lastOnly).
func escapeItems(r *Root, p string, lastOnly bool) []converge.Node {
	nodes := []converge.Node{
		(&File{Root: r, Path: p, Content: []byte("pwned\n")}).Node(),
		(&Dir{Root: r, Path: p + ".d"}).Node(),
		(&Line{Root: r, Path: p, Line: "pwned"}).Node(),
		NewConfigFile(r, p).Key("", "pwned", "1").Node(),
	}
	if !lastOnly {
		nodes = append(nodes, (&Symlink{Root: r, Path: p + ".link", Target: "x"}).Node())
	}
	return nodes
}

// TestEscapesRefused tries to leave the root with "..", and through
// symbolic links pointing outside (relative and absolute, on the way and
// at the end), with every kind of item. Each attempt fails with an
// *EscapeError naming the path, and nothing changes inside or outside.
func TestEscapesRefused(t *testing.T) {
	cases := []struct {
		name     string
		setup    func(t *testing.T, dir, outside string)
		path     string
		lastOnly bool
	}{
		{name: "dotdot", path: "../outside/secret"},
		{name: "dotdot-absolute", path: "/../outside/secret"},
		{name: "dotdot-nested", path: "/etc/../../outside/secret"},
		{name: "dir-link-relative", path: "/etc/secret", setup: func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Symlink("../outside", filepath.Join(dir, "etc")))
		}},
		{name: "dir-link-absolute", path: "/etc/secret", setup: func(t *testing.T, dir, outside string) {
			require.NoError(t, os.Symlink(outside, filepath.Join(dir, "etc")))
		}},
		{name: "file-link-relative", path: "/etc/secret", lastOnly: true, setup: func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Mkdir(filepath.Join(dir, "etc"), 0o755))
			require.NoError(t, os.Symlink("../../outside/secret", filepath.Join(dir, "etc/secret")))
			require.NoError(t, os.Symlink("../../outside/secret.d", filepath.Join(dir, "etc/secret.d")))
		}},
		{name: "file-link-absolute", path: "/etc/secret", lastOnly: true, setup: func(t *testing.T, dir, outside string) {
			require.NoError(t, os.Mkdir(filepath.Join(dir, "etc"), 0o755))
			require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "etc/secret")))
			require.NoError(t, os.Symlink(filepath.Join(outside, "secret.d"), filepath.Join(dir, "etc/secret.d")))
		}},
		{name: "link-chain", path: "/a/secret", setup: func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Mkdir(filepath.Join(dir, "b"), 0o755))
			require.NoError(t, os.Symlink("b/c", filepath.Join(dir, "a")))
			require.NoError(t, os.Symlink("../../outside", filepath.Join(dir, "b/c")))
		}},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, dir, outside := newRoot(t)
			if tc.setup != nil {
				tc.setup(t, dir, outside)
			}
			inBefore, outBefore := snapshot(t, dir), snapshot(t, outside)
			for _, n := range escapeItems(r, tc.path, tc.lastOnly) {
				for _, walk := range []func(context.Context, *converge.Graph) (*converge.Report, error){converge.Apply, converge.ApplyDry} {
					_, err := walk(ctx, graph(n))
					require.ErrorIs(t, err, ErrEscape, "item %s", n.ID())
					var ee *EscapeError
					require.True(t, errors.As(err, &ee), "item %s: %v", n.ID(), err)
					assert.Contains(t, ee.Error(), "escapes the root")
				}
			}
			assert.Equal(t, inBefore, snapshot(t, dir), "the root changed")
			assert.Equal(t, outBefore, snapshot(t, outside), "outside changed")
		})
	}
}

// TestSymlinkTargetOutsideRefused refuses to create a link that points
// outside the root.
func TestSymlinkTargetOutsideRefused(t *testing.T) {
	r, dir, outside := newRoot(t)
	for _, target := range []string{"../outside", "../../x", outside + "/secret"} {
		_, err := converge.Apply(context.Background(), graph((&Symlink{Root: r, Path: "/etc2", Target: target}).Node()))
		require.ErrorIs(t, err, ErrEscape, target)
	}
	assert.NoFileExists(t, filepath.Join(dir, "etc2"))
	// A target inside the root, absolute by the root's real directory, is fine.
	mustApply(t, graph((&Symlink{Root: r, Path: "/etc3", Target: filepath.Join(r.Dir(), "etc")}).Node()))
}

// TestLinksInsideFollowed writes through links that stay inside the root.
func TestLinksInsideFollowed(t *testing.T) {
	r, dir, _ := newRoot(t)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "boot/firmware"), 0o755))
	writeFile(t, filepath.Join(dir, "boot/firmware/config.txt"), "arm_64bit=1\n")
	require.NoError(t, os.Symlink("firmware/config.txt", filepath.Join(dir, "boot/config.txt")))
	require.NoError(t, os.Symlink(filepath.Join(r.Dir(), "boot"), filepath.Join(dir, "bootlink")))

	mustApply(t, graph(NewConfigFile(r, "/boot/config.txt").Key("", "gpu_mem", "64").Node()))
	assert.Equal(t, "arm_64bit=1\ngpu_mem=64\n", readFile(t, filepath.Join(dir, "boot/firmware/config.txt")))
	fi, err := os.Lstat(filepath.Join(dir, "boot/config.txt"))
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSymlink, "the link was replaced")

	mustApply(t, graph((&Line{Root: r, Path: "/bootlink/firmware/config.txt", Line: "# managed"}).Node()))
	assert.Equal(t, "arm_64bit=1\ngpu_mem=64\n# managed\n", readFile(t, filepath.Join(dir, "boot/firmware/config.txt")))
}

// TestSwapBetweenCheckAndApply swaps a directory for a link pointing
// outside after the walk checked the item: once before Apply starts, and
// once inside Apply, after the path was resolved and before it is written
// (so that only os.Root stands in the way).
func TestSwapBetweenCheckAndApply(t *testing.T) {
	for _, inside := range []bool{false, true} {
		for _, kind := range []string{"file", "line", "configkey", "dir", "symlink", "sysctl"} {
			name := kind
			if inside {
				name += "/during-apply"
			}
			t.Run(name, func(t *testing.T) {
				r, dir, outside := newRoot(t)
				writeFile(t, filepath.Join(dir, "etc/x"), "a=1\n")
				writeFile(t, filepath.Join(outside, "x"), "a=1\n")
				writeFile(t, filepath.Join(dir, "etc/ip_forward"), "0\n")
				writeFile(t, filepath.Join(outside, "ip_forward"), "0\n")
				var n converge.Node
				switch kind {
				case "file":
					n = (&File{Root: r, Path: "/etc/x", Content: []byte("pwned\n")}).Node()
				case "line":
					n = (&Line{Root: r, Path: "/etc/x", Line: "pwned"}).Node()
				case "configkey":
					n = NewConfigFile(r, "/etc/x").Key("", "a", "2").Node()
				case "dir":
					n = (&Dir{Root: r, Path: "/etc/newdir"}).Node()
				case "symlink":
					n = (&Symlink{Root: r, Path: "/etc/newlink", Target: "x"}).Node()
				case "sysctl":
					// The runtime file is reached through etc/ for this test.
					require.NoError(t, os.MkdirAll(filepath.Join(dir, "proc/sys"), 0o755))
					require.NoError(t, os.Symlink("../../etc", filepath.Join(dir, "proc/sys/kern")))
					n = (&Sysctl{Root: r, Key: "kern.ip_forward", Value: "1"}).Node()
				}
				swap := func() {
					require.NoError(t, os.Rename(filepath.Join(dir, "etc"), filepath.Join(dir, "etc.old")))
					require.NoError(t, os.Symlink(outside, filepath.Join(dir, "etc")))
				}
				if inside {
					r.afterResolve = func(string) { r.afterResolve = nil; swap() }
				}
				var wrapped converge.Node = swapBeforeApply{Node: n, swap: func() {
					if !inside {
						swap()
					}
				}}
				outBefore := snapshot(t, outside)
				_, err := converge.Apply(context.Background(), graph(wrapped))
				require.ErrorIs(t, err, ErrEscape)
				var ee *EscapeError
				require.True(t, errors.As(err, &ee))
				assert.Equal(t, outBefore, snapshot(t, outside), "outside changed")
			})
		}
	}
}

// swapBeforeApply runs swap after the walk checked the item and before
// Apply.
type swapBeforeApply struct {
	converge.Node
	swap func()
}

func (s swapBeforeApply) Apply(ctx context.Context, current, target any) (any, error) {
	s.swap()
	return s.Node.Apply(ctx, current, target)
}

// TestInvalidPaths refuses empty paths, the root itself and NUL bytes.
func TestInvalidPaths(t *testing.T) {
	r, _, _ := newRoot(t)
	for _, p := range []string{"", "/", ".", "a\x00b"} {
		_, err := converge.Apply(context.Background(), graph((&File{Root: r, Path: p}).Node()))
		require.ErrorIs(t, err, ErrInvalidPath, "%q", p)
	}
	_, err := converge.Apply(context.Background(), graph((&File{Path: "/x"}).Node()))
	require.ErrorIs(t, err, ErrInvalidItem)
}

// TestTooManyLinks refuses a link loop.
func TestTooManyLinks(t *testing.T) {
	r, dir, _ := newRoot(t)
	require.NoError(t, os.Symlink("b", filepath.Join(dir, "a")))
	require.NoError(t, os.Symlink("a", filepath.Join(dir, "b")))
	_, err := converge.Apply(context.Background(), graph((&File{Root: r, Path: "/a/x"}).Node()))
	require.ErrorIs(t, err, ErrTooManyLinks)
}

// TestFixedPathItemsEscape refuses Hostname and a Sysctl persist file when
// /etc is a link pointing outside.
func TestFixedPathItemsEscape(t *testing.T) {
	r, dir, outside := newRoot(t)
	require.NoError(t, os.Symlink("../outside", filepath.Join(dir, "etc")))
	writeFile(t, filepath.Join(dir, "proc/sys/vm/swappiness"), "60\n")
	outBefore := snapshot(t, outside)
	for _, n := range []converge.Node{
		(&Hostname{Root: r, Name: "edge"}).Node(),
		(&Sysctl{Root: r, Key: "vm.swappiness", Value: "10", Persist: "/etc/sysctl.d/99.conf"}).Node(),
	} {
		_, err := converge.Apply(context.Background(), graph(n))
		require.ErrorIs(t, err, ErrEscape, n.ID())
	}
	assert.Equal(t, outBefore, snapshot(t, outside))
}

// TestLinkTargetEndingInDotDot follows a link whose target ends with "..".
func TestLinkTargetEndingInDotDot(t *testing.T) {
	r, dir, _ := newRoot(t)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	require.NoError(t, os.Symlink("a/b/..", filepath.Join(dir, "up")))
	_, err := converge.Apply(context.Background(), graph((&File{Root: r, Path: "/up"}).Node()))
	require.ErrorIs(t, err, ErrWrongType, "/up leads to the directory a")
}

// TestFastAndSlowReadsAgree reads the same paths with the openat2 fast
// path and with step-by-step resolution: both see the same thing.
func TestFastAndSlowReadsAgree(t *testing.T) {
	fast, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "etc/a.conf"), "a\n")
	writeFile(t, filepath.Join(dir, "etc/empty"), "")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "etc/d"), 0o755))
	require.NoError(t, os.Symlink("a.conf", filepath.Join(dir, "etc/link")))
	slow, err := OpenRoot(dir)
	require.NoError(t, err)
	slow.dirf.Close()
	slow.dirf = nil
	t.Cleanup(func() { slow.Close() })
	for _, p := range []string{"/etc/a.conf", "etc//./a.conf", "/etc/empty", "/etc/missing", "/nodir/x", "/etc/link", "/etc/d", "/etc/a.conf/x", "/etc/d/../a.conf"} {
		n1, rel1, fi1, err1 := fast.readResolved(p)
		n2, rel2, fi2, err2 := slow.readResolved(p)
		assert.Equal(t, err1 == nil, err2 == nil, "%s: %v / %v", p, err1, err2)
		assert.Equal(t, errors.Is(err1, ErrWrongType), errors.Is(err2, ErrWrongType), p)
		if err1 == nil && err2 == nil {
			assert.Equal(t, []any{n1, rel1, fi1.exists, string(fi1.content), fi1.mode}, []any{n2, rel2, fi2.exists, string(fi2.content), fi2.mode}, p)
		}
	}
}
