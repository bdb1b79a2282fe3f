package pgstore_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestTargetNames lists the names with a target, sorted, leaving out a
// name that only took revisions.
func TestTargetNames(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	st := open(t, dsn, pgstore.Options{})
	names, err := st.TargetNames(ctx)
	require.NoError(t, err)
	assert.Empty(t, names)
	assert.NotNil(t, names)
	for _, put := range []struct {
		name, target string
	}{{"web", `{"v":1}`}, {"agent", `{"v":2}`}, {"revision-only", ""}, {"Zed", `{"v":4}`}, {"web", `{"v":3}`}} {
		_, err := st.PutTarget(ctx, put.name, json.RawMessage(put.target))
		require.NoError(t, err)
	}
	names, err = st.TargetNames(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"Zed", "agent", "web"}, names)
}
