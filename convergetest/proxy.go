package convergetest

import (
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 to one address, the real-world
// partition between a program and a server it talks to (a replica and its
// database server, an agent and its fleet server). It is a Link:
//
//   - Partition(PartitionFail) drops the link: the connections open are
//     closed, and new ones are closed at once, as a host that went away
//     (connection refused or reset);
//   - Partition(PartitionHang) blackholes it: nothing is forwarded in
//     either direction and new connections are held, until the link is
//     healed; what was held then goes through;
//   - Partition(PartitionNone) heals it;
//   - Delay(d) forwards every chunk, and every new connection, d late.
//
// Cuts counts the connections the link cut. Build a Proxy with NewProxy
// and end it with Close. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	mode   PartitionMode
	healed chan struct{} // closed when a hang ends
	delay  time.Duration
	conns  map[net.Conn]struct{}
	cuts   int
	closed chan struct{}
	wg     sync.WaitGroup
}

var _ Link = (*Proxy)(nil)

// NewProxy starts a proxy to target (host:port), listening on a free port
// of 127.0.0.1 (Addr).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients dial, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
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
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	if !p.track(c) || !p.gate() {
		p.drop(c)
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		p.drop(c)
		return
	}
	if !p.track(s) {
		p.drop(c)
		_ = s.Close()
		return
	}
	p.wg.Add(2)
	go p.pipe(s, c)
	go p.pipe(c, s)
}

// track adds conn to the open connections, unless the proxy is closed.
func (p *Proxy) track(conn net.Conn) bool {
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

// drop closes conn and forgets it.
func (p *Proxy) drop(conn net.Conn) {
	_ = conn.Close()
	p.mu.Lock()
	delete(p.conns, conn)
	p.mu.Unlock()
}

// gate waits while the link hangs, then the delay; it returns false when
// the link fails or the proxy closes. Every connection or chunk it stops
// (held or refused) is counted as cut.
func (p *Proxy) gate() bool {
	for {
		p.mu.Lock()
		mode, healed, delay := p.mode, p.healed, p.delay
		if mode != PartitionNone {
			p.cuts++
		}
		p.mu.Unlock()
		switch mode {
		case PartitionFail:
			return false
		case PartitionHang:
			select {
			case <-healed:
				continue
			case <-p.closed:
				return false
			}
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-p.closed:
				t.Stop()
				return false
			}
		}
		return true
	}
}

// pipe copies src to dst through the gate, closing both at the end.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.drop(dst)
		p.drop(src)
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

// Partition implements Link: it cuts the link in mode, or heals it with
// PartitionNone. The connections open when a cut starts count as cut.
func (p *Proxy) Partition(mode PartitionMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed != nil {
		close(p.healed)
		p.healed = nil
	}
	p.mode = mode
	if mode != PartitionNone {
		p.cuts += (len(p.conns) + 1) / 2 // a client's end and, once dialled, the target's
	}
	switch mode {
	case PartitionHang:
		p.healed = make(chan struct{})
	case PartitionFail:
		for c := range p.conns {
			_ = c.Close()
		}
		clear(p.conns)
	}
}

// Delay implements Link: every chunk, and every new connection, is
// forwarded d later; 0 means none.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Cuts returns the number of connections the link cut so far: open when
// a cut started, or met while it lasted (refused, or held while hung; a
// connection held and then stopped again counts again).
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Close closes the listener and every connection, and returns when the
// proxy's goroutines have ended. Calling it again does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		return nil
	default:
	}
	close(p.closed)
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}
