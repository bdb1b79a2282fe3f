package convergetest_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/convergetest"
)

// echoServer answers every line it reads with the same line, until the
// test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T) *convergetest.Proxy {
	t.Helper()
	p, err := convergetest.NewProxy(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	return p
}

// echo sends line through c and reads its echo, waiting at most wait.
func echo(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	got, err := r.ReadString('\n')
	if len(got) > 0 {
		got = got[:len(got)-1]
	}
	return got, err
}

func dial(t *testing.T, p *convergetest.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// long is a wait that a working link never needs; short, one that a cut
// link is given to show it forwards nothing.
const (
	long  = 10 * time.Second
	short = 100 * time.Millisecond
)

func TestProxyForwardsAndHeals(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	got, err := echo(c, r, "hello", long)
	require.NoError(t, err)
	assert.Equal(t, "hello", got)
	assert.Zero(t, p.Cuts())
}

func TestProxyFail(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	_, err := echo(c, r, "up", long)
	require.NoError(t, err)
	p.Partition(convergetest.PartitionFail)
	_, err = echo(c, r, "down", long)
	require.Error(t, err, "an open connection is closed")
	assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "closed at once, not hung: %v", err)

	c2, r2 := dial(t, p)
	_, err = echo(c2, r2, "new", long)
	require.Error(t, err, "a new connection is closed at once")
	assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "closed at once, not hung: %v", err)
	assert.GreaterOrEqual(t, p.Cuts(), 2, "the open connection and the new one")

	p.Partition(convergetest.PartitionNone)
	c3, r3 := dial(t, p)
	got, err := echo(c3, r3, "healed", long)
	require.NoError(t, err)
	assert.Equal(t, "healed", got)
}

func TestProxyHang(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	_, err := echo(c, r, "up", long)
	require.NoError(t, err)
	p.Partition(convergetest.PartitionHang)
	_, err = echo(c, r, "held", short)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "nothing goes through")
	c2, r2 := dial(t, p)
	_, err = echo(c2, r2, "new", short)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a new connection is held")
	assert.GreaterOrEqual(t, p.Cuts(), 2)

	p.Partition(convergetest.PartitionNone)
	for _, x := range []struct {
		r    *bufio.Reader
		c    net.Conn
		want string
	}{{r, c, "held"}, {r2, c2, "new"}} {
		_ = x.c.SetReadDeadline(time.Now().Add(long))
		got, err := x.r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, x.want+"\n", got, "what was held goes through once healed")
	}
}

func TestProxyDelay(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	_, err := echo(c, r, "warm", long)
	require.NoError(t, err)
	const d = 50 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	got, err := echo(c, r, "slow", long)
	require.NoError(t, err)
	assert.Equal(t, "slow", got)
	assert.GreaterOrEqual(t, time.Since(start), 2*d, "each way waits the delay")
	p.Delay(0)
	assert.Zero(t, p.Cuts(), "a delay cuts nothing")
}

func TestProxyCloseEndsEverything(t *testing.T) {
	p, err := convergetest.NewProxy(echoServer(t))
	require.NoError(t, err)
	c, r := dial(t, p)
	_, err = echo(c, r, "up", long)
	require.NoError(t, err)
	p.Partition(convergetest.PartitionHang)
	c2, _ := dial(t, p) // held
	_ = c2
	require.NoError(t, p.Close())
	_, err = echo(c, r, "after", long)
	assert.Error(t, err)
	assert.NoError(t, p.Close(), "a second Close does nothing")
	_, err = net.DialTimeout("tcp", p.Addr(), long)
	assert.Error(t, err, "the listener is closed")
}
