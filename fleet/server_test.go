package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/fleet"
)

// adminHeader is the header the tests' Authorizer lets through.
const adminHeader = "X-Test-Admin"

func testAuthorizer(r *http.Request, _ fleet.Action) (string, error) {
	if r.Header.Get(adminHeader) != "yes" {
		return "", errors.New("not an admin")
	}
	return "tester", nil
}

type harness struct {
	t       *testing.T
	srv     *fleet.Server
	http    *httptest.Server
	metrics *convergetest.Metrics
}

func newHarness(t *testing.T, store converge.Queue, mod func(*fleet.Config)) *harness {
	t.Helper()
	m := &convergetest.Metrics{}
	cfg := fleet.Config{Store: store, Authorizer: testAuthorizer, Metrics: m, Rate: -1, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := fleet.NewServer(cfg)
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		require.NoError(t, srv.Close())
	})
	return &harness{t: t, srv: srv, http: hs, metrics: m}
}

// do sends a request and returns the status code, the body and the
// response headers.
func (h *harness) do(method, path, token string, body []byte, hdr map[string]string) (int, []byte, http.Header) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.http.URL+path, bytes.NewReader(body))
	require.NoError(h.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := h.http.Client().Do(req)
	require.NoError(h.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(h.t, err)
	return res.StatusCode, b, res.Header
}

func (h *harness) admin(method, path string, body []byte) (int, []byte) {
	code, b, _ := h.do(method, path, "", body, map[string]string{adminHeader: "yes"})
	return code, b
}

func (h *harness) enrol(id string) string {
	h.t.Helper()
	code, b := h.admin("POST", "/v1/admin/devices/"+id+"/enrol", nil)
	require.Equal(h.t, http.StatusCreated, code, string(b))
	var out struct{ Token string }
	require.NoError(h.t, json.Unmarshal(b, &out))
	require.NotEmpty(h.t, out.Token)
	return out.Token
}

func (h *harness) setTarget(id string, items string) uint64 {
	h.t.Helper()
	code, b := h.admin("PUT", "/v1/admin/devices/"+id+"/target", []byte(`{"items":`+items+`,"payload":{"v":1}}`))
	require.Equal(h.t, http.StatusOK, code, string(b))
	var out struct{ Revision uint64 }
	require.NoError(h.t, json.Unmarshal(b, &out))
	return out.Revision
}

func stores(t *testing.T) map[string]func() converge.Queue {
	return map[string]func() converge.Queue{
		"mem": func() converge.Queue { return converge.NewMemStore() },
		"bolt": func() converge.Queue {
			st, err := boltstore.Open(filepath.Join(t.TempDir(), "fleet.db"), boltstore.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
	}
}

const oneItem = `[{"id":"app","presence":"present"}]`

func report(rev uint64, state string) []byte {
	return []byte(`{"revision":` + strconv.FormatUint(rev, 10) + `,"time":"2026-01-02T03:04:05Z","items":[{"id":"app","state":"` + state + `"}]}`)
}

func TestDeviceReadsItsTargetAndReports(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, mk(), nil)
			tok := h.enrol("dev-1")
			code, _, _ := h.do("GET", "/v1/devices/dev-1/target", tok, nil, nil)
			assert.Equal(t, http.StatusNotFound, code, "no target yet")

			rev := h.setTarget("dev-1", oneItem)
			require.Equal(t, uint64(1), rev)
			code, body, hdr := h.do("GET", "/v1/devices/dev-1/target", tok, nil, nil)
			require.Equal(t, http.StatusOK, code, string(body))
			assert.Equal(t, fleet.ETag(rev), hdr.Get("ETag"))
			tgt, err := fleet.DecodeTarget(body, converge.DecodeLimits{})
			require.NoError(t, err)
			assert.Equal(t, rev, tgt.Desired.Revision)
			assert.JSONEq(t, `{"v":1}`, string(tgt.Payload))

			code, _, _ = h.do("GET", "/v1/devices/dev-1/target", tok, nil, map[string]string{"If-None-Match": fleet.ETag(rev)})
			assert.Equal(t, http.StatusNotModified, code, "an unchanged target without a wait")

			st, err := h.srv.DeviceStatus(context.Background(), "dev-1")
			require.NoError(t, err)
			assert.Equal(t, fleet.StatePending, st.State)

			code, body, _ = h.do("PUT", "/v1/devices/dev-1/report", tok, report(rev, "absent"), nil)
			require.Equal(t, http.StatusNoContent, code, string(body))
			st, err = h.srv.DeviceStatus(context.Background(), "dev-1")
			require.NoError(t, err)
			assert.Equal(t, fleet.StateProgressing, st.State)

			code, body, _ = h.do("POST", "/v1/devices/dev-1/report", tok, report(rev, "present"), nil)
			require.Equal(t, http.StatusNoContent, code, string(body))
			st, err = h.srv.DeviceStatus(context.Background(), "dev-1")
			require.NoError(t, err)
			assert.Equal(t, fleet.StateReady, st.State)
			assert.Equal(t, rev, st.Reported)

			// A new target: the ready report of revision 1 does not count
			// for revision 2.
			rev2 := h.setTarget("dev-1", oneItem)
			require.Equal(t, rev+1, rev2)
			st, err = h.srv.DeviceStatus(context.Background(), "dev-1")
			require.NoError(t, err)
			assert.Equal(t, fleet.StatePending, st.State)

			code, _, _ = h.do("PUT", "/v1/devices/dev-1/report", tok, report(rev2, "creating-failed"), nil)
			require.Equal(t, http.StatusNoContent, code)
			st, err = h.srv.DeviceStatus(context.Background(), "dev-1")
			require.NoError(t, err)
			assert.Equal(t, fleet.StateFailed, st.State)
			assert.Equal(t, float64(3), h.metrics.Value(fleet.MetricReports.Name, "accepted"))
		})
	}
}

