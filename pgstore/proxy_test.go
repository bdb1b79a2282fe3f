package pgstore_test

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/convergetest"
)

// proxy is a TCP proxy between one replica and the database server, the
// real-world partition: it can drop the connections (PartitionFail:
// existing ones are closed, new ones closed at once), blackhole them
// (PartitionHang: nothing is forwarded, new connections wait, until
// healed) or delay every chunk. It is a convergetest.Link.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	mode   convergetest.PartitionMode
	healed chan struct{} // closed when a hang ends
	delay  time.Duration
	conns  map[net.Conn]struct{}
	closed chan struct{}
	wg     sync.WaitGroup
}

var _ convergetest.Link = (*proxy)(nil)

// newProxy starts a proxy to the server of dsn and returns it with the
// DSN that goes through it; it is closed when the test ends.
func newProxy(t testing.TB, dsn string) (*proxy, string) {
	t.Helper()
	p, via := newProxyNoCleanup(dsn)
	require.NotNil(t, p, via)
	t.Cleanup(p.close)
	return p, via
}

// newProxyNoCleanup starts a proxy to the server of dsn and returns it
// with the DSN that goes through it; the caller closes it. On failure it
// returns nil and the error's text.
func newProxyNoCleanup(dsn string) (*proxy, string) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err.Error()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err.Error()
	}
	p := &proxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects client c to the server once the link lets it.
func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	if !p.track(c) || !p.gate() {
		c.Close()
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(s) {
		c.Close()
		s.Close()
		return
	}
	p.wg.Add(2)
	go p.pipe(s, c)
	go p.pipe(c, s)
}

// track adds conn to the open connections, unless the proxy is closed.
func (p *proxy) track(conn net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		return false
	default:
	}
	p.conns[conn] = struct{}{}
	return true
}

// gate waits while the link hangs, then sleeps the delay; it returns
// false when the link fails or the proxy closes.
func (p *proxy) gate() bool {
	for {
		p.mu.Lock()
		mode, healed, delay := p.mode, p.healed, p.delay
		p.mu.Unlock()
		switch mode {
		case convergetest.PartitionFail:
			return false
		case convergetest.PartitionHang:
			select {
			case <-healed:
				continue
			case <-p.closed:
				return false
			}
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-p.closed:
				return false
			}
		}
		return true
	}
}

// pipe copies from src to dst through the gate, closing both at the end.
func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or closed: the other direction ends too
		}
	}
}

// Partition implements convergetest.Link.
func (p *proxy) Partition(mode convergetest.PartitionMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == convergetest.PartitionHang && p.healed != nil {
		close(p.healed)
		p.healed = nil
	}
	p.mode = mode
	switch mode {
	case convergetest.PartitionHang:
		p.healed = make(chan struct{})
	case convergetest.PartitionFail:
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// Delay implements convergetest.Link.
func (p *proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.mu.Lock()
	close(p.closed)
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
