package fleet_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/fleet"
)

func FuzzDecodeTarget(f *testing.F) {
	f.Add([]byte(`{"format":1,"desired":{"revision":3,"items":[{"id":"a","presence":"present"}]},"payload":{"x":[1,2]},"set":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"format":2,"desired":{"revision":1,"items":[]},"set":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"format":1,"format":1}`))
	f.Add([]byte("{\"format\":1,\"payload\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tgt, err := fleet.DecodeTarget(b, converge.DecodeLimits{MaxBytes: 4096})
		if err != nil {
			assert.ErrorIs(t, err, fleet.ErrInvalid)
			return
		}
		assert.NoError(t, tgt.Desired.Validate(), "a decoded target is valid")
	})
}

// fuzzServer is one server for every input of a fuzz target; device "d"
// has a target at revision 1 and its credential in the returned token.
func fuzzServer(f *testing.F) (*fleet.Server, string) {
	s, err := fleet.NewServer(fleet.Config{
		Store: converge.NewMemStore(), Rate: -1, Limits: converge.DecodeLimits{MaxBytes: 4096},
		Authorizer: func(*http.Request, fleet.Action) (string, error) { return "fuzz", nil },
		Logger:     slog.New(slog.DiscardHandler),
	})
	require.NoError(f, err)
	f.Cleanup(func() { _ = s.Close() })
	tok, err := s.Enrol(context.Background(), "d", nil)
	require.NoError(f, err)
	_, err = s.SetTarget(context.Background(), "d", fleet.Target{})
	require.NoError(f, err)
	return s, tok
}

func FuzzReportRequest(f *testing.F) {
	s, tok := fuzzServer(f)
	f.Add([]byte(`{"revision":1,"time":"2026-01-02T03:04:05Z","items":[{"id":"app","state":"present"}]}`))
	f.Add([]byte(`{"revision":1,"items":[{"id":"a","state":"waiting-for-dependencies","waiting_for":["b"]}]}`))
	f.Add([]byte(`{"revision":2,"items":[]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req := httptest.NewRequest("PUT", "/v1/devices/d/report", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		assert.Contains(t, []int{http.StatusNoContent, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge}, rec.Code, rec.Body.String())
	})
}

func FuzzSetTargetRequest(f *testing.F) {
	s, _ := fuzzServer(f)
	f.Add([]byte(`{"items":[{"id":"a","presence":"present"}],"payload":{"image":"x"}}`))
	f.Add([]byte(`{"items":[{"id":"a","presence":"absent"},{"id":"a","presence":"absent"}]}`))
	f.Add([]byte(`{"items":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req := httptest.NewRequest("PUT", "/v1/admin/devices/d/target", bytes.NewReader(b))
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		assert.Contains(t, []int{http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge}, rec.Code, rec.Body.String())
	})
}