func TestReportsOutOfOrderRefused(t *testing.T) {
	h := newHarness(t, converge.NewMemStore(), nil)
	tok := h.enrol("d")
	h.setTarget("d", oneItem)
	rev := h.setTarget("d", oneItem)
	code, _, _ := h.do("PUT", "/v1/devices/d/report", tok, report(rev, "present"), nil)
	require.Equal(t, http.StatusNoContent, code)

	tests := []struct {
		name string
		rev  uint64
	}{
		{"older than the held report", rev - 1},
		{"newer than the target", rev + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, _ := h.do("PUT", "/v1/devices/d/report", tok, report(tt.rev, "present"), nil)
			assert.Equal(t, http.StatusConflict, code)
			_, err := h.srv.StoreReport(context.Background(), "d", report(tt.rev, "present"))
			var re *fleet.ReportError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tt.rev, re.Revision)
			assert.ErrorIs(t, err, fleet.ErrStaleReport)
		})
	}
	st, err := h.srv.DeviceStatus(context.Background(), "d")
	require.NoError(t, err)
	assert.Equal(t, fleet.StateReady, st.State, "the refused reports changed nothing")
}

func TestBadReportsRefusedWithTypedErrors(t *testing.T) {
	h := newHarness(t, converge.NewMemStore(), func(c *fleet.Config) { c.Limits.MaxBytes = 512 })
	tok := h.enrol("d")
	rev := h.setTarget("d", oneItem)
	big := []byte(`{"revision":1,"items":[` + strings.Repeat(`{"id":"x","state":"present"},`, 40) + `{"id":"y","state":"present"}]}`)
	tests := []struct {
		name   string
		body   []byte
		code   int
		target error
		metric string
	}{
		{"oversized", big, http.StatusRequestEntityTooLarge, converge.ErrTooLarge, "too_large"},
		{"malformed JSON", []byte(`{"revision":`), http.StatusBadRequest, converge.ErrStatusInvalid, "invalid"},
		{"unknown field", []byte(`{"revision":1,"items":[],"extra":1}`), http.StatusBadRequest, converge.ErrStatusInvalid, "invalid"},
		{"repeated field", []byte(`{"revision":1,"revision":1,"items":[]}`), http.StatusBadRequest, converge.ErrStatusInvalid, "invalid"},
		{"invalid UTF-8", []byte("{\"revision\":1,\"items\":[{\"id\":\"\xff\",\"state\":\"present\"}]}"), http.StatusBadRequest, converge.ErrStatusInvalid, "invalid"},
		{"revision zero", report(0, "present"), http.StatusBadRequest, converge.ErrStatusInvalid, "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := h.metrics.Value(fleet.MetricReports.Name, tt.metric)
			code, body, _ := h.do("PUT", "/v1/devices/d/report", tok, tt.body, nil)
			assert.Equal(t, tt.code, code, string(body))
			assert.Equal(t, before+1, h.metrics.Value(fleet.MetricReports.Name, tt.metric))
			_, err := h.srv.StoreReport(context.Background(), "d", tt.body)
			var re *fleet.RequestError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, "report", re.Field)
			assert.ErrorIs(t, err, fleet.ErrInvalid)
			assert.ErrorIs(t, err, tt.target)
		})
	}
	st, err := h.srv.DeviceStatus(context.Background(), "d")
	require.NoError(t, err)
	assert.Equal(t, fleet.StatePending, st.State, "no refused report was kept")
	assert.Equal(t, rev, st.Target)
	assert.Zero(t, st.Reported)
}

