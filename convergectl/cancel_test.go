package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
)

// TestBoltCancel cancels an object: the store has it halted as
// cancelled, its history records the cancel and who asked, a second
// cancel changes nothing, and a release wakes it.
func TestBoltCancel(t *testing.T) {
	path := boltFixture(t, nil)
	var out struct {
		Cancelled bool       `json:"cancelled"`
		Object    objectView `json:"object"`
	}
	ctlJSON(t, &out, "cancel", "host", "good", "--bolt", path, "--as", "alice")
	assert.True(t, out.Cancelled)
	assert.Equal(t, controller.HaltCancelled, out.Object.Halted)

	st, err := boltstore.Open(path, boltstore.Options{ReadOnly: true})
	require.NoError(t, err)
	hist, err := st.History(context.Background(), "host/good")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	last := hist[len(hist)-1]
	assert.Equal(t, controller.ReasonCancelled, last.Reason)
	assert.Equal(t, "alice", last.By)

	ctlJSON(t, &out, "cancel", "host", "good", "--bolt", path, "--as", "bob")
	assert.False(t, out.Cancelled, "cancelled already")
	r := ctl(t, "cancel", "host", "good", "--bolt", path)
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "cancelled already")

	var rel struct {
		Released bool            `json:"released"`
		Was      controller.Halt `json:"was"`
	}
	ctlJSON(t, &rel, "release", "host", "good", "--bolt", path)
	assert.True(t, rel.Released)
	assert.Equal(t, controller.HaltCancelled, rel.Was)

	r = ctl(t, "cancel", "host", "nope", "--bolt", path)
	assert.NotEqual(t, 0, r.code, "a missing object is an error")
}
