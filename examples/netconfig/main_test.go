package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNetconfigFollowsTheBridge(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	s := out.String()
	assert.Contains(t, s, "pass 1, stage kernel   changed sysctl:net.ipv4.ip_forward")
	assert.Contains(t, s, "mtu 1496", "a VLAN's MTU is the bridge's minus 4")
	assert.Contains(t, s, "pass 2, stage ifaces   changed file:/etc/network/interfaces.d/br0.10", "drift is repaired")
	assert.NotContains(t, s, "pass 2, stage ifaces   changed file:/etc/network/interfaces.d/br0\n", "only the edited file changes")
	assert.Contains(t, s, "mtu 8996", "the VLANs follow a new bridge MTU")
}

func TestNetconfigRejectsABadTarget(t *testing.T) {
	_, err := build(nil, NetSpec{Bridge: "br0", MTU: 10})
	require.ErrorContains(t, err, "MTU 10 is below")
}
