package fleet_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/fleet"
)

// bubbleServer is a Server built inside a synctest bubble, called through
// ServeHTTP (no network, so the bubble's clock governs every wait).
func bubbleServer(t *testing.T, store converge.Queue, mod func(*fleet.Config)) (*fleet.Server, *convergetest.Metrics) {
	t.Helper()
	m := &convergetest.Metrics{}
	cfg := fleet.Config{Store: store, Metrics: m, Rate: -1, MaxWait: time.Minute, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	s, err := fleet.NewServer(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, m
}

func get(s http.Handler, path, token, inm string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if inm != "" {
		req.Header.Set("If-None-Match", inm)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

func setup(t *testing.T, s *fleet.Server, id string) (token string, rev uint64) {
	t.Helper()
	ctx := context.Background()
	token, err := s.Enrol(ctx, id, nil)
	require.NoError(t, err)
	rev, err = s.SetTarget(ctx, id, fleet.Target{Desired: converge.Desired{Items: []converge.DesiredItem{{ID: "app", Presence: converge.Present}}}})
	require.NoError(t, err)
	return token, rev
}

func TestLongPoll(t *testing.T) {
	tests := []struct {
		name     string
		wait     string
		change   time.Duration // when another replica sets a new target; 0: never
		code     int
		answered time.Duration
	}{
		{"wait runs out", "30s", 0, http.StatusNotModified, 30 * time.Second},
		{"wait in seconds", "5", 0, http.StatusNotModified, 5 * time.Second},
		{"wait cut to MaxWait", "1h", 0, http.StatusNotModified, time.Minute},
		{"woken by another replica", "30s", 10 * time.Second, http.StatusOK, 10 * time.Second},
		{"bad wait", "soon", 0, http.StatusBadRequest, 0},
		{"negative wait", "-1s", 0, http.StatusBadRequest, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := converge.NewMemStore()
				a, m := bubbleServer(t, store, nil)
				b, _ := bubbleServer(t, store, nil)
				tok, rev := setup(t, b, "d")
				if tt.change > 0 {
					go func() {
						time.Sleep(tt.change)
						_, err := b.SetTarget(context.Background(), "d", fleet.Target{})
						assert.NoError(t, err)
					}()
				}
				start := time.Now()
				done := make(chan *httptest.ResponseRecorder)
				go func() { done <- get(a, "/v1/devices/d/target?wait="+tt.wait, tok, fleet.ETag(rev)) }()
				if tt.code != http.StatusBadRequest {
					synctest.Wait()
					assert.Equal(t, float64(1), m.Value(fleet.MetricLongPolls.Name), "the poll waits")
				}
				res := <-done
				assert.Equal(t, tt.code, res.Code, res.Body.String())
				assert.Equal(t, tt.answered, time.Since(start))
				if tt.code == http.StatusOK {
					assert.Equal(t, fleet.ETag(rev+1), res.Header().Get("ETag"))
				}
				assert.Zero(t, m.Value(fleet.MetricLongPolls.Name), "no poll left waiting")
			})
		})
	}
}

func TestLongPollEndsWithRequestAndServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := bubbleServer(t, converge.NewMemStore(), nil)
		tok, rev := setup(t, s, "d")
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequestWithContext(ctx, "GET", "/v1/devices/d/target?wait=30s", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("If-None-Match", fleet.ETag(rev))
		done := make(chan struct{})
		go func() { s.ServeHTTP(httptest.NewRecorder(), req); close(done) }()
		synctest.Wait()
		cancel()
		<-done // the client went away: the poll ends at once

		done2 := make(chan *httptest.ResponseRecorder)
		go func() { done2 <- get(s, "/v1/devices/d/target?wait=30s", tok, fleet.ETag(rev)) }()
		synctest.Wait()
		start := time.Now()
		require.NoError(t, s.Close())
		res := <-done2
		assert.Equal(t, http.StatusNotModified, res.Code)
		assert.Zero(t, time.Since(start), "Close ends waiting polls at once")
	})
}

