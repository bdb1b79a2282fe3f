package hostcfg

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOpenRootErrors(t *testing.T) {
	_, err := OpenRoot(filepath.Join(t.TempDir(), "missing"))
	var pe *PathError
	require.ErrorAs(t, err, &pe)
	require.ErrorIs(t, err, os.ErrNotExist)
}
