package fleet_test

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// cutMode is how a cutProxy cuts its link.
type cutMode int

const (
	// linkUp forwards everything.
	linkUp cutMode = iota
	// linkDrop closes every connection through the proxy and every new
	// one at once, as a host that went away (connection refused or reset).
	linkDrop
	// linkHang forwards nothing, in either direction, and holds new
	// connections, until healed: a blackholed route. What was held then
	// goes through.
	linkHang
)

// cutProxy is a TCP proxy on 127.0.0.1 to one address, whose link can be
// cut (dropped or hung) and healed: between an agent and its server
// replica, or between a replica and PostgreSQL. It counts the
// connections it cut: dropped, refused, or held while hung.
type cutProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	mode   cutMode
	healed chan struct{} // closed when a hang ends
	conns  map[net.Conn]struct{}
	cuts   int
	closed bool
	wg     sync.WaitGroup
}

// newCutProxy starts a proxy to target; it is closed when the test ends.
func newCutProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// addr is the address clients dial.
func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
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

// serve connects the client c to the target once the link lets it.
func (p *cutProxy) serve(c net.Conn) {
	defer p.wg.Done()
	if !p.add(c) || !p.pass() {
		c.Close()
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.add(s) {
		c.Close()
		s.Close()
		return
	}
	p.wg.Add(2)
	go p.pipe(s, c)
	go p.pipe(c, s)
}

// add tracks conn, unless the proxy is closed.
func (p *cutProxy) add(conn net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[conn] = struct{}{}
	return true
}

// pass waits while the link hangs; it returns false when the link drops
// or the proxy closes. Every connection or chunk stopped is counted.
func (p *cutProxy) pass() bool {
	p.mu.Lock()
	mode, healed := p.mode, p.healed
	if mode != linkUp {
		p.cuts++
	}
	p.mu.Unlock()
	switch mode {
	case linkDrop:
		return false
	case linkHang:
		<-healed // closed by heal and by close
		return p.pass()
	}
	return true
}

// pipe copies src to dst through the link, closing both at the end.
func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut cuts the link in mode; it counts the connections open at that
// moment as cut.
func (p *cutProxy) cut(mode cutMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heal()
	p.mode = mode
	p.cuts += (len(p.conns) + 1) / 2 // a client's end and, once dialled, the target's
	switch mode {
	case linkHang:
		p.healed = make(chan struct{})
	case linkDrop:
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// up heals the link.
func (p *cutProxy) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heal()
	p.mode = linkUp
}

// heal ends a hang; p.mu is held.
func (p *cutProxy) heal() {
	if p.healed != nil {
		close(p.healed)
		p.healed = nil
	}
}

// cutCount is the number of connections cut so far.
func (p *cutProxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

func (p *cutProxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mode = linkDrop
	p.heal()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
