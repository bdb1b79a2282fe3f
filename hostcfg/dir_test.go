package hostcfg

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