func TestRateLimitPerDevice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, m := bubbleServer(t, converge.NewMemStore(), func(c *fleet.Config) { c.Rate = 1; c.Burst = 2 })
		tokA, _ := setup(t, s, "a")
		tokB, _ := setup(t, s, "b")
		steps := []struct {
			name  string
			after time.Duration
			dev   string
			tok   string
			code  int
		}{
			{"burst 1", 0, "a", tokA, http.StatusOK},
			{"burst 2", 0, "a", tokA, http.StatusOK},
			{"beyond the burst", 0, "a", tokA, http.StatusTooManyRequests},
			{"another device has its own bucket", 0, "b", tokB, http.StatusOK},
			{"a token back after a second", time.Second, "a", tokA, http.StatusOK},
			{"and only one", 0, "a", tokA, http.StatusTooManyRequests},
		}
		limited := 0
		for _, st := range steps {
			time.Sleep(st.after)
			res := get(s, "/v1/devices/"+st.dev+"/target", st.tok, "")
			assert.Equal(t, st.code, res.Code, st.name)
			if st.code == http.StatusTooManyRequests {
				limited++
				assert.Equal(t, "1", res.Header().Get("Retry-After"), st.name)
			}
		}
		assert.Equal(t, float64(limited), m.Value(fleet.MetricRefused.Name, "rate_limited"))
	})
}

func TestServerRestartLosesNothingAcknowledged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.db")
	ctx := context.Background()
	open := func() (*boltstore.Store, *fleet.Server) {
		st, err := boltstore.Open(path, boltstore.Options{})
		require.NoError(t, err)
		s, err := fleet.NewServer(fleet.Config{Store: st, Rate: -1, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		return st, s
	}
	st, s := open()
	tok, rev := setup(t, s, "d")
	_, err := s.StoreReport(ctx, "d", report(rev, "present"))
	require.NoError(t, err)
	tokR, _ := setup(t, s, "r")
	require.NoError(t, s.Revoke(ctx, "r"))
	before, err := s.Counts(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, st.Close())

	st, s = open()
	defer func() { _ = s.Close(); _ = st.Close() }()
	after, err := s.Counts(ctx)
	require.NoError(t, err)
	assert.Equal(t, before, after)
	ds, err := s.DeviceStatus(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, fleet.StateReady, ds.State)
	assert.Equal(t, http.StatusOK, get(s, "/v1/devices/d/target", tok, "").Code, "the credential survives")
	assert.Equal(t, http.StatusUnauthorized, get(s, "/v1/devices/r/target", tokR, "").Code, "so does the revocation")
	rev2, err := s.SetTarget(ctx, "d", fleet.Target{})
	require.NoError(t, err)
	assert.Equal(t, rev+1, rev2, "revisions keep growing across the restart")
}

func TestNewHTTPServerTimeouts(t *testing.T) {
	for _, wait := range []time.Duration{0, 5 * time.Minute} {
		s, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), MaxWait: wait})
		require.NoError(t, err)
		hs := fleet.NewHTTPServer(":0", s)
		require.NoError(t, s.Close())
		assert.Equal(t, fleet.HTTPReadHeaderTimeout, hs.ReadHeaderTimeout)
		assert.Equal(t, fleet.HTTPReadTimeout, hs.ReadTimeout)
		assert.Equal(t, fleet.HTTPIdleTimeout, hs.IdleTimeout)
		assert.Equal(t, fleet.HTTPMaxHeaderBytes, hs.MaxHeaderBytes)
		assert.Equal(t, max(wait, fleet.DefaultMaxWait)+fleet.HTTPWriteMargin, hs.WriteTimeout,
			"a long poll that waited its longest still answers")
		assert.Same(t, s, hs.Handler)
	}
}

func TestIfNoneMatchForms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := bubbleServer(t, converge.NewMemStore(), nil)
		tok, rev := setup(t, s, "d")
		tests := []struct {
			inm  string
			code int
		}{
			{fleet.ETag(rev), http.StatusNotModified},
			{"W/" + fleet.ETag(rev), http.StatusNotModified},
			{`"9", ` + fleet.ETag(rev), http.StatusNotModified},
			{"*", http.StatusNotModified},
			{`"9"`, http.StatusOK},
			{fleet.ETag(rev + 1), http.StatusOK},
			{"", http.StatusOK},
		}
		for _, tt := range tests {
			res := get(s, "/v1/devices/d/target", tok, tt.inm)
			assert.Equal(t, tt.code, res.Code, tt.inm)
			assert.Equal(t, fleet.ETag(rev), res.Header().Get("ETag"), tt.inm)
		}
	})
}
