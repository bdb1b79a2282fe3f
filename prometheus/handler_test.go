package prometheus_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/prometheus"
)

func TestHandlerServesTheMetricsAndTheProcess(t *testing.T) {
	m := &prometheus.Metrics{} // the zero value is ready
	m.Add(converge.MetricTargetPasses, 1, "device", "success")
	h := m.Handler()

	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(body), `converge_target_passes_total{result="success",target="device"} 1`)
	assert.Contains(t, string(body), "go_goroutines ")
	assert.Contains(t, string(body), "process_resident_memory_bytes ")
}
