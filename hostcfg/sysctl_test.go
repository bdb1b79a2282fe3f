package hostcfg

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSysctl(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "proc/sys/net/ipv4/tcp_rmem"), "4096\t131072\t6291456\n")
	writeFile(t, filepath.Join(dir, "proc/sys/net/ipv4/conf/eth0.1/forwarding"), "0\n")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/sysctl.d"), 0o755))
	persist := filepath.Join(dir, "etc/sysctl.d/99-converge.conf")
	writeFile(t, persist, "# managed\nvm.swappiness = 10\n")

	// Whitespace does not matter.
	rep := mustApply(t, graph((&Sysctl{Root: r, Key: "net/ipv4/tcp_rmem", Value: "4096 131072  6291456"}).Node()))
	assert.Equal(t, converge.OutcomeUnchanged, rep.Items[0].Outcome)

	s := &Sysctl{Root: r, Key: "net.ipv4.conf.eth0/1.forwarding", Value: "1", Persist: "/etc/sysctl.d/99-converge.conf"}
	assert.Equal(t, converge.ID("sysctl:net.ipv4.conf.eth0/1.forwarding"), s.ID())
	mustApply(t, graph(s.Node()))
	assert.Equal(t, "1\n", readFile(t, filepath.Join(dir, "proc/sys/net/ipv4/conf/eth0.1/forwarding")))
	assert.Equal(t, "# managed\nvm.swappiness = 10\nnet.ipv4.conf.eth0/1.forwarding=1\n", readFile(t, persist))

	// Unknown keys and bad keys fail.
	_, err := converge.Apply(context.Background(), graph((&Sysctl{Root: r, Key: "net.nope", Value: "1"}).Node()))
	require.ErrorIs(t, err, os.ErrNotExist)
	for _, key := range []string{"", "net..x", "net/../../etc/passwd"} {
		_, err = converge.Apply(context.Background(), graph((&Sysctl{Root: r, Key: key, Value: "1"}).Node()))
		require.ErrorIs(t, err, ErrInvalidItem, key)
	}
}
