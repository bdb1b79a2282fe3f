package converge_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

func TestMemStoreTargetNames(t *testing.T) {
	ctx := context.Background()
	st := converge.NewMemStore()
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

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = st.TargetNames(cancelled)
	assert.ErrorIs(t, err, context.Canceled)
}
