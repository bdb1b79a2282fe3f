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