func TestEnrolmentAndRevocationRefusalsCounted(t *testing.T) {
	h := newHarness(t, converge.NewMemStore(), nil)
	tokA := h.enrol("dev-a")
	tokB := h.enrol("dev-b")
	h.setTarget("dev-a", oneItem)
	h.setTarget("dev-b", oneItem)
	tokR := h.enrol("dev-r")
	h.setTarget("dev-r", oneItem)
	code, _ := h.admin("POST", "/v1/admin/devices/dev-r/revoke", nil)
	require.Equal(t, http.StatusNoContent, code)

	tests := []struct {
		name   string
		device string
		token  string
		code   int
		reason string
	}{
		{"own target", "dev-a", tokA, http.StatusOK, ""},
		{"no credential", "dev-a", "", http.StatusUnauthorized, "missing"},
		{"unknown device", "dev-x", "dev-x.c2VjcmV0", http.StatusUnauthorized, "unknown"},
		{"revoked device", "dev-r", tokR, http.StatusUnauthorized, "revoked"},
		{"forged credential", "dev-a", "dev-a.Zm9yZ2Vk", http.StatusUnauthorized, "mismatch"},
		{"another device's target", "dev-a", tokB, http.StatusForbidden, "other_device"},
		{"a revoked device's credential for another", "dev-a", tokR, http.StatusUnauthorized, "mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before float64
			if tt.reason != "" {
				before = h.metrics.Value(fleet.MetricRefused.Name, tt.reason)
			}
			code, body, _ := h.do("GET", "/v1/devices/"+tt.device+"/target", tt.token, nil, nil)
			assert.Equal(t, tt.code, code, string(body))
			if tt.reason == "" {
				return
			}
			assert.Equal(t, before+1, h.metrics.Value(fleet.MetricRefused.Name, tt.reason))
			assert.NotContains(t, string(body), `"desired"`, "a refused device is never served")
			if tt.token != "" {
				assert.NotContains(t, string(body), tt.token, "the credential is never echoed")
			}
			code, _, _ = h.do("PUT", "/v1/devices/"+tt.device+"/report", tt.token, report(1, "present"), nil)
			assert.Equal(t, tt.code, code, "reports are refused alike")
		})
	}
	st, err := h.srv.DeviceStatus(context.Background(), "dev-a")
	require.NoError(t, err)
	assert.Zero(t, st.Reported, "no refused device wrote dev-a's report")
	st, err = h.srv.DeviceStatus(context.Background(), "dev-r")
	require.NoError(t, err)
	assert.True(t, st.Revoked)
}

func TestEnrolAndRevokeErrors(t *testing.T) {
	h := newHarness(t, converge.NewMemStore(), nil)
	ctx := context.Background()
	_, err := h.srv.Enrol(ctx, "d", nil)
	require.NoError(t, err)
	tests := []struct {
		name   string
		err    error
		target error
	}{
		{"enrol twice", func() error { _, err := h.srv.Enrol(ctx, "d", nil); return err }(), fleet.ErrDeviceExists},
		{"enrol a bad ID", func() error { _, err := h.srv.Enrol(ctx, "a/b", nil); return err }(), fleet.ErrInvalid},
		{"revoke unknown", h.srv.Revoke(ctx, "nobody"), fleet.ErrDeviceNotFound},
		{"target of unknown", func() error { _, err := h.srv.SetTarget(ctx, "nobody", fleet.Target{}); return err }(), fleet.ErrDeviceNotFound},
		{"target with a bad item", func() error {
			_, err := h.srv.SetTarget(ctx, "d", fleet.Target{Desired: converge.Desired{Items: []converge.DesiredItem{{ID: ""}}}})
			return err
		}(), converge.ErrStatusInvalid},
		{"target with a bad payload", func() error {
			_, err := h.srv.SetTarget(ctx, "d", fleet.Target{Payload: json.RawMessage(`{`)})
			return err
		}(), fleet.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorIs(t, tt.err, tt.target)
		})
	}
	require.NoError(t, h.srv.Revoke(ctx, "d"))
	require.NoError(t, h.srv.Revoke(ctx, "d"), "revoking twice changes nothing")
}

