package hostcfg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
	assert.True(t, ids["configkey:/boot/config.txt:camera_auto_detect"])
	assert.True(t, ids["configkey:/boot/config.txt:arm_boost=1"], "a key held twice is kept entry by entry")
	assert.True(t, ids["configkey:/boot/config.txt:arm_boost=0"])
	assert.True(t, ids["configkey:/boot/config.txt:dtoverlay=vc4-kms-v3d"])
	assert.True(t, ids["configkey:/boot/config.txt:[cm5]dtoverlay=dwc2,dr_mode=host"])
	assert.True(t, ids["configkey:/boot/config.txt:[pi4]gpio=18=op,dl"])
	assert.Len(t, items, 17)
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
	setNow(t, func() time.Time { return time.Now().Add(time.Hour) })

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
	overwriteKeepingTimes(t, p, "a=9")
	st, err := a.StateCurrent(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, "9", st.Value)
	mustApply(t, g)
	assert.Equal(t, "a=1\nb=2\n", readFile(t, p))
}

// overwriteKeepingTimes writes b over the start of the file at p, in
// place, and puts its modification time back: only the change time shows
// the edit.
func overwriteKeepingTimes(t *testing.T, p, b string) {
	t.Helper()
	fi, err := os.Stat(p)
	require.NoError(t, err)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte(b), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
}

// ctimeOf returns the change time of the file at p in nanoseconds.
func ctimeOf(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	require.NoError(t, err)
	st, ok := stampOf(fi)
	if !ok {
		t.Skip("no stat identity on this platform: the read cache is off")
	}
	return st.ctime
}

// setNow makes timeNow return at for the rest of the test.
func setNow(t *testing.T, at func() time.Time) {
	saved := timeNow
	timeNow = at
	t.Cleanup(func() { timeNow = saved })
}

// TestConfigFileRacyRead does not trust the cache for a file that changed
// just before it was read, and trusts it once the change is old enough.
func TestConfigFileRacyRead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration // time of the reads after the file's change
		reads int64
	}{
		{"just changed", time.Millisecond, 3},
		{"long ago", time.Hour, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, dir, _ := newRoot(t)
			p := filepath.Join(dir, "c.txt")
			writeFile(t, p, "a=1\n")
			ctime := ctimeOf(t, p)
			setNow(t, func() time.Time { return time.Unix(0, ctime).Add(tc.after) })
			k := NewConfigFile(r, "/c.txt").Key("", "a", "1")
			for range 3 {
				st, err := k.StateCurrent(context.Background(), nil)
				require.NoError(t, err)
				assert.Equal(t, "1", st.Value)
			}
			assert.Equal(t, tc.reads, r.reads.Load())
		})
	}
}

// TestRacyWindow checks which versions of a file are settled when read:
// both timestamps older than the read by more than the window of the file
// system, which the change time's digits tell.
func TestRacyWindow(t *testing.T) {
	const sec = int64(time.Second)
	fine := 1_700_000_000*sec + 123_456_789 // digits below the millisecond
	coarse := 1_700_000_000 * sec           // FAT, ext4 with small inodes
	centi := coarse + 10*int64(time.Millisecond)
	at := func(base int64, d time.Duration) time.Time { return time.Unix(0, base).Add(d) }
	for _, tc := range []struct {
		name    string
		st      fileStamp
		readAt  time.Time
		settled bool
	}{
		{"fine, within the window", fileStamp{mtime: fine, ctime: fine}, at(fine, 50*time.Millisecond), false},
		{"fine, past the window", fileStamp{mtime: fine, ctime: fine}, at(fine, 150*time.Millisecond), true},
		{"coarse, within the window", fileStamp{mtime: coarse, ctime: coarse}, at(coarse, 2900*time.Millisecond), false},
		{"coarse, past the window", fileStamp{mtime: coarse, ctime: coarse}, at(coarse, 3100*time.Millisecond), true},
		{"10 ms granules are coarse", fileStamp{mtime: centi, ctime: centi}, at(centi, time.Second), false},
		{"old change, recent modification time", fileStamp{mtime: fine + int64(time.Hour), ctime: fine}, at(fine, time.Hour), false},
		{"modification time in the future", fileStamp{mtime: fine + 2*int64(time.Hour), ctime: fine}, at(fine, time.Hour), false},
		{"change time in the future", fileStamp{mtime: fine, ctime: fine}, at(fine, -time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.settled, settled(tc.st, tc.readAt))
			snap := fileSnap{rel: "c.txt", stamp: tc.st, settled: settled(tc.st, tc.readAt)}
			assert.Equal(t, tc.settled, snap.trusted("c.txt", tc.st))
			assert.False(t, snap.trusted("d.txt", tc.st), "another path")
			other := tc.st
			other.size++
			assert.False(t, snap.trusted("c.txt", other), "another stamp")
		})
	}
}

