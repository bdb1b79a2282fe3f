package hostcfg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

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

func TestOwnerNeedsRoot(t *testing.T) {
	r, _, _ := newRoot(t)
	saved := geteuid
	geteuid = func() int { return 1000 }
	t.Cleanup(func() { geteuid = saved })
	for _, n := range []converge.Node{
		(&File{Root: r, Path: "/x", Owner: &Ownership{UID: 0, GID: 0}}).Node(),
		(&Dir{Root: r, Path: "/d", Owner: &Ownership{UID: 0, GID: 0}}).Node(),
	} {
		for _, walk := range []func(context.Context, *converge.Graph) (*converge.Report, error){converge.Apply, converge.ApplyDry} {
			_, err := walk(context.Background(), graph(n))
			require.ErrorIs(t, err, ErrNeedRoot, n.ID())
		}
	}
}

func TestWrongTypeRefused(t *testing.T) {
	r, dir, _ := newRoot(t)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	writeFile(t, filepath.Join(dir, "f"), "x")
	for _, n := range []converge.Node{
		(&File{Root: r, Path: "/d"}).Node(),
		(&Line{Root: r, Path: "/d", Line: "x"}).Node(),
		NewConfigFile(r, "/d").Key("", "a", "1").Node(),
		(&Dir{Root: r, Path: "/f"}).Node(),
		(&Symlink{Root: r, Path: "/f", Target: "d"}).Node(),
	} {
		_, err := converge.Apply(context.Background(), graph(n))
		require.ErrorIs(t, err, ErrWrongType, n.ID())
	}
	assert.Equal(t, "x", readFile(t, filepath.Join(dir, "f")))
}

func TestDirNotEmptyNotRemoved(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "d/keep"), "x")
	g := converge.NewGraph()
	g.Add((&Dir{Root: r, Path: "/d"}).Node(), converge.Absent)
	_, err := converge.Apply(context.Background(), g)
	require.Error(t, err)
	var pe *PathError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "/d", pe.Path)
	assert.FileExists(t, filepath.Join(dir, "d/keep"))
}

func TestDirWithFilesDependencies(t *testing.T) {
	r, dir, _ := newRoot(t)
	d := &Dir{Root: r, Path: "/opt/app"}
	f := &File{Root: r, Path: "/opt/app/run.sh", Content: []byte("#!/bin/sh\n"), Mode: 0o755}
	g := converge.NewGraph()
	g.Add(d.Node(), converge.Present)
	g.Add(f.Node(), converge.Present, d.ID())
	before := snapshot(t, dir)
	rep, err := converge.ApplyDry(context.Background(), g)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Count(converge.OutcomeWouldChange))
	assert.Equal(t, before, snapshot(t, dir))
	mustApply(t, g)
	assert.Equal(t, "#!/bin/sh\n", readFile(t, filepath.Join(dir, "opt/app/run.sh")))
	rep, err = converge.Clean(context.Background(), g)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Count(converge.OutcomeChanged))
	assert.NoDirExists(t, filepath.Join(dir, "opt/app"))
}

func TestSymlinkRepoint(t *testing.T) {
	r, dir, _ := newRoot(t)
	l := &Symlink{Root: r, Path: "/current", Target: "v1"}
	mustApply(t, graph(l.Node()))
	l.Target = "v2"
	rep, err := converge.ApplyDry(context.Background(), graph(l.Node()))
	require.NoError(t, err)
	assert.Equal(t, "ln -sf v2 /current (was -> v1)\n", Diffs(rep)[0].Diff)
	mustApply(t, graph(l.Node()))
	got, err := os.Readlink(filepath.Join(dir, "current"))
	require.NoError(t, err)
	assert.Equal(t, "v2", got)
	assert.Zero(t, temps(t, dir))
}

