package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/fleet"
)

// pipeListener is a net.Listener of in-memory connections (net.Pipe), so
// that a real http.Server and http.Transport run inside a synctest
// bubble, whose clock then governs the long polls' waits.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// inFlight counts the requests a handler is serving.
type inFlight struct {
	h http.Handler
	n atomic.Int64
}

func (f *inFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.n.Add(1)
	defer f.n.Add(-1)
	f.h.ServeHTTP(w, r)
}

// pipeServe serves h with the http.Server NewHTTPServer makes for s, over
// in-memory connections, and returns a client of it, speaking HTTP/1.1
// or, with h2c, HTTP/2 without TLS. The server and the client's
// connections end with the test.
func pipeServe(t *testing.T, s *fleet.Server, h http.Handler, h2c bool) (*http.Server, *http.Client) {
	t.Helper()
	ln := newPipeListener()
	hs := fleet.NewHTTPServer("pipe", s)
	hs.Handler = h
	tr := &http.Transport{DialContext: ln.dial}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		hs.Protocols, tr.Protocols = &p, &p
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = hs.Close()
		assert.ErrorIs(t, <-served, http.ErrServerClosed)
	})
	return hs, &http.Client{Transport: tr}
}

// poll long-polls device d's target with the ETag inm and a wait.
func poll(t *testing.T, c *http.Client, tok, inm, wait string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://fleet/v1/devices/d/target?wait="+wait, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("If-None-Match", inm)
	res, err := c.Do(req)
	if err == nil {
		_ = res.Body.Close()
	}
	return res, err
}

func TestParkedLongPoll(t *testing.T) {
	tests := []struct {
		name     string
		end      func(t *testing.T, s, other *fleet.Server, hs *http.Server) // after 10 s of waiting; nil: none
		code     int
		newer    bool // the answer names a newer revision
		answered time.Duration
	}{
		{"wait runs out", nil, http.StatusNotModified, false, 30 * time.Second},
		{"woken by another replica", func(t *testing.T, _, other *fleet.Server, _ *http.Server) {
			_, err := other.SetTarget(context.Background(), "d", fleet.Target{})
			assert.NoError(t, err)
		}, http.StatusOK, true, 10 * time.Second},
		{"Close answers at once", func(t *testing.T, s, _ *fleet.Server, _ *http.Server) {
			assert.NoError(t, s.Close())
		}, http.StatusNotModified, false, 10 * time.Second},
		{"the http.Server's Shutdown answers at once", func(t *testing.T, _, _ *fleet.Server, hs *http.Server) {
			assert.NoError(t, hs.Shutdown(context.Background()))
		}, http.StatusNotModified, false, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := converge.NewMemStore()
				s, m := bubbleServer(t, store, nil)
				other, _ := bubbleServer(t, store, nil)
				tok, rev := setup(t, other, "d")
				h := &inFlight{h: s}
				hs, c := pipeServe(t, s, h, false)

				const polls = 3
				type answer struct {
					res *http.Response
					err error
				}
				answers := make(chan answer, polls)
				start := time.Now()
				for range polls {
					go func() {
						res, err := poll(t, c, tok, fleet.ETag(rev), "30s")
						answers <- answer{res, err}
					}()
				}
				synctest.Wait()
				assert.Equal(t, float64(polls), m.Value(fleet.MetricLongPolls.Name), "the polls wait")
				assert.Zero(t, h.n.Load(), "with no handler running: they left net/http's goroutines")
				if tt.end != nil {
					time.Sleep(10 * time.Second)
					tt.end(t, s, other, hs)
				}
				for range polls {
					a := <-answers
					require.NoError(t, a.err)
					assert.Equal(t, tt.code, a.res.StatusCode)
					assert.True(t, a.res.Close, "the answer closes its connection")
					want := fleet.ETag(rev)
					if tt.newer {
						want = fleet.ETag(rev + 1)
					}
					assert.Equal(t, want, a.res.Header.Get("ETag"))
				}
				assert.Equal(t, tt.answered, time.Since(start))
				synctest.Wait()
				assert.Zero(t, m.Value(fleet.MetricLongPolls.Name), "no poll left waiting")
			})
		})
	}
}

func TestParkedLongPollAnswersTheTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := converge.NewMemStore()
		s, _ := bubbleServer(t, store, nil)
		tok, rev := setup(t, s, "d")
		_, c := pipeServe(t, s, s, false)
		done := make(chan *http.Response)
		go func() {
			req, err := http.NewRequest("GET", "http://fleet/v1/devices/d/target?wait=30s", nil)
			assert.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("If-None-Match", fleet.ETag(rev))
			res, err := c.Do(req)
			assert.NoError(t, err)
			done <- res
		}()
		synctest.Wait()
		want := fleet.Target{Desired: converge.Desired{Items: []converge.DesiredItem{{ID: "web", Presence: converge.Present}}}}
		rev2, err := s.SetTarget(context.Background(), "d", want)
		require.NoError(t, err)
		res := <-done
		defer func() { _ = res.Body.Close() }()
		require.Equal(t, http.StatusOK, res.StatusCode)
		assert.Equal(t, fleet.ETag(rev2), res.Header.Get("ETag"))
		assert.Equal(t, "no-store", res.Header.Get("Cache-Control"))
		assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
		var got fleet.Target
		require.NoError(t, json.NewDecoder(res.Body).Decode(&got))
		assert.Equal(t, want.Desired.Items, got.Desired.Items)
		assert.Equal(t, rev2, got.Desired.Revision)
	})
}

func TestParkedLongPollOfAClientGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, m := bubbleServer(t, converge.NewMemStore(), nil)
		tok, rev := setup(t, s, "d")
		_, c := pipeServe(t, s, s, false)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			req, err := http.NewRequestWithContext(ctx, "GET", "http://fleet/v1/devices/d/target?wait=30s", nil)
			assert.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("If-None-Match", fleet.ETag(rev))
			_, err = c.Do(req)
			done <- err
		}()
		synctest.Wait()
		cancel()
		assert.True(t, errors.Is(<-done, context.Canceled))
		synctest.Wait()
		assert.Equal(t, float64(1), m.Value(fleet.MetricLongPolls.Name), "the server learns of it when it answers")
		time.Sleep(30 * time.Second)
		synctest.Wait()
		assert.Zero(t, m.Value(fleet.MetricLongPolls.Name), "its wait ran out: the answer failed, the connection is closed")
	})
}

func TestLongPollOverHTTP2WaitsInItsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := converge.NewMemStore()
		s, m := bubbleServer(t, store, nil)
		tok, rev := setup(t, s, "d")
		h := &inFlight{h: s}
		_, c := pipeServe(t, s, h, true)
		done := make(chan *http.Response)
		go func() {
			res, err := poll(t, c, tok, fleet.ETag(rev), "30s")
			assert.NoError(t, err)
			done <- res
		}()
		synctest.Wait()
		assert.Equal(t, float64(1), m.Value(fleet.MetricLongPolls.Name))
		assert.Equal(t, int64(1), h.n.Load(), "an HTTP/2 stream cannot be hijacked: its handler waits")
		_, err := s.SetTarget(context.Background(), "d", fleet.Target{})
		require.NoError(t, err)
		res := <-done
		assert.Equal(t, 2, res.ProtoMajor)
		assert.Equal(t, http.StatusOK, res.StatusCode)
		assert.Equal(t, fleet.ETag(rev+1), res.Header.Get("ETag"))
		assert.False(t, res.Close, "the connection stays open")
	})
}
