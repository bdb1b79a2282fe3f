package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/convergekit/converge/examples/internal/stores"
	"github.com/convergekit/converge/pgstore/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

func TestFleetConverges(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, stores.Options{}))
	s := out.String()
	assert.Contains(t, s, "\nnew=500\n", "the fleet starts with every host new")
	assert.Contains(t, s, "ready=500\n")
	assert.Contains(t, s, "all 500 hosts ready")
	assert.Contains(t, s, `"installing"   -> "ready"        agent reported`)
}

func TestFleetResumesFromItsStateFile(t *testing.T) {
	opts := stores.Options{Path: filepath.Join(t.TempDir(), "fleet.db")}
	var first, second bytes.Buffer
	require.NoError(t, run(t.Context(), &first, opts))
	require.NoError(t, run(t.Context(), &second, opts))
	s := second.String()
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, "=") {
			// Counts grow while Run reads the store, but only ever of ready hosts.
			assert.True(t, strings.HasPrefix(line, "ready="), "the second run starts from the stored states, got %q in\n%s", line, s)
		}
	}
	assert.Contains(t, s, "all 500 hosts ready; provider refused 0 requests", "no host was provisioned again")
	assert.Contains(t, second.String(), `"installing"   -> "ready"        agent reported`, "history survives the restart")
}

func TestFleetOnPostgres(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, stores.Options{DSN: pgtest.DSN(t)}))
	s := out.String()
	assert.Contains(t, s, "state kept in PostgreSQL\n")
	assert.Contains(t, s, "all 500 hosts ready")
	assert.Contains(t, s, `"installing"   -> "ready"        agent reported`)
}