func TestLine(t *testing.T) {
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "etc/hosts")
	writeFile(t, p, "127.0.0.1 localhost\n127.0.1.1 raspberrypi\n10.0.0.9 db\n10.0.0.9 db\n")

	// Replace rewrites the matching line in place.
	mustApply(t, graph((&Line{Root: r, Path: "/etc/hosts", Line: "127.0.1.1 edge-01", Replace: regexp.MustCompile(`^127\.0\.1\.1\s`)}).Node()))
	assert.Equal(t, "127.0.0.1 localhost\n127.0.1.1 edge-01\n10.0.0.9 db\n10.0.0.9 db\n", readFile(t, p))
	// Absent removes every copy.
	g := converge.NewGraph()
	g.Add((&Line{Root: r, Path: "/etc/hosts", Line: "10.0.0.9 db"}).Node(), converge.Absent)
	mustApply(t, g)
	assert.Equal(t, "127.0.0.1 localhost\n127.0.1.1 edge-01\n", readFile(t, p))
	// A missing file is created with the line; a file without a final
	// newline gets one.
	mustApply(t, graph((&Line{Root: r, Path: "/etc/new", Line: "x", Mode: 0o600}).Node()))
	assert.Equal(t, "x\n", readFile(t, filepath.Join(dir, "etc/new")))
	writeFile(t, filepath.Join(dir, "etc/nonl"), "a")
	mustApply(t, graph((&Line{Root: r, Path: "/etc/nonl", Line: "b"}).Node()))
	assert.Equal(t, "a\nb\n", readFile(t, filepath.Join(dir, "etc/nonl")))
	// Absent on a missing file creates nothing.
	g = converge.NewGraph()
	g.Add((&Line{Root: r, Path: "/etc/none", Line: "x"}).Node(), converge.Absent)
	mustApply(t, g)
	assert.NoFileExists(t, filepath.Join(dir, "etc/none"))
	// A line with a terminator is invalid.
	_, err := converge.Apply(context.Background(), graph((&Line{Root: r, Path: "/etc/x", Line: "a\nb"}).Node()))
	require.ErrorIs(t, err, ErrInvalidItem)
}

// TestConcurrentEditsOfOneFile runs many Line and ConfigKey items on one
// file in one walk (in parallel) and in two concurrent walks: no change is
// lost.
func TestConcurrentEditsOfOneFile(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "boot/config.txt"), realConfig)
	cf := NewConfigFile(r, "/boot/config.txt")
	g1, g2 := converge.NewGraph(), converge.NewGraph()
	for i := range 40 {
		g1.Add(cf.Key("", fmt.Sprintf("key_a%02d", i), fmt.Sprint(i)).Node(), converge.Present)
		g2.Add(cf.Key("pi4", fmt.Sprintf("key_b%02d", i), fmt.Sprint(i)).Node(), converge.Present)
		g2.Add(cf.Entry("", "dtoverlay", fmt.Sprintf("overlay%02d", i)).Node(), converge.Present)
		g1.Add((&Line{Root: r, Path: "/boot/config.txt", Line: fmt.Sprintf("# line %02d", i)}).Node(), converge.Present)
	}
	var wg sync.WaitGroup
	for _, g := range []*converge.Graph{g1, g2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := converge.Apply(context.Background(), g)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	doc := ParseConfig([]byte(readFile(t, filepath.Join(dir, "boot/config.txt"))))
	for i := range 40 {
		v, ok := doc.Get("", fmt.Sprintf("key_a%02d", i))
		assert.True(t, ok && v == fmt.Sprint(i), "key_a%02d", i)
		v, ok = doc.Get("pi4", fmt.Sprintf("key_b%02d", i))
		assert.True(t, ok && v == fmt.Sprint(i), "key_b%02d", i)
		assert.True(t, doc.Has("", "dtoverlay", fmt.Sprintf("overlay%02d", i)))
		assert.True(t, hasLine(doc.Bytes(), fmt.Sprintf("# line %02d", i)))
	}
	// Everything that was there is still there.
	assert.True(t, doc.Has("cm5", "dtoverlay", "dwc2,dr_mode=host"))
	for _, g := range []*converge.Graph{g1, g2} {
		rep := mustApply(t, g)
		assert.Equal(t, rep.Count(converge.OutcomeUnchanged), len(rep.Items))
	}
}

