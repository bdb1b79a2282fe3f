package statuspage_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/statuspage"
)

// probe GETs path from h and returns the status and body.
func probe(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// brokenStore is a store whose Get fails.
type brokenStore struct{ converge.Store }

var errStoreDown = errors.New("connection refused")

func (brokenStore) Get(context.Context, string) (converge.StoreRecord, error) {
	return converge.StoreRecord{}, errStoreDown
}

func TestHealthZeroOptionsPass(t *testing.T) {
	h, err := statuspage.NewHealth(statuspage.HealthOptions{})
	require.NoError(t, err)
	for _, path := range []string{"/healthz", "/readyz", "/healthz/ping", "/readyz/ping"} {
		code, body := probe(t, h, path)
		assert.Equal(t, http.StatusOK, code, path)
		assert.Equal(t, "ok", body, path)
	}
	code, _ := probe(t, h, "/readyz/nope")
	assert.Equal(t, http.StatusNotFound, code)
}

func TestReadyzRunsEveryCheck(t *testing.T) {
	var loop statuspage.Loop
	h, err := statuspage.NewHealth(statuspage.HealthOptions{Ready: map[string]statuspage.Checker{
		"controller": loop.Check,
		"store":      statuspage.StoreCheck(converge.NewMemStore()),
		"db":         statuspage.StoreCheck(brokenStore{converge.NewMemStore()}),
	}})
	require.NoError(t, err)

	code, body := probe(t, h, "/readyz")
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.Equal(t, "[-]controller failed: reason withheld\n[-]db failed: reason withheld\n[+]store ok\nreadyz check failed\n", body)
	code, body = probe(t, h, "/readyz/db")
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.Contains(t, body, "connection refused")
	code, _ = probe(t, h, "/readyz/store")
	assert.Equal(t, http.StatusOK, code)
	code, body = probe(t, h, "/healthz")
	assert.Equal(t, http.StatusOK, code, "the process is alive though not ready: %s", body)

	// The loop runs: only the database keeps it from being ready.
	running, stop := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- loop.Run(t.Context(), func(ctx context.Context) error {
			close(running)
			<-stop
			return nil
		})
	}()
	<-running
	code, _ = probe(t, h, "/readyz/controller")
	assert.Equal(t, http.StatusOK, code)
	code, body = probe(t, h, "/readyz?exclude=db&verbose")
	assert.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, "[+]controller ok\n[+]db excluded: ok\n[+]store ok\nreadyz check passed\n", body)
	close(stop)
	require.NoError(t, <-done)
	code, _ = probe(t, h, "/readyz/controller")
	assert.Equal(t, http.StatusInternalServerError, code, "a loop that returned is not running")
}

func TestHealthHandlersWorkOnTheirOwn(t *testing.T) {
	var loop statuspage.Loop
	h, err := statuspage.NewHealth(statuspage.HealthOptions{Ready: map[string]statuspage.Checker{"loop": loop.Check}})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/livez", h.Healthz())
	mux.Handle("/ready", h.Readyz())
	code, body := probe(t, mux, "/livez")
	assert.Equal(t, http.StatusOK, code, body)
	code, _ = probe(t, mux, "/ready")
	assert.Equal(t, http.StatusInternalServerError, code)
}

func TestLoopCheck(t *testing.T) {
	var loop statuspage.Loop
	require.ErrorIs(t, loop.Check(nil), statuspage.ErrLoopNotRunning)
	err := loop.Run(t.Context(), func(context.Context) error {
		assert.NoError(t, loop.Check(nil))
		return errStoreDown
	})
	require.ErrorIs(t, err, errStoreDown, "Run returns what the loop returned")
	require.ErrorIs(t, loop.Check(nil), statuspage.ErrLoopNotRunning)
}

func TestStoreCheckWrapsTheStoreError(t *testing.T) {
	err := statuspage.StoreCheck(brokenStore{converge.NewMemStore()})(httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.ErrorIs(t, err, errStoreDown)
	require.NoError(t, statuspage.StoreCheck(converge.NewMemStore())(httptest.NewRequest(http.MethodGet, "/readyz", nil)))
}

func TestNewHealthRejectsBadChecks(t *testing.T) {
	for name, opts := range map[string]statuspage.HealthOptions{
		"empty name": {Live: map[string]statuspage.Checker{"": statuspage.Ping}},
		"slash":      {Ready: map[string]statuspage.Checker{"a/b": statuspage.Ping}},
		"nil check":  {Ready: map[string]statuspage.Checker{"db": nil}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := statuspage.NewHealth(opts)
			require.ErrorIs(t, err, converge.ErrInvalidConfig)
			var ce *converge.ConfigError
			require.ErrorAs(t, err, &ce)
		})
	}
}