func TestAdminAPIBehindAuthorizer(t *testing.T) {
	h := newHarness(t, converge.NewMemStore(), nil)
	noAuth := newHarness(t, converge.NewMemStore(), func(c *fleet.Config) { c.Authorizer = nil })
	routes := []struct{ method, path string }{
		{"POST", "/v1/admin/devices/d/enrol"},
		{"POST", "/v1/admin/devices/d/revoke"},
		{"PUT", "/v1/admin/devices/d/target"},
		{"GET", "/v1/admin/devices/d"},
		{"GET", "/v1/admin/counts"},
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			code, _, _ := h.do(rt.method, rt.path, "", []byte(`{"items":[]}`), nil)
			assert.Equal(t, http.StatusForbidden, code, "refused by the Authorizer")
			code, _, _ = noAuth.do(rt.method, rt.path, "", []byte(`{"items":[]}`), map[string]string{adminHeader: "yes"})
			assert.Equal(t, http.StatusForbidden, code, "no Authorizer refuses everything")
		})
	}
	_, err := h.srv.DeviceStatus(context.Background(), "d")
	assert.ErrorIs(t, err, fleet.ErrDeviceNotFound, "nothing was enrolled")
}

func TestSetTargetRequestValidation(t *testing.T) {
	h := newHarness(t, converge.NewMemStore(), func(c *fleet.Config) { c.Limits.MaxBytes = 256 })
	h.enrol("d")
	tests := []struct {
		name string
		body string
		code int
	}{
		{"valid", `{"items":[{"id":"a","presence":"absent"}]}`, http.StatusOK},
		{"no items", `{}`, http.StatusBadRequest},
		{"unknown field", `{"items":[],"x":1}`, http.StatusBadRequest},
		{"bad presence", `{"items":[{"id":"a","presence":"maybe"}]}`, http.StatusBadRequest},
		{"duplicate item", `{"items":[{"id":"a","presence":"present"},{"id":"a","presence":"present"}]}`, http.StatusBadRequest},
		{"too large", `{"items":[],"payload":"` + strings.Repeat("x", 300) + `"}`, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := h.admin("PUT", "/v1/admin/devices/d/target", []byte(tt.body))
			assert.Equal(t, tt.code, code, string(body))
		})
	}
	st, err := h.srv.DeviceStatus(context.Background(), "d")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.Target, "only the valid request set a target")
}

func TestDeviceIDChecked(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"dev-1", true}, {"a.b_c", true}, {strings.Repeat("a", fleet.MaxDeviceID), true},
		{"", false}, {".", false}, {"..", false}, {"a/b", false}, {"a b", false}, {"é", false},
		{strings.Repeat("a", fleet.MaxDeviceID+1), false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			err := fleet.CheckDeviceID(tt.id)
			if tt.ok {
				assert.NoError(t, err)
				return
			}
			var re *fleet.RequestError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, "device", re.Field)
		})
	}
}

func TestNewServerConfig(t *testing.T) {
	tests := []struct {
		name  string
		cfg   fleet.Config
		field string
	}{
		{"no store", fleet.Config{}, "Store"},
		{"no cap", fleet.Config{Store: converge.NewMemStore(), Limits: converge.DecodeLimits{MaxBytes: -1}}, "Limits.MaxBytes"},
		{"negative wait", fleet.Config{Store: converge.NewMemStore(), MaxWait: -time.Second}, "MaxWait, StaleAfter, Burst"},
		{"negative rollout poll", fleet.Config{Store: converge.NewMemStore(), RolloutPoll: -time.Second}, "RolloutPoll"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := fleet.NewServer(tt.cfg)
			var ce *converge.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.field, ce.Field)
		})
	}
}

func TestCounts(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	h := newHarness(t, converge.NewMemStore(), func(c *fleet.Config) { c.Now = clock; c.StaleAfter = time.Minute })
	toks := map[string]string{}
	for _, id := range []string{"a", "b", "c", "d"} {
		toks[id] = h.enrol(id)
		h.setTarget(id, oneItem)
	}
	h.setTarget("c", oneItem) // c at revision 2
	for _, id := range []string{"a", "b"} {
		code, _, _ := h.do("PUT", "/v1/devices/"+id+"/report", toks[id], report(1, "present"), nil)
		require.Equal(t, http.StatusNoContent, code)
	}
	require.NoError(t, h.srv.Revoke(context.Background(), "d"))
	now = now.Add(30 * time.Second)

	c, err := h.srv.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 4, c.Devices)
	assert.Equal(t, 1, c.Revoked)
	assert.Equal(t, 1, c.Stale, "c never reported")
	assert.Equal(t, []fleet.RevisionCount{
		{Revision: 1, State: fleet.StateReady, Devices: 2},
		{Revision: 2, State: fleet.StatePending, Devices: 1},
	}, c.Revisions)

	now = now.Add(time.Minute)
	code, body := h.admin("GET", "/v1/admin/counts", nil)
	require.Equal(t, http.StatusOK, code)
	var got fleet.Counts
	require.NoError(t, json.Unmarshal(body, &got))
	assert.Equal(t, 3, got.Stale, "a and b not seen for more than StaleAfter")
}
