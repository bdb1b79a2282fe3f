package hostcfg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