func TestConfigKeyRebootAndOneLine(t *testing.T) {
	ctx := context.Background()
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "boot/config.txt")
	writeFile(t, p, realConfig)
	cf := NewConfigFile(r, "/boot/config.txt")
	k := cf.Key("", "arm_boost", "0")
	g := graph(k.Node())

	rep, err := converge.ApplyDry(ctx, g)
	require.NoError(t, err)
	res := rep.Items[0]
	assert.True(t, res.After.(ConfigKeyState).RebootRequired)
	assert.Equal(t, realConfig, readFile(t, p))
	assert.Contains(t, Diffs(rep)[0].Diff, "-arm_boost=1\n+arm_boost=0\n")
	require.Len(t, rep.Actions(), 1, "a dry run says the change would need a reboot")
	assert.Equal(t, converge.ActionReboot, rep.Actions()[0].Action)

	rep = mustApply(t, g)
	require.Len(t, rep.Actions(), 1)
	assert.Equal(t, converge.ActionReboot, rep.Actions()[0].Action)
	assert.Equal(t, k.ID(), rep.Actions()[0].ID)
	assert.Contains(t, rep.Actions()[0].Reason, "arm_boost=0")
	assert.Equal(t, []string{"arm_boost=1 -> arm_boost=0"}, changedLines(t, realConfig, readFile(t, p)))

	// Converged: no action.
	rep = mustApply(t, g)
	assert.Empty(t, rep.Actions())

	// A file that is not boot configuration asks for nothing.
	writeFile(t, filepath.Join(dir, "etc/app.conf"), "x=1\n")
	other := NewConfigFile(r, "/etc/app.conf")
	other.Reboot = false
	rep = mustApply(t, graph(other.Key("", "x", "2").Node()))
	assert.Empty(t, rep.Actions())
	assert.Equal(t, "x=2\n", readFile(t, filepath.Join(dir, "etc/app.conf")))
}

func TestConfigKeyAbsentAndEntries(t *testing.T) {
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "boot/config.txt")
	writeFile(t, p, realConfig)
	cf := NewConfigFile(r, "/boot/config.txt")
	g := converge.NewGraph()
	g.Add(cf.Entry("", "dtoverlay", "disable-bt").Node(), converge.Absent)
	g.Add(cf.Key("cm4", "otg_mode", "").Node(), converge.Absent)
	g.Add(cf.Entry("", "dtoverlay", "i2c-rtc,ds3231").Node(), converge.Present)
	mustApply(t, g)
	doc := ParseConfig([]byte(readFile(t, p)))
	assert.Equal(t, []string{"vc4-kms-v3d", "i2c-rtc,ds3231"}, doc.Values("", "dtoverlay"))
	_, ok := doc.Get("cm4", "otg_mode")
	assert.False(t, ok)
	// A missing file with an Absent key stays missing.
	g = converge.NewGraph()
	g.Add(NewConfigFile(r, "/boot/none.txt").Key("", "a", "").Node(), converge.Absent)
	mustApply(t, g)
	assert.NoFileExists(t, filepath.Join(dir, "boot/none.txt"))
	// Invalid keys and values.
	for _, k := range []*ConfigKey{cf.Key("", "", "1"), cf.Key("", "a=b", "1"), cf.Key("", "a", "1\n"), cf.Key("[x", "a", "1"), {Key: "a"}} {
		_, err := converge.Apply(context.Background(), graph(k.Node()))
		require.ErrorIs(t, err, ErrInvalidItem, k.ID())
	}
}

