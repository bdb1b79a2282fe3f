package main

import (
	"bytes"
	"log/slog"
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
	require.NoError(t, run(t.Context(), &out, stores.Options{}, nil))
	s := out.String()
	assert.Contains(t, s, "\nnew=500\n", "the fleet starts with every host new")
	assert.Contains(t, s, "ready=500\n")
	assert.Contains(t, s, "all 500 hosts ready")
	assert.Contains(t, s, `"installing"   -> "ready"        agent reported`)
	assertQuarantineAndSLA(t, s)
}

// assertQuarantineAndSLA checks that the output of a first run shows the
// hosts with a failed disk quarantined and released, and the slow agent's
// SLA breach reported once, and its end once.
func assertQuarantineAndSLA(t *testing.T, s string) {
	t.Helper()
	for _, h := range badDisks {
		assert.Contains(t, s, "quarantined: "+h+" in provisioning after 10 failures in a row: provision "+h+": disk failed\n")
		assert.Contains(t, s, "released: "+h+", its disk replaced\n")
	}
	assert.Contains(t, s, "(quarantined=2)\n", "the counts show the quarantine")
	assert.Contains(t, s, "; 2 hosts released from quarantine\n")
	assert.Equal(t, 1, strings.Count(s, "sla: "+slowAgent+" has been installing longer than 2s\n"), "the breach is reported once:\n%s", s)
	assert.Equal(t, 1, strings.Count(s, "sla: "+slowAgent+" left installing, no longer above its SLA\n"), "and its end once:\n%s", s)
}

func TestFleetLogsTheQuarantinedHosts(t *testing.T) {
	var out, log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelError}))
	require.NoError(t, run(t.Context(), &out, stores.Options{}, logger))
	for _, h := range badDisks {
		assert.Contains(t, log.String(), "controller=host key="+h+" state=provisioning outcome=quarantined")
	}
	assert.Equal(t, len(badDisks), strings.Count(log.String(), "\n"), "only the halts at Error:\n%s", log.String())
}

func TestFleetResumesFromItsStateFile(t *testing.T) {
	opts := stores.Options{Path: filepath.Join(t.TempDir(), "fleet.db")}
	var first, second bytes.Buffer
	require.NoError(t, run(t.Context(), &first, opts, nil))
	require.NoError(t, run(t.Context(), &second, opts, nil))
	s := second.String()
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, "=") {
			// Counts grow while Run reads the store, but only ever of ready hosts.
			assert.True(t, strings.HasPrefix(line, "ready="), "the second run starts from the stored states, got %q in\n%s", line, s)
		}
	}
	assert.Contains(t, s, "all 500 hosts ready; provider refused 0 requests", "no host was provisioned again")
	assert.Contains(t, s, "; 0 hosts released from quarantine\n", "the released hosts stayed ready")
	assert.NotContains(t, s, "sla: ", "the slow agent was done in the first run")
	assertQuarantineAndSLA(t, first.String())
	assert.Contains(t, second.String(), `"installing"   -> "ready"        agent reported`, "history survives the restart")
}

func TestFleetOnPostgres(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, stores.Options{DSN: pgtest.DSN(t)}, nil))
	s := out.String()
	assert.Contains(t, s, "state kept in PostgreSQL\n")
	assert.Contains(t, s, "all 500 hosts ready")
	assert.Contains(t, s, `"installing"   -> "ready"        agent reported`)
	assertQuarantineAndSLA(t, s)
}
