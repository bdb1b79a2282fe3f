package pgstore_test

import (
	"context"
	"encoding/json"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// Store is an io.Closer, as boltstore.Store is, so a program can keep
// either behind one interface.
var _ io.Closer = (*pgstore.Store)(nil)

func TestCloseReturnsNilAndClosesThePool(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := ctxT(t)
	s, err := pgstore.Open(ctx, dsn, pgstore.Options{})
	require.NoError(t, err)
	_, err = s.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	stop, err := s.Watch(ctx, "", func(string) {})
	require.NoError(t, err)
	defer stop()

	var c io.Closer = s
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "a second Close is harmless")
	_, err = s.Get(context.Background(), "k")
	assert.Error(t, err, "the pool Open made is closed")
	_, err = s.Watch(ctx, "", func(string) {})
	assert.ErrorIs(t, err, pgstore.ErrClosed)
}
