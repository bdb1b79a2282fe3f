package boltstore_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/boltstore"
)

func TestTargetNames(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "targets.db")
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	names, err := st.TargetNames(ctx)
	require.NoError(t, err)
	assert.Empty(t, names)
	for _, put := range []struct {
		name, target string
	}{{"web", `{"v":1}`}, {"agent", `{"v":2}`}, {"revision-only", ""}, {"web", `{"v":3}`}} {
		_, err := st.PutTarget(ctx, put.name, json.RawMessage(put.target))
		require.NoError(t, err)
	}
	names, err = st.TargetNames(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"agent", "web"}, names)
	require.NoError(t, st.Close())

	ro, err := boltstore.Open(path, boltstore.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	names, err = ro.TargetNames(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"agent", "web"}, names, "a read-only store lists them too")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = ro.TargetNames(cancelled)
	assert.ErrorIs(t, err, context.Canceled)
	require.NoError(t, ro.Close())
	_, err = ro.TargetNames(ctx)
	assert.ErrorIs(t, err, boltstore.ErrClosed)
}
