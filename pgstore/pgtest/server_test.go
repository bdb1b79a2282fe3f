package pgtest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/pgstore/pgtest"
)

// startServer starts a Server, or skips (fails with CONVERGE_REQUIRE_PG=1)
// without PostgreSQL, as DSN does.
func startServer(t *testing.T, ctx context.Context, opts pgtest.Options) *pgtest.Server {
	t.Helper()
	s, err := pgtest.Start(ctx, opts)
	if errors.Is(err, pgtest.ErrNoPostgres) && os.Getenv(pgtest.EnvRequire) != "1" {
		t.Skip(err.Error())
	}
	require.NoError(t, err)
	return s
}

// reachableDir returns a new directory that the user postgres can reach
// (when pgtest runs as root, the server runs as postgres).
func reachableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgtest-parent-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func TestStartOutsideTests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	parent := reachableDir(t)
	s := startServer(t, ctx, pgtest.Options{Dir: parent, Settings: map[string]string{"max_connections": "20"}})
	assert.Equal(t, parent, filepath.Dir(s.Dir()), "the cluster lives under Options.Dir")
	assert.Equal(t, "20", scalar[string](t, s.DSN(), `SHOW max_connections`), "Settings override pgtest's")
	assert.Equal(t, "on", scalar[string](t, s.DSN(), `SHOW fsync`))

	a, err := s.CreateDatabase(ctx)
	require.NoError(t, err)
	b, err := s.CreateDatabase(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, scalar[string](t, a, `SELECT current_database()`), scalar[string](t, b, `SELECT current_database()`))

	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "a second Close is harmless")
	_, err = os.Stat(s.Dir())
	assert.ErrorIs(t, err, os.ErrNotExist, "Close removed the cluster's directory")
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	_, err = pgx.Connect(cctx, s.DSN())
	assert.Error(t, err, "the server stopped")
	_, err = s.CreateDatabase(ctx)
	assert.ErrorIs(t, err, pgtest.ErrServerClosed)
}

func TestStartCancelledLeavesNothing(t *testing.T) {
	parent := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := pgtest.Start(ctx, pgtest.Options{Dir: parent})
	if errors.Is(err, pgtest.ErrNoPostgres) && os.Getenv(pgtest.EnvRequire) != "1" {
		t.Skip(err.Error())
	}
	require.ErrorIs(t, err, context.Canceled)
	left, err := os.ReadDir(parent)
	require.NoError(t, err)
	assert.Empty(t, left, "no cluster directory left behind")
}

func TestStartOptionErrors(t *testing.T) {
	_, err := pgtest.Start(context.Background(), pgtest.Options{StartTimeout: -time.Second})
	require.Error(t, err)
	_, err = pgtest.Start(context.Background(), pgtest.Options{Bin: t.TempDir()})
	require.ErrorIs(t, err, pgtest.ErrNoPostgres)
}
