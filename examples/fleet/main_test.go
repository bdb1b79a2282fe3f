package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/convergekit/converge/examples/internal/stores"
	"github.com/convergekit/converge/pgstore/pgtest"
	"github.com/convergekit/converge/statuspage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

func TestFleetConverges(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, stores.Options{}, pageHooks{}, nil))
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

func TestFleetResumesFromItsStateFile(t *testing.T) {
	opts := stores.Options{Path: filepath.Join(t.TempDir(), "fleet.db")}
	var first, second bytes.Buffer
	require.NoError(t, run(t.Context(), &first, opts, pageHooks{}, nil))
	require.NoError(t, run(t.Context(), &second, opts, pageHooks{}, nil))
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
	require.NoError(t, run(t.Context(), &out, stores.Options{DSN: pgtest.DSN(t)}, pageHooks{}, nil))
	s := out.String()
	assert.Contains(t, s, "state kept in PostgreSQL\n")
	assert.Contains(t, s, "all 500 hosts ready")
	assert.Contains(t, s, `"installing"   -> "ready"        agent reported`)
	assertQuarantineAndSLA(t, s)
}

func TestFleetLogsTheQuarantinedHosts(t *testing.T) {
	var out, log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelError}))
	require.NoError(t, run(t.Context(), &out, stores.Options{}, pageHooks{}, logger))
	for _, h := range badDisks {
		assert.Contains(t, log.String(), "controller=host key="+h+" state=provisioning outcome=quarantined")
	}
	assert.Equal(t, len(badDisks), strings.Count(log.String(), "\n"), "only the halts at Error:\n%s", log.String())
}

func TestFleetServesItsStatusPage(t *testing.T) {
	var out bytes.Buffer
	var started, checked bool
	require.NoError(t, run(t.Context(), &out, stores.Options{}, pageHooks{
		start: func(http.Handler) { started = true },
		converged: func(page http.Handler) {
			checked = true
			checkFleetPage(t, page)
		},
	}, nil))
	assert.True(t, started, "the page is handed out when the controller exists")
	assert.True(t, checked, "and once the fleet converged")
}

// checkFleetPage checks the status page of a converged fleet.
func checkFleetPage(t *testing.T, page http.Handler) {
	t.Helper()
	srv := httptest.NewServer(page)
	defer srv.Close()

	fetch := func(path string, asJSON bool) string {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if asJSON {
			req.Header.Set("Accept", "application/json")
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		return string(body)
	}
	html := fetch("/", false)
	assert.Contains(t, html, `<a href="./controllers/host/states/ready">ready</a></td><td class="count">500</td>`)

	var v statuspage.ControllerView
	require.NoError(t, json.Unmarshal([]byte(fetch("/controllers/host", true)), &v))
	assert.Equal(t, 500, v.Objects)
	assert.Equal(t, []statuspage.StateCount{{State: "new"}, {State: "provisioning"}, {State: "installing"}, {State: "ready", Objects: 500}}, v.States)
	assert.Empty(t, v.QuarantinedObjects, "the quarantined hosts were released")

	var o statuspage.ObjectView
	require.NoError(t, json.Unmarshal([]byte(fetch("/controllers/host/objects/host-013", true)), &o))
	assert.Equal(t, "ready", o.State)
	var reasons []string
	for _, h := range o.History {
		reasons = append(reasons, h.Reason)
	}
	assert.Contains(t, reasons, "agent reported", "the history of a host released from quarantine")
	assert.Contains(t, fetch("/controllers/host/objects/host-013", false), "machine booted")
}
