package statuspage_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/statuspage"
)

func TestListenAndServeRefusesAnAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	err = statuspage.ListenAndServe(t.Context(), ln.Addr().String(), http.NotFoundHandler())
	var opErr *net.OpError
	require.ErrorAs(t, err, &opErr)
	assert.Contains(t, err.Error(), "statuspage: listen on "+ln.Addr().String())
}

func TestListenAndServeStopsWithItsContext(t *testing.T) {
	// A free port: listen, note it, close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- statuspage.ListenAndServe(ctx, addr, http.NotFoundHandler()) }()
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNotFound
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	_, err = http.Get("http://" + addr)
	require.Error(t, err, "nothing listens once it returned")
}
