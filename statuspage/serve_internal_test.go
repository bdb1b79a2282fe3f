package statuspage

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeCutsOffASlowClient: a client that opens a connection and never
// finishes its request headers is disconnected after the header timeout,
// while the server goes on answering others.
func TestServeCutsOffASlowClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	go func() {
		done <- serve(ctx, ln, ok, serveTimeouts{readHeader: 200 * time.Millisecond, read: time.Second, write: time.Second, idle: time.Second, grace: time.Second})
	}()

	slow, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer slow.Close()
	_, err = io.WriteString(slow, "GET / HTTP/1.1\r\nHost: x\r\n") // never ends its headers
	require.NoError(t, err)
	require.NoError(t, slow.SetReadDeadline(time.Now().Add(10*time.Second)))
	start := time.Now()
	_, err = io.ReadAll(slow) // the server closes it
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 5*time.Second, "the slow client was cut off by the header timeout")

	resp, err := http.Get("http://" + ln.Addr().String())
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(body))

	cancel()
	require.NoError(t, <-done, "a cancelled context stops serving without an error")
}