// TestConfigFileSeesExternalEdits makes sure the read cache never serves
// a version of the file that someone else replaced between two walks,
// while it is trusted: an edit in place of the same size with the old
// modification time put back, a replacement by rename of the same size and
// times, removal, and a directory above the file swapped for a link to
// another copy, or to the same file moved out of the root.
func TestConfigFileSeesExternalEdits(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, dir, outside, p string)
		// want is the value of key a after the edit ("" when absent);
		// escape is set when the path now leaves the root.
		want   string
		escape bool
	}{
		{"in place, same size and modification time", func(t *testing.T, _, _, p string) {
			overwriteKeepingTimes(t, p, "a=9")
		}, "9", false},
		{"renamed over, same size and times", func(t *testing.T, _, _, p string) {
			fi, err := os.Stat(p)
			require.NoError(t, err)
			tmp := p + ".new"
			writeFile(t, tmp, "a=8\nb=2\n")
			require.NoError(t, os.Chtimes(tmp, fi.ModTime(), fi.ModTime()))
			require.NoError(t, os.Rename(tmp, p))
		}, "8", false},
		{"removed", func(t *testing.T, _, _, p string) {
			require.NoError(t, os.Remove(p))
		}, "", false},
		{"directory swapped for a link to a copy", func(t *testing.T, dir, _, _ string) {
			writeFile(t, filepath.Join(dir, "boot2/firmware/config.txt"), "a=7\nb=2\n")
			require.NoError(t, os.Rename(filepath.Join(dir, "boot"), filepath.Join(dir, "boot.old")))
			require.NoError(t, os.Symlink("boot2", filepath.Join(dir, "boot")))
		}, "7", false},
		{"directory moved out of the root, linked back", func(t *testing.T, dir, outside, _ string) {
			moved := filepath.Join(outside, "boot")
			require.NoError(t, os.Rename(filepath.Join(dir, "boot"), moved))
			require.NoError(t, os.Symlink(moved, filepath.Join(dir, "boot")))
		}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, dir, outside := newRoot(t)
			p := filepath.Join(dir, "boot/firmware/config.txt")
			writeFile(t, p, "a=1\nb=2\n")
			// The reads happen long after the file last changed, so the
			// cache is trusted.
			setNow(t, func() time.Time { return time.Now().Add(time.Hour) })
			cf := NewConfigFile(r, "/boot/firmware/config.txt")
			a, b := cf.Key("", "a", "1"), cf.Key("", "b", "2")
			g := graph(a.Node(), b.Node())
			rep := mustApply(t, g)
			require.Equal(t, 2, rep.Count(converge.OutcomeUnchanged))
			reads := r.reads.Load()
			rep = mustApply(t, g)
			require.Equal(t, 2, rep.Count(converge.OutcomeUnchanged))
			require.Equal(t, reads, r.reads.Load(), "the cache was not used")

			tc.edit(t, dir, outside, p)
			st, err := a.StateCurrent(context.Background(), nil)
			if tc.escape {
				var esc *EscapeError
				require.ErrorAs(t, err, &esc)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want != "", st.Present)
			assert.Equal(t, tc.want, st.Value)
			st, err = b.StateCurrent(context.Background(), nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want != "", st.Present, "the other item of the file")
		})
	}
}

