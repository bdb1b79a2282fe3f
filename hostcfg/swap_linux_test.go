//go:build linux

package hostcfg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// outsideMarker is in every byte range of the files outside the root of
// the swap loop: any state, diff, report or error holding it leaked them.
const outsideMarker = "OUTSIDE-SECRET"

// render prints v with its fields both as values and as text, so that
// content held as []byte shows as the text it is.
func render(v any) string { return fmt.Sprintf("%+v\n%s", v, v) }

// swapDuration is how long the swap loop runs: a few seconds in the normal
// run; HOSTCFG_SWAP_SECONDS runs it longer.
func swapDuration(t *testing.T) time.Duration {
	if s := os.Getenv("HOSTCFG_SWAP_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "HOSTCFG_SWAP_SECONDS")
		return time.Duration(n) * time.Second
	}
	if testing.Short() {
		return 500 * time.Millisecond
	}
	return 2 * time.Second
}

// TestSwapLoopReadsStayInsideRoot swaps the directory "etc" of a root for a
// symbolic link to a directory outside it and back, as fast as it can,
// while items of every kind read (StateCurrent), dry-run and apply their
// files in it, both through a link inside the root ("/l" -> "etc", the
// step-by-step path) and directly ("/etc/...", the one-call path). The
// files outside hold the marker: no state, diff, report or error may
// carry it, and nothing outside may change (content, mode or owner).
func TestSwapLoopReadsStayInsideRoot(t *testing.T) {
	r, dir, outside := newRoot(t)
	names := []string{"f", "g", "config.txt", "lines", "passwd"}
	etc := filepath.Join(dir, "etc")
	// The files sit a few directories below the swapped one, so that a
	// resolution has several steps in which to meet the swap.
	const deep = "a/b/c/d/e/"
	for _, n := range names {
		writeFile(t, filepath.Join(etc, deep+n), "inside "+n+"\n")
		writeFile(t, filepath.Join(outside, deep+n), outsideMarker+" "+n+"\ngpu_mem="+outsideMarker+"\n")
	}
	// A user name both passwd files know, with different ids.
	const passwd = "inside:x:1000:1000::/:/bin/sh\n"
	writeFile(t, filepath.Join(etc, "passwd"), passwd)
	writeFile(t, filepath.Join(outside, "passwd"), outsideMarker+"\ninside:x:31337:31337::/:/bin/sh\n")
	require.NoError(t, os.Mkdir(filepath.Join(outside, deep+"d"), 0o755))
	require.NoError(t, os.Symlink("f", filepath.Join(outside, deep+"s")))
	require.NoError(t, os.Symlink("etc", filepath.Join(dir, "l")))
	outBefore := snapshot(t, outside)

	var items []converge.Node
	for _, base := range []string{"/l/" + deep, "/etc/" + deep} {
		items = append(items,
			(&File{Root: r, Path: base + "f", Content: []byte("inside f\n"), Mode: 0o600}).Node(),
			(&File{Root: r, Path: base + "passwd", Content: []byte("inside passwd\n"), Owner: &Ownership{UID: os.Geteuid(), GID: os.Getegid()}}).Node(),
			(&Dir{Root: r, Path: base + "d", Mode: 0o700}).Node(),
			(&Symlink{Root: r, Path: base + "s", Target: "f"}).Node(),
			(&Line{Root: r, Path: base + "lines", Line: "x"}).Node(),
			NewConfigFile(r, base+"config.txt").Key("", "gpu_mem", "64").Node(),
		)
	}
	// Each base gets its own graph: items of the two bases share files.
	graphs := []*converge.Graph{graph(items[:6]...), graph(items[6:]...)}
	// A content change on every apply: writes race the swap too.
	gContent := func(i int64) []byte { return []byte(fmt.Sprintf("g %d\n", i)) }

	var leaked atomic.Int64
	var leaks sync.Map // first leaks, for the failure message
	check := func(what string, v any) {
		s := render(v)
		if strings.Contains(s, outsideMarker) {
			leaked.Add(int64(strings.Count(s, outsideMarker) * len(outsideMarker)))
			leaks.LoadOrStore(what, s)
		}
	}

	ctx := context.Background()
	stop := make(chan struct{})
	var swaps, reads, dries, applies atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the swapper
		defer wg.Done()
		// One atomic exchange a swap: "etc" is always there, a directory
		// or a link to outside, never missing (a missing one an item would
		// create).
		link := filepath.Join(dir, "etc.link")
		if err := os.Symlink(outside, link); err != nil {
			panic(err)
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, etc, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
				panic(err)
			}
			swaps.Add(1)
		}
	}()
	// Two phases: plain reads alone first (many of them, the likeliest
	// to meet the swap mid-way), then the items join them.
	d := swapDuration(t)
	itemsStart := time.Now().Add(d * 2 / 5)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w < 3 {
				select {
				case <-stop:
					return
				case <-time.After(time.Until(itemsStart)):
				}
			}
			for i := int64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch w {
				case 3: // the plain reads of files, as fast as they go
					for _, p := range []string{"/l/" + deep + "f", "/l/" + deep + "config.txt", "/etc/" + deep + "f"} {
						_, _, fi, err := r.readResolved(p)
						check("read "+p, fi.content)
						check("read error "+p, err)
						reads.Add(1)
					}
				case 0: // item reads
					for _, n := range items {
						st, err := n.StateCurrent(ctx, nil)
						check("read "+string(n.ID()), st)
						check("read error "+string(n.ID()), err)
						reads.Add(1)
					}
					_, content, _, _, err := r.peek("/l/" + deep + "passwd")
					check("peek", content)
					check("peek error", err)
					uid, _, err := r.ownerIDs("/etc/"+deep+"f", &Ownership{User: "inside"})
					check("owner lookup error", err)
					if uid == 31337 {
						leaked.Add(int64(len(outsideMarker)))
						leaks.LoadOrStore("owner lookup", "uid 31337 from the outside passwd")
					}
					reads.Add(2)
				case 1: // dry runs
					for _, g := range graphs {
						rep, err := converge.ApplyDry(ctx, g)
						check("dry run report", rep)
						check("dry run diff", Diffs(rep))
						check("dry run error", err)
						dries.Add(1)
					}
				case 2: // applies, one of them changing content each time
					g := graph(append(items[:6:6], (&File{Root: r, Path: "/l/" + deep + "g", Content: gContent(i)}).Node())...)
					for _, g := range []*converge.Graph{g, graphs[1]} {
						rep, err := converge.Apply(ctx, g)
						check("apply report", rep)
						check("apply error", err)
						applies.Add(1)
					}
				}
			}
		}()
	}
	time.Sleep(d) // the loop's length, not a synchronisation
	close(stop)
	wg.Wait()

	changed := 0
	outAfter := snapshot(t, outside)
	for k, v := range outBefore {
		if outAfter[k] != v {
			changed++
			t.Errorf("outside file %s changed: %q -> %q", k, v, outAfter[k])
		}
	}
	for k := range outAfter {
		if _, ok := outBefore[k]; !ok {
			changed++
			t.Errorf("outside file %s appeared: %q", k, outAfter[k])
		}
	}
	t.Logf("swap loop: %d swaps; %d reads, %d dry runs, %d applies under the swap; bytes leaked %d; outside files changed %d",
		swaps.Load(), reads.Load(), dries.Load(), applies.Load(), leaked.Load(), changed)
	leaks.Range(func(k, v any) bool {
		t.Errorf("%s leaked the outside: %.300s", k, v)
		return true
	})
	assert.Zero(t, leaked.Load(), "bytes leaked")
	require.Positive(t, swaps.Load(), "the loop swapped")
	require.Positive(t, reads.Load(), "the loop read")
}

