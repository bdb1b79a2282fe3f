package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	require.NoError(t, run(t.Context(), &out, fleetOptions{autoRelease: true}))
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
	require.NoError(t, run(t.Context(), &first, fleetOptions{store: opts, autoRelease: true}))
	require.NoError(t, run(t.Context(), &second, fleetOptions{store: opts, autoRelease: true}))
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
	require.NoError(t, run(t.Context(), &out, fleetOptions{store: stores.Options{DSN: pgtest.DSN(t)}, autoRelease: true}))
	s := out.String()
	assert.Contains(t, s, "state kept in PostgreSQL\n")
	assert.Contains(t, s, "all 500 hosts ready")
	assert.Contains(t, s, `"installing"   -> "ready"        agent reported`)
	assertQuarantineAndSLA(t, s)
}

func TestFleetLogsTheQuarantinedHosts(t *testing.T) {
	var out, log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelError}))
	require.NoError(t, run(t.Context(), &out, fleetOptions{logger: logger, autoRelease: true}))
	for _, h := range badDisks {
		assert.Contains(t, log.String(), "controller=host key="+h+" state=provisioning outcome=quarantined")
	}
	assert.Equal(t, len(badDisks), strings.Count(log.String(), "\n"), "only the halts at Error:\n%s", log.String())
}

// TestFleetWaitsForItsOperator runs the fleet without -release-quarantined
// and without a page: it ends with the hosts with a failed disk still
// quarantined, and says how to release them.
func TestFleetWaitsForItsOperator(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, fleetOptions{}))
	s := out.String()
	assert.Contains(t, s, "498 of 500 hosts ready; 2 hosts stay quarantined until an operator releases them:\n")
	for _, h := range badDisks {
		assert.Contains(t, s, "  "+h+" in provisioning after 10 failures in a row: provision "+h+": disk failed\n")
	}
	assert.Contains(t, s, "-http localhost:8080", "it says how to release them")
	assert.NotContains(t, s, "released: ", "nobody released them")
	assert.NotContains(t, s, "all 500 hosts ready")
}

// TestFleetServesItsStatusPage runs the fleet with its page served and no
// program-side release: the test is the operator. It waits on the page
// (JSON) until both hosts with a failed disk are quarantined and every
// other host is ready, and releases each with the page's own release
// action (its path and CSRF token from the host's JSON view), from a
// loopback address; the fleet then converges, and the page, /metrics,
// /healthz and /readyz are checked on the one handler.
func TestFleetServesItsStatusPage(t *testing.T) {
	var out bytes.Buffer
	var checked bool
	operated := make(chan error, 1)
	require.NoError(t, run(t.Context(), &out, fleetOptions{hooks: pageHooks{
		start: func(h http.Handler) {
			srv := httptest.NewServer(h) // 127.0.0.1: the local operator
			go func() {
				defer srv.Close()
				err := operate(t.Context(), srv)
				if err != nil {
					// run then waits for the test's deadline: say why now.
					fmt.Fprintln(os.Stderr, "the operator failed:", err)
				}
				operated <- err
			}()
		},
		converged: func(page http.Handler) {
			checked = true
			checkFleetPage(t, page)
		},
	}}))
	require.NoError(t, <-operated)
	assert.True(t, checked, "the page is handed out once the fleet converged")
	s := out.String()
	assert.Contains(t, s, "all 500 hosts ready")
	assert.Contains(t, s, "; 2 hosts released from quarantine\n")
	assert.NotContains(t, s, "released: ", "the program released nothing itself")
}

// operate plays the operator on the fleet's page served by srv: once both
// hosts with a failed disk are quarantined, it releases each through the
// release action the host's JSON view offers.
func operate(ctx context.Context, srv *httptest.Server) error {
	get := func(path string, v any) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(v)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var v statuspage.ControllerView
		if err := get("/controllers/host", &v); err != nil {
			return err
		}
		if len(v.QuarantinedObjects) == len(badDisks) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	for _, h := range badDisks {
		var o statuspage.ObjectView
		if err := get("/controllers/host/objects/"+h, &o); err != nil {
			return err
		}
		var release *statuspage.ActionView
		for i := range o.Actions {
			if o.Actions[i].Name == string(statuspage.ActionRelease) {
				release = &o.Actions[i]
			}
		}
		if release == nil {
			return fmt.Errorf("%s: no release action offered in %+v", h, o.Actions)
		}
		u, err := url.Parse(srv.URL + "/") // the page's paths are relative to its root
		if err != nil {
			return err
		}
		target, err := u.Parse(release.Path)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, release.Method, target.String(), nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-CSRF-Token", release.Token)
		req.Header.Set("Accept", "application/json")
		client := *srv.Client()
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			return fmt.Errorf("release %s: %s", h, resp.Status)
		}
	}
	return nil
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
	metrics := fetch("/metrics", false)
	assert.Contains(t, metrics, `converge_controller_objects{controller="host",state="ready"} 500`)
	assert.Contains(t, metrics, `converge_controller_reconciles_total{controller="host",result="error"}`)
	assert.Contains(t, metrics, "converge_controller_last_success_timestamp_seconds{controller=\"host\"}")
	assert.Equal(t, "ok", fetch("/healthz", false))
	assert.Contains(t, fetch("/readyz?verbose", false), "[+]controller ok", "the controller still runs while the page is served")
	assert.Contains(t, fetch("/readyz?verbose", false), "[+]store ok")
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