// TestConfigFileRacyCoarseStamps plays a file system whose timestamps are
// too coarse to tell two versions apart (every stamp gets the same times):
// an edit in place of the same size then leaves the stamp as it was, and
// only the racy check stands between the next walk and the old version.
func TestConfigFileRacyCoarseStamps(t *testing.T) {
	const granule = int64(1_700_000_000) * int64(time.Second)
	for _, tc := range []struct {
		name  string
		after time.Duration // time of the reads after the granule
		want  string        // value of key a seen after the edit
	}{
		{"read within the window: the edit is seen", time.Second, "9"},
		// Long after, the stamp is trusted and the edit (which real coarse
		// timestamps would show, for it happens later) is not seen: proof
		// that the stamps are equal and the case above rests on the racy
		// check alone.
		{"read long after: the stamp is trusted", time.Hour, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, dir, _ := newRoot(t)
			r.stampHook = func(st *fileStamp) { st.mtime, st.ctime = granule, granule }
			setNow(t, func() time.Time { return time.Unix(0, granule).Add(tc.after) })
			p := filepath.Join(dir, "config.txt")
			writeFile(t, p, "a=1\nb=2\n")
			cf := NewConfigFile(r, "/config.txt")
			a := cf.Key("", "a", "1")
			g := graph(a.Node(), cf.Key("", "b", "2").Node())
			rep := mustApply(t, g)
			require.Equal(t, 2, rep.Count(converge.OutcomeUnchanged))

			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte("a=9"), 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			st, err := a.StateCurrent(context.Background(), nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want, st.Value)
		})
	}
}

// TestConfigKeyFieldsChanged checks that a ConfigKey whose fields change
// after the file handed it out has the ID and validation of its new
// fields, not of those it was made with.
func TestConfigKeyFieldsChanged(t *testing.T) {
	r, _, _ := newRoot(t)
	cf := NewConfigFile(r, "/boot//config.txt")
	k := cf.Key("pi4", "a", "1")
	assert.Equal(t, converge.ID("configkey:/boot/config.txt:[pi4]a"), k.ID())
	require.NoError(t, k.validate())
	k.Key, k.Section = "b", ""
	assert.Equal(t, converge.ID("configkey:/boot/config.txt:b"), k.ID())
	k.Value = "x\ny"
	require.Error(t, k.validate())
	k.Value, k.Key, k.Repeated = "vc4", "dtoverlay", true
	require.NoError(t, k.validate())
	assert.Equal(t, converge.ID("configkey:/boot/config.txt:dtoverlay=vc4"), k.ID())
	k.Repeated = false
	require.Error(t, k.validate(), "a repeatable key as a Key item")
	assert.Equal(t, "/boot/config.txt", cf.Path())
}

