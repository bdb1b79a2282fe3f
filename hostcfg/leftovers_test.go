package hostcfg

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
