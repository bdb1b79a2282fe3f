package pgtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeTB records Skip and Fatal instead of ending the test.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Skip(args ...any)  { f.skipped = args[0].(string); runtime.Goexit() }
func (f *fakeTB) Fatal(args ...any) { f.failed = args[0].(error).Error(); runtime.Goexit() }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func dsnIn(tb *fakeTB) {
	done := make(chan struct{})
	go func() { defer close(done); DSN(tb) }()
	<-done
}

func TestWithoutPostgresDSNSkipsOrFails(t *testing.T) {
	require.NoError(t, Stop())
	t.Setenv("PATH", t.TempDir())
	t.Setenv(EnvDSN, "")
	defer func(g string) { libGlob = g; _ = Stop() }(libGlob)
	libGlob = t.TempDir() + "/*/bin"

	_, err := binary("", "initdb")
	require.ErrorIs(t, err, ErrNoPostgres)

	t.Setenv(EnvRequire, "")
	tb := &fakeTB{TB: t}
	dsnIn(tb)
	assert.Contains(t, tb.skipped, "initdb not found")
	assert.Empty(t, tb.failed)

	t.Setenv(EnvRequire, "1")
	tb = &fakeTB{TB: t}
	dsnIn(tb)
	assert.Contains(t, tb.failed, EnvRequire)
	assert.Empty(t, tb.skipped)
}

func TestBinaryPrefersTheNewestVersion(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"9", "15", "13"} {
		require.NoError(t, mkExecutable(dir+"/"+v+"/bin/initdb"))
	}
	t.Setenv("PATH", t.TempDir())
	defer func(g string) { libGlob = g }(libGlob)
	libGlob = dir + "/*/bin"
	got, err := binary("", "initdb")
	require.NoError(t, err)
	assert.Equal(t, dir+"/15/bin/initdb", got)
	_, err = binary("", "postgres")
	assert.True(t, errors.Is(err, ErrNoPostgres))
}

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:p@h:5/db?sslmode=disable", "postgres://u:p@h:5/t_x?sslmode=disable"},
		{"postgresql://h/", "postgresql://h/t_x"},
		{"host=h dbname=db", "host=h dbname=db dbname=t_x"},
	} {
		got, err := withDatabase(tc.in, "t_x")
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
}

func mkExecutable(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755)
}

func TestBinaryInOptionsBin(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, mkExecutable(dir+"/initdb"))
	got, err := binary(dir, "initdb")
	require.NoError(t, err)
	assert.Equal(t, dir+"/initdb", got)
	_, err = binary(dir, "postgres")
	require.ErrorIs(t, err, ErrNoPostgres, "Bin is not searched past")
	assert.Contains(t, err.Error(), dir)
}
