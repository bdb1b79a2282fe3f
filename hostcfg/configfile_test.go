package hostcfg

import (
	"context"
	"os"
	"path/filepath"
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