// TestImport turns the settings of a config.txt into items; applying them
// changes nothing, and they keep the settings when the file is lost.
func TestImport(t *testing.T) {
	ctx := context.Background()
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "boot/config.txt")
	writeFile(t, p, realConfig+"arm_boost=0\n")
	cf := NewConfigFile(r, "/boot/config.txt")
	items, err := cf.Import(ctx)
	require.NoError(t, err)
	ids := map[converge.ID]bool{}
	for _, it := range items {
		ids[it.ID()] = true
	}
	g := converge.NewGraph()
	AddConfigKeys(g, items)
	assert.Equal(t, []converge.ID{"configkey:/boot/config.txt:[pi4]gpio=17=op,dh"}, g.Dependencies("configkey:/boot/config.txt:[pi4]gpio=18=op,dl"))
	assert.Equal(t, []converge.ID{"configkey:/boot/config.txt:dtoverlay=vc4-kms-v3d"}, g.Dependencies("configkey:/boot/config.txt:dtoverlay=disable-bt"))
	assert.True(t, ids["configkey:/boot/config.txt:arm_boost"])
	assert.True(t, ids["configkey:/boot/config.txt:dtoverlay=vc4-kms-v3d"])
	assert.True(t, ids["configkey:/boot/config.txt:[cm5]dtoverlay=dwc2,dr_mode=host"])
	assert.True(t, ids["configkey:/boot/config.txt:[pi4]gpio=18=op,dl"])
	assert.Len(t, items, 16)
	for _, it := range items {
		if it.Key == "arm_boost" {
			assert.Equal(t, "0", it.Value, "the winning value is imported")
		}
	}
	rep := mustApply(t, g)
	assert.Equal(t, len(items), rep.Count(converge.OutcomeUnchanged))

	entries, err := cf.Entries(ctx)
	require.NoError(t, err)
	assert.Len(t, entries, 17)

	// The file is lost: the imported items bring every setting back.
	require.NoError(t, os.Remove(p))
	mustApply(t, g)
	doc := ParseConfig([]byte(readFile(t, p)))
	v, _ := doc.Get("", "arm_boost")
	assert.Equal(t, "0", v)
	assert.Equal(t, []string{"17=op,dh", "18=op,dl"}, doc.Values("pi4", "gpio"))
	assert.Equal(t, []string{"vc4-kms-v3d", "disable-bt"}, doc.Values("", "dtoverlay"))
}

func TestSysctl(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "proc/sys/net/ipv4/tcp_rmem"), "4096\t131072\t6291456\n")
	writeFile(t, filepath.Join(dir, "proc/sys/net/ipv4/conf/eth0.1/forwarding"), "0\n")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/sysctl.d"), 0o755))
	persist := filepath.Join(dir, "etc/sysctl.d/99-converge.conf")
	writeFile(t, persist, "# managed\nvm.swappiness = 10\n")

	// Whitespace does not matter.
	rep := mustApply(t, graph((&Sysctl{Root: r, Key: "net/ipv4/tcp_rmem", Value: "4096 131072  6291456"}).Node()))
	assert.Equal(t, converge.OutcomeUnchanged, rep.Items[0].Outcome)

	s := &Sysctl{Root: r, Key: "net.ipv4.conf.eth0/1.forwarding", Value: "1", Persist: "/etc/sysctl.d/99-converge.conf"}
	assert.Equal(t, converge.ID("sysctl:net.ipv4.conf.eth0/1.forwarding"), s.ID())
	mustApply(t, graph(s.Node()))
	assert.Equal(t, "1\n", readFile(t, filepath.Join(dir, "proc/sys/net/ipv4/conf/eth0.1/forwarding")))
	assert.Equal(t, "# managed\nvm.swappiness = 10\nnet.ipv4.conf.eth0/1.forwarding=1\n", readFile(t, persist))

	// Unknown keys and bad keys fail.
	_, err := converge.Apply(context.Background(), graph((&Sysctl{Root: r, Key: "net.nope", Value: "1"}).Node()))
	require.ErrorIs(t, err, os.ErrNotExist)
	for _, key := range []string{"", "net..x", "net/../../etc/passwd"} {
		_, err = converge.Apply(context.Background(), graph((&Sysctl{Root: r, Key: key, Value: "1"}).Node()))
		require.ErrorIs(t, err, ErrInvalidItem, key)
	}
}

func TestHostname(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "etc/hostname"), "raspberrypi\n")
	h := &Hostname{Root: r, Name: "edge-01.example"}
	mustApply(t, graph(h.Node()))
	assert.Equal(t, "edge-01.example\n", readFile(t, filepath.Join(dir, "etc/hostname")))
	assert.NoFileExists(t, filepath.Join(dir, "proc/sys/kernel/hostname"), "no runtime file is created")
	for _, bad := range []string{"", "-x", "a_b", "a..b", string(make([]byte, 254))} {
		_, err := converge.Apply(context.Background(), graph((&Hostname{Root: r, Name: bad}).Node()))
		require.ErrorIs(t, err, ErrInvalidItem, bad)
	}
}

