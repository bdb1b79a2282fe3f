package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFleetConverges(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	s := out.String()
	assert.True(t, strings.HasPrefix(s, "new=500\n"), "the fleet starts with every host new")
	assert.Contains(t, s, "ready=500\n")
	assert.Contains(t, s, "all 500 hosts ready")
	assert.Contains(t, s, `"installing"   -> "ready"        agent reported`)
}
