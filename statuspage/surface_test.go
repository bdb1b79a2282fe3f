package statuspage_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/statuspage"
)

func TestMuxServesTheWholeSurface(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "metric 1") })
	var loop statuspage.Loop
	// The page lets no one read: the probes and the scraper need no login.
	refuseAll := func(*http.Request, statuspage.Action) (string, error) { return "", errRefused }
	tests := []struct {
		name    string
		metrics http.Handler
		path    string
		code    int
		body    string
	}{
		{"page", metrics, "/", http.StatusForbidden, "read refused"},
		{"page below root", metrics, "/plans", http.StatusForbidden, "read refused"},
		{"metrics", metrics, "/metrics", http.StatusOK, "metric 1"},
		{"no metrics", nil, "/metrics", http.StatusForbidden, "read refused"},
		{"healthz", metrics, "/healthz", http.StatusOK, "ok"},
		{"healthz check", metrics, "/healthz/ping", http.StatusOK, "ok"},
		{"readyz", metrics, "/readyz", http.StatusInternalServerError, "[-]loop failed"},
		{"readyz check", metrics, "/readyz/loop", http.StatusInternalServerError, "loop not running"},
		{"unknown check", metrics, "/readyz/other", http.StatusNotFound, `no readyz check "other"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := statuspage.Mux(statuspage.SurfaceOptions{
				Page:    statuspage.Options{Authorizer: refuseAll},
				Metrics: tt.metrics,
				Health:  statuspage.HealthOptions{Ready: map[string]statuspage.Checker{"loop": loop.Check}},
			})
			require.NoError(t, err)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			assert.Equal(t, tt.code, rec.Code, rec.Body.String())
			assert.Contains(t, rec.Body.String(), tt.body)
		})
	}
}

func TestMuxRefusesBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opts statuspage.SurfaceOptions
		want error
	}{
		{"page", statuspage.SurfaceOptions{Page: statuspage.Options{PageSize: -1}}, converge.ErrInvalidConfig},
		{"actions", statuspage.SurfaceOptions{Page: statuspage.Options{Actions: true}}, statuspage.ErrActionsNeedAuthorizer},
		{"health", statuspage.SurfaceOptions{Health: statuspage.HealthOptions{Live: map[string]statuspage.Checker{"a/b": statuspage.Ping}}}, converge.ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := statuspage.Mux(tt.opts)
			require.ErrorIs(t, err, tt.want)
			assert.Nil(t, h)
		})
	}
}
