package converge_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

func TestOpenKeyFileCreatesOnceAndReopens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seal.key")
	// Processes starting at once agree on one key.
	sealers := make([]converge.Sealer, 8)
	var wg sync.WaitGroup
	for i := range sealers {
		wg.Go(func() {
			s, err := converge.OpenKeyFile(path)
			assert.NoError(t, err)
			sealers[i] = s
		})
	}
	wg.Wait()
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	sealed, err := sealers[0].Seal("k", []byte("secret"))
	require.NoError(t, err)
	for _, s := range sealers[1:] {
		plain, err := s.Open("k", sealed)
		require.NoError(t, err)
		assert.Equal(t, "secret", string(plain))
	}
	again, err := converge.OpenKeyFile(path)
	require.NoError(t, err)
	plain, err := again.Open("k", sealed)
	require.NoError(t, err, "a reopened file opens what it sealed before")
	assert.Equal(t, "secret", string(plain))
	matches, err := filepath.Glob(filepath.Join(filepath.Dir(path), ".keyfile-*"))
	require.NoError(t, err)
	assert.Empty(t, matches, "no temporary file is left")
}

func TestOpenKeyFileRotates(t *testing.T) {
	dir := t.TempDir()
	old, young := strings.Repeat("11", 32), strings.Repeat("22", 16)
	oldPath := filepath.Join(dir, "old.key")
	require.NoError(t, os.WriteFile(oldPath, []byte(old+"\n"), 0o600))
	oldSealer, err := converge.OpenKeyFile(oldPath)
	require.NoError(t, err)
	sealed, err := oldSealer.Seal("k", []byte("v"))
	require.NoError(t, err)

	both := filepath.Join(dir, "both.key")
	require.NoError(t, os.WriteFile(both, []byte("# oldest first\n"+old+"\n\n"+young+"\n"), 0o600))
	ring, err := converge.OpenKeyFile(both)
	require.NoError(t, err)
	plain, err := ring.Open("k", sealed)
	require.NoError(t, err, "the old key still opens")
	assert.Equal(t, "v", string(plain))
	resealed, err := ring.Seal("k", []byte("v"))
	require.NoError(t, err)
	_, err = oldSealer.Open("k", resealed)
	require.ErrorIs(t, err, converge.ErrSealed, "the last key seals")
}

func TestOpenKeyFileRefusesBadFiles(t *testing.T) {
	key := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		line          int
		reason        string
	}{
		{"world readable", key + "\n", 0o644, 0, "may be read by others"},
		{"group readable", key + "\n", 0o640, 0, "may be read by others"},
		{"not hex", key + "\nnot-a-key\n", 0o600, 2, "not a hex key"},
		{"short key", "# c\n" + strings.Repeat("ab", 15) + "\n", 0o600, 2, "a key of 15 bytes"},
		{"empty", "# only a comment\n\n", 0o600, 0, "holds no key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "seal.key")
			require.NoError(t, os.WriteFile(path, []byte(tc.content), tc.mode))
			require.NoError(t, os.Chmod(path, tc.mode))
			_, err := converge.OpenKeyFile(path)
			var ke *converge.KeyFileError
			require.ErrorAs(t, err, &ke)
			assert.Equal(t, path, ke.Path)
			assert.Equal(t, tc.line, ke.Line)
			assert.Contains(t, ke.Reason, tc.reason)
			assert.NotContains(t, err.Error(), key[:16], "the message never holds a key")
		})
	}
	t.Run("directory", func(t *testing.T) {
		_, err := converge.OpenKeyFile(t.TempDir())
		var ke *converge.KeyFileError
		require.ErrorAs(t, err, &ke)
		assert.Equal(t, "is not a regular file", ke.Reason)
	})
	t.Run("missing directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "no", "seal.key")
		_, err := converge.OpenKeyFile(path)
		var ke *converge.KeyFileError
		require.ErrorAs(t, err, &ke)
		assert.Equal(t, path, ke.Path)
		assert.NotContains(t, err.Error(), ".keyfile-", "never the temporary name")
	})
}

func TestReadKeyFileCreatesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seal.key")
	_, err := converge.ReadKeyFile(path)
	var ke *converge.KeyFileError
	require.ErrorAs(t, err, &ke)
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.Equal(t, path, ke.Path)
	_, err = os.Stat(path)
	require.ErrorIs(t, err, fs.ErrNotExist, "nothing was created")

	written, err := converge.OpenKeyFile(path)
	require.NoError(t, err)
	sealed, err := written.Seal("k", []byte("v"))
	require.NoError(t, err)
	read, err := converge.ReadKeyFile(path)
	require.NoError(t, err)
	plain, err := read.Open("k", sealed)
	require.NoError(t, err)
	assert.Equal(t, "v", string(plain))

	require.NoError(t, os.Chmod(path, 0o644))
	_, err = converge.ReadKeyFile(path)
	require.ErrorAs(t, err, &ke)
	assert.Contains(t, ke.Reason, "may be read by others", "the same checks as OpenKeyFile")
}

func ExampleOpenKeyFile() {
	dir, _ := os.MkdirTemp("", "example-")
	defer os.RemoveAll(dir)
	// A file apart from the store; created with a random key the first time.
	sealer, err := converge.OpenKeyFile(filepath.Join(dir, "seal.key"))
	if err != nil {
		panic(err)
	}
	st := converge.NewMemStore()
	st.Sealer = sealer
	rev, err := st.PutTarget(context.Background(), "device", []byte(`{"env":{"DB_PASSWORD":"s3cret"}}`))
	fmt.Println(rev, err)
	// Output: 1 <nil>
}