// exchange swaps the names a and b atomically.
func exchange(t *testing.T, a, b string) {
	t.Helper()
	require.NoError(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE))
}

// TestSwapMidResolution swaps "etc" for a link to outside at the moment
// resolution looks at the last component of a path below it (the worst
// moment: every directory before it was checked), for the reads, dry
// runs and applies of every kind of item. No state, diff or error may
// carry the outside file's bytes, and nothing outside may change.
func TestSwapMidResolution(t *testing.T) {
	cases := []struct {
		name string
		item func(r *Root) converge.Node
		last string // the component whose look triggers the swap
	}{
		{"file", func(r *Root) converge.Node {
			return (&File{Root: r, Path: "/l/a/f", Content: []byte("new\n"), Mode: 0o600}).Node()
		}, "etc/a/f"},
		{"file mode only", func(r *Root) converge.Node {
			return (&File{Root: r, Path: "/l/a/f", Content: []byte("inside\n"), Mode: 0o600}).Node()
		}, "etc/a/f"},
		{"line", func(r *Root) converge.Node { return (&Line{Root: r, Path: "/l/a/f", Line: "x"}).Node() }, "etc/a/f"},
		{"configkey", func(r *Root) converge.Node { return NewConfigFile(r, "/l/a/f").Key("", "k", "1").Node() }, "etc/a/f"},
		{"dir", func(r *Root) converge.Node { return (&Dir{Root: r, Path: "/l/a/d", Mode: 0o700}).Node() }, "etc/a/d"},
		{"symlink", func(r *Root) converge.Node { return (&Symlink{Root: r, Path: "/l/a/s", Target: "g"}).Node() }, "etc/a"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		for _, mode := range []string{"read", "dry run", "apply"} {
			t.Run(tc.name+" "+mode, func(t *testing.T) {
				r, dir, outside := newRoot(t)
				writeFile(t, filepath.Join(dir, "etc/a/f"), "inside\n")
				require.NoError(t, os.Mkdir(filepath.Join(dir, "etc/a/d"), 0o755))
				require.NoError(t, os.Symlink("f", filepath.Join(dir, "etc/a/s")))
				require.NoError(t, os.Symlink("etc", filepath.Join(dir, "l")))
				writeFile(t, filepath.Join(outside, "a/f"), outsideMarker+"\nk="+outsideMarker+"\n")
				require.NoError(t, os.Mkdir(filepath.Join(outside, "a/d"), 0o755))
				require.NoError(t, os.Symlink("f", filepath.Join(outside, "a/s")))
				link := filepath.Join(dir, "etc.link")
				require.NoError(t, os.Symlink(outside, link))
				outBefore := snapshot(t, outside)
				swapped := false
				r.beforeLook = func(rel string) {
					if rel == tc.last && !swapped {
						swapped = true
						exchange(t, filepath.Join(dir, "etc"), link)
					}
				}
				n := tc.item(r)
				var got any
				var err error
				switch mode {
				case "read":
					got, err = n.StateCurrent(ctx, nil)
				case "dry run":
					var rep *converge.Report
					rep, err = converge.ApplyDry(ctx, graph(n))
					got = []any{rep, Diffs(rep)}
				case "apply":
					got, err = converge.Apply(ctx, graph(n))
				}
				require.True(t, swapped, "the swap happened")
				r.beforeLook = nil
				assert.NotContains(t, render(got), outsideMarker, "state, report or diff")
				if err != nil {
					assert.NotContains(t, err.Error(), outsideMarker, "error")
				}
				assert.Equal(t, outBefore, snapshot(t, outside), "outside unchanged")
			})
		}
	}
}

// TestReadKeepsOnlyTheFileResolutionSaw swaps a directory for a link to
// another directory inside the root between resolution and open: the
// file opened is then not the one resolution saw, and the read must not
// hand out its content as the content of the path resolution found (the
// os.SameFile guard). It resolves again and reads the file there now.
func TestReadKeepsOnlyTheFileResolutionSaw(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "etc/a/f"), "etc\n")
	writeFile(t, filepath.Join(dir, "other/a/f"), "other\n")
	require.NoError(t, os.Symlink("etc", filepath.Join(dir, "l")))
	link := filepath.Join(dir, "etc.link")
	require.NoError(t, os.Symlink("other", link))
	opens := 0
	r.beforeOpen = func(rel string) {
		opens++
		if opens == 1 {
			exchange(t, filepath.Join(dir, "etc"), link)
		}
	}
	_, rel, fi, err := r.readResolved("/l/a/f")
	require.NoError(t, err)
	assert.Equal(t, 2, opens, "resolved again after the swap")
	assert.Equal(t, readFile(t, filepath.Join(dir, rel)), string(fi.content), "the content is that of the file at %s", rel)
	assert.Equal(t, "other/a/f", rel)
}

// TestResolutionLooksThroughTheRoot swaps "etc" for a link to outside just
// before resolution looks at the file below it: what resolution returns
// (used for types and read-cache stamps) never describes the outside file.
func TestResolutionLooksThroughTheRoot(t *testing.T) {
	r, dir, outside := newRoot(t)
	writeFile(t, filepath.Join(dir, "etc/a/f"), "inside\n")
	writeFile(t, filepath.Join(outside, "a/f"), outsideMarker+"\n")
	require.NoError(t, os.Symlink("etc", filepath.Join(dir, "l")))
	link := filepath.Join(dir, "etc.link")
	require.NoError(t, os.Symlink(outside, link))
	swapped := false
	r.beforeLook = func(rel string) {
		if rel == "etc/a/f" && !swapped {
			swapped = true
			exchange(t, filepath.Join(dir, "etc"), link)
		}
	}
	_, seen, err := r.resolveInfo("/l/a/f", true)
	require.True(t, swapped)
	if err == nil && seen != nil {
		out, serr := os.Stat(filepath.Join(outside, "a/f"))
		require.NoError(t, serr)
		assert.False(t, os.SameFile(seen, out), "resolution described the outside file")
	}
	require.Error(t, err, "a link to outside met on the way is refused")
}