// TestConfigFileLookedAtOncePerWalk: the keys of one file cost one stat per
// walk between them, not one each; a key that changes the file makes the
// keys after it, and its own verification, look again; the next walk looks
// again too.
func TestConfigFileLookedAtOncePerWalk(t *testing.T) {
	r, dir, _ := newRoot(t)
	var stats atomic.Int64
	r.stampHook = func(*fileStamp) { stats.Add(1) }
	setNow(t, func() time.Time { return time.Now().Add(time.Hour) }) // every stamp is settled
	p := filepath.Join(dir, "config.txt")
	var content strings.Builder
	for i := range 50 {
		fmt.Fprintf(&content, "k%d=%d\n", i, i)
	}
	writeFile(t, p, content.String())
	cf := NewConfigFile(r, "/config.txt")
	var nodes []converge.Node
	for i := range 50 {
		nodes = append(nodes, cf.Key("", fmt.Sprintf("k%d", i), fmt.Sprint(i)).Node())
	}
	change := cf.Key("", "k0", "changed")
	g := graph(nodes[1:]...)
	rep := mustApply(t, g) // reads the file
	require.Equal(t, 49, rep.Count(converge.OutcomeUnchanged))
	stats.Store(0)
	rep = mustApply(t, g)
	require.Equal(t, 49, rep.Count(converge.OutcomeUnchanged))
	assert.Equal(t, int64(1), stats.Load(), "one stat for 49 keys of one walk")

	// k0 changes the file: its verification and every key after it in the
	// walk see the new version.
	g = converge.NewGraph()
	g.Add(change.Node(), converge.Present)
	for _, n := range nodes[1:] {
		g.Add(n, converge.Present, change.ID())
	}
	rep = mustApply(t, g)
	require.Equal(t, 1, rep.Count(converge.OutcomeChanged))
	require.Equal(t, 49, rep.Count(converge.OutcomeUnchanged))
	st, err := cf.Key("", "k0", "").StateCurrent(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, "changed", st.Value)

	// An edit by another program between walks is seen by the next walk.
	writeFile(t, p, strings.Replace(content.String(), "k0=0", "k0=other", 1))
	rep, err = converge.Apply(context.Background(), graph(cf.Key("", "k0", "changed").Node()))
	require.NoError(t, err)
	require.Equal(t, 1, rep.Count(converge.OutcomeChanged), "the edit made between walks was seen")
}

// TestConfigFileLookOverlappedByAWriteIsNotShared: a look at the file that
// a write through it overlaps may have seen the version before the write;
// the items after it in the walk do not take what it saw, but look again.
func TestConfigFileLookOverlappedByAWriteIsNotShared(t *testing.T) {
	r, dir, _ := newRoot(t)
	setNow(t, func() time.Time { return time.Now().Add(time.Hour) }) // every stamp is settled
	p := filepath.Join(dir, "config.txt")
	writeFile(t, p, "a=1\n")
	cf := NewConfigFile(r, "/config.txt")
	a := cf.Key("", "a", "1")
	change := cf.Key("", "a", "2")
	mustApply(t, graph(a.Node())) // the file is read and its version cached

	var seen []string
	probe := &probeItem{id: "probe", run: func(ctx context.Context) error {
		// While this look stats the file, the key a is written.
		var once atomic.Bool
		r.stampHook = func(*fileStamp) {
			if once.CompareAndSwap(false, true) {
				goal, err := change.StateGoal(ctx, nil)
				require.NoError(t, err)
				_, err = change.Apply(ctx, ConfigKeyState{}, goal)
				require.NoError(t, err)
			}
		}
		defer func() { r.stampHook = nil }()
		for range 2 {
			st, err := a.StateCurrent(ctx, nil)
			if err != nil {
				return err
			}
			seen = append(seen, st.Value)
		}
		return nil
	}}
	mustApply(t, graph(converge.Wrap[int](probe)))
	require.Len(t, seen, 2)
	assert.Equal(t, "2", seen[1], "the look after the write sees it")
}

// probeItem is an item of a walk whose StateCurrent runs run, with the
// walk's context.
type probeItem struct {
	id  converge.ID
	run func(ctx context.Context) error
}

func (p *probeItem) ID() converge.ID { return p.id }

func (p *probeItem) StateCurrent(ctx context.Context, _ converge.DepStates) (int, error) {
	return 0, p.run(ctx)
}

func (p *probeItem) StateGoal(context.Context, converge.DepStates) (int, error) { return 0, nil }

func (p *probeItem) Check(context.Context, int, int) (converge.Decision, error) {
	return converge.NotRequired(), nil
}

func (p *probeItem) Apply(context.Context, int, int) (int, error) { return 0, nil }

func (p *probeItem) ApplyDry(context.Context, int, int) (int, error) { return 0, nil }
