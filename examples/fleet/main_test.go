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
	lines := strings.Split(second.String(), "\n")
	require.Greater(t, len(lines), 2)
	assert.Equal(t, "ready=500", lines[1], "the second run starts from the stored states: "+second.String())
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
