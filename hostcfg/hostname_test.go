package hostcfg

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHostname(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "etc/hostname"), "raspberrypi\n")
	h := &Hostname{Root: r, Name: "edge-01.example"}
	mustApply(t, graph(h.Node()))
	assert.Equal(t, "edge-01.example\n", readFile(t, filepath.Join(dir, "etc/hostname")))
	assert.NoFileExists(t, filepath.Join(dir, "proc/sys/kernel/hostname"), "no runtime file is created")
	for _, bad := range []string{"", "-x", "a_b", "a..b", string(make([]byte, 254))} {
		_, err := converge.Apply(context.Background(), graph((&Hostname{Root: r, Name: bad}).Node()))
		require.ErrorIs(t, err, ErrInvalidItem, bad)
	}
}