// TestLeftoversRemoved plants temporary files like a crashed write would
// leave: the next run notices them, and Apply removes them even though the
// content is already right.
func TestLeftoversRemoved(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "etc/motd"), "hi\n")
	writeFile(t, filepath.Join(dir, "etc/.motd"+tempMarker+"deadbeef"), "h")
	writeFile(t, filepath.Join(dir, "etc/.other"+tempMarker+"deadbeef"), "h")
	f := &File{Root: r, Path: "/etc/motd", Content: []byte("hi\n")}
	st, err := f.StateCurrent(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Leftovers)
	rep := mustApply(t, graph(f.Node()))
	assert.Equal(t, converge.OutcomeChanged, rep.Items[0].Outcome)
	assert.NoFileExists(t, filepath.Join(dir, "etc/.motd"+tempMarker+"deadbeef"))
	assert.FileExists(t, filepath.Join(dir, "etc/.other"+tempMarker+"deadbeef"), "not this item's")
	assert.Equal(t, "hi\n", readFile(t, filepath.Join(dir, "etc/motd")))
	rep = mustApply(t, graph(f.Node()))
	assert.Equal(t, converge.OutcomeUnchanged, rep.Items[0].Outcome)
}

func TestCancelledContext(t *testing.T) {
	r, dir, _ := newRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &File{Root: r, Path: "/x", Content: []byte("x")}
	_, err := f.Apply(ctx, FileState{}, FileState{Path: "/x", Exists: true, Content: []byte("x"), UID: -1, GID: -1})
	require.ErrorIs(t, err, context.Canceled)
	_, err = NewConfigFile(r, "/c").Key("", "a", "1").Apply(ctx, ConfigKeyState{}, ConfigKeyState{Present: true, Value: "1"})
	require.ErrorIs(t, err, context.Canceled)
	assert.NoFileExists(t, filepath.Join(dir, "x"))
	assert.NoFileExists(t, filepath.Join(dir, "c"))
}

func TestOpenRootErrors(t *testing.T) {
	_, err := OpenRoot(filepath.Join(t.TempDir(), "missing"))
	var pe *PathError
	require.ErrorAs(t, err, &pe)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestConfigFileReadCache checks that the items of one file share one read
// of it while it does not change, and that any change is seen: a rewrite,
// and an in-place edit of the same size with the old modification time put
// back.
func TestConfigFileReadCache(t *testing.T) {
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "boot/config.txt")
	writeFile(t, p, "a=1\nb=2\n")
	// Pretend the reads happen long after the file last changed, as on a
	// device whose config.txt is old.
	saved := timeNow
	timeNow = func() time.Time { return time.Now().Add(time.Hour) }
	t.Cleanup(func() { timeNow = saved })

	cf := NewConfigFile(r, "/boot/config.txt")
	a, b := cf.Key("", "a", "1"), cf.Key("", "b", "2")
	g := graph(a.Node(), b.Node())
	rep := mustApply(t, g)
	assert.Equal(t, 2, rep.Count(converge.OutcomeUnchanged))
	reads := r.reads.Load()
	for range 3 {
		mustApply(t, g)
	}
	assert.Equal(t, reads, r.reads.Load(), "an unchanged file was read again")

	// In place, same size, same modification time: the change time tells.
	fi, err := os.Stat(p)
	require.NoError(t, err)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("a=9"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
	st, err := a.StateCurrent(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, "9", st.Value)
	mustApply(t, g)
	assert.Equal(t, "a=1\nb=2\n", readFile(t, p))
}

// TestConfigFileRacyRead does not trust the cache for a file that changed
// just before it was read: timestamps that coarse could hide a change.
func TestConfigFileRacyRead(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "c.txt"), "a=1\n")
	k := NewConfigFile(r, "/c.txt").Key("", "a", "1")
	for range 3 {
		_, err := k.StateCurrent(context.Background(), nil)
		require.NoError(t, err)
	}
	assert.Equal(t, int64(3), r.reads.Load())
}
