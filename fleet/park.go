package fleet

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Timeouts of a parked long poll's answer.
const (
	// parkedReadTimeout bounds the store read a parked poll makes when
	// woken or when its wait runs out.
	parkedReadTimeout = 10 * time.Second
	// parkedWriteTimeout bounds the writing of a parked poll's answer, so
	// a client that reads nothing cannot hold the connection.
	parkedWriteTimeout = 10 * time.Second
)

// parkedPoll is a long poll of HTTP/1.x taken off net/http's goroutine
// once it is known to wait: its connection, hijacked, waits with no
// goroutine of its own, in Server.parked under its device, until the
// store's watch wakes it (a goroutine then reads the target and answers
// or parks it again), its wait runs out (its timer answers 304), or the
// server ends its polls (304). Its answer closes the connection
// (Connection: close): net/http cannot take a hijacked connection back,
// and serving the connection's next requests here would repeat
// net/http's reading of requests, its timeouts and its limits.
type parkedPoll struct {
	conn     net.Conn
	id       string
	inm      string
	rev      uint64 // the revision the poll matched when parked
	deadline time.Time
	timer    *time.Timer

	// Guarded by Server.mu.
	parked  bool // in Server.parked, waiting for a wake or its timer
	expired bool // its timer fired
}

// canPark says whether the long poll r may leave net/http's goroutine:
// a GET of HTTP/1.x with no body. HTTP/2 connections (h2, h2c) carry
// other streams and cannot be hijacked: their polls wait in net/http's
// goroutine.
func canPark(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.Method == http.MethodGet && r.ContentLength == 0 && len(r.TransferEncoding) == 0
}

// park hijacks the connection of the long poll r, which matched rev,
// and parks it until changed is closed or deadline. It returns false,
// having done nothing, when the connection cannot be hijacked (the
// caller waits in its goroutine instead).
func (s *Server) park(w http.ResponseWriter, r *http.Request, id, inm string, rev uint64, deadline time.Time, changed <-chan struct{}) bool {
	if !canPark(r) {
		return false
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	// Any bytes the client sent after this request (pipelined) are left
	// unread: the answer closes the connection, which tells the client
	// to send them again on another.
	p := &parkedPoll{conn: conn, id: strings.Clone(id), inm: strings.Clone(inm), rev: rev, deadline: deadline}
	if !s.register(p, changed) {
		s.serveParked(p)
	}
	return true
}

// register parks p until changed is closed, unless it already is, the
// server ends its polls, or p's wait ran out: then it returns false and
// the caller answers p.
func (s *Server) register(p *parkedPoll, changed <-chan struct{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || p.expired {
		return false
	}
	select {
	case <-changed:
		return false
	default:
	}
	p.parked = true
	s.parked[p.id] = append(s.parked[p.id], p)
	if p.timer == nil {
		p.timer = time.AfterFunc(time.Until(p.deadline), func() { s.expire(p) })
	}
	return true
}

// unparkLocked takes p out of s.parked; s.mu is held.
func (s *Server) unparkLocked(p *parkedPoll) {
	p.parked = false
	ps := s.parked[p.id]
	for i, q := range ps {
		if q == p {
			ps = append(ps[:i], ps[i+1:]...)
			break
		}
	}
	if len(ps) == 0 {
		delete(s.parked, p.id)
	} else {
		s.parked[p.id] = ps
	}
}

// expire is p's timer: its wait ran out. A parked p is answered here; a
// p being served by a wake-up sees expired when it would park again.
func (s *Server) expire(p *parkedPoll) {
	s.mu.Lock()
	p.expired = true
	if !p.parked {
		s.mu.Unlock()
		return
	}
	s.unparkLocked(p)
	s.answering.Add(1)
	s.mu.Unlock()
	defer s.answering.Done()
	s.serveParked(p)
}

// wakeLocked starts answering the parked polls ps; s.mu is held.
func (s *Server) wakeLocked(ps []*parkedPoll) {
	for _, p := range ps {
		p.parked = false
		s.answering.Add(1)
		go func() {
			defer s.answering.Done()
			s.serveParked(p)
		}()
	}
}

// serveParked reads p's target and answers p, or parks it again when the
// target still matches and its wait has not run out.
func (s *Server) serveParked(p *parkedPoll) {
	for {
		if s.isClosed() {
			// The server ends its polls: answer without the store, which
			// the program may be closing.
			s.answerParked(p, func(w http.ResponseWriter) { notModified(w, p.rev) })
			return
		}
		changed := s.waitChan(p.id)
		ctx, cancel := context.WithTimeout(context.Background(), parkedReadTimeout)
		raw, rev, err := s.readTargetRaw(ctx, p.id)
		cancel()
		if err != nil && !errors.Is(err, ErrNoTarget) {
			s.answerParked(p, func(w http.ResponseWriter) { s.fail(w, err) })
			return
		}
		if !etagMatches(p.inm, rev) {
			s.answerParked(p, func(w http.ResponseWriter) { s.writeTarget(w, p.id, raw, rev) })
			return
		}
		p.rev = rev
		if s.register(p, changed) {
			return
		}
		if s.hasExpired(p) {
			s.answerParked(p, func(w http.ResponseWriter) { notModified(w, rev) })
			return
		}
	}
}

func (s *Server) hasExpired(p *parkedPoll) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.expired
}

// answerParked writes the answer fill makes to p's connection, with
// Connection: close, and closes it.
func (s *Server) answerParked(p *parkedPoll, fill func(http.ResponseWriter)) {
	if p.timer != nil {
		p.timer.Stop()
	}
	s.cfg.Metrics.Add(MetricLongPolls, -1)
	w := &bufferedResponse{header: http.Header{}}
	fill(w)
	_ = p.conn.SetWriteDeadline(time.Now().Add(parkedWriteTimeout))
	_, _ = p.conn.Write(w.bytes())
	if cw, ok := p.conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = p.conn.Close()
}

// bufferedResponse is the http.ResponseWriter of a parked poll's answer:
// it keeps the status, headers and body, which bytes writes out as an
// HTTP/1.1 response that closes its connection.
type bufferedResponse struct {
	header http.Header
	code   int
	body   []byte
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	b.body = append(b.body, p...)
	return len(p), nil
}

func (b *bufferedResponse) bytes() []byte {
	b.WriteHeader(http.StatusOK)
	h := b.header
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("Connection", "close")
	if b.code != http.StatusNotModified && b.code != http.StatusNoContent {
		h.Set("Content-Length", strconv.Itoa(len(b.body)))
	}
	var sb bytes.Buffer
	sb.Grow(256 + len(b.body))
	sb.WriteString("HTTP/1.1 " + strconv.Itoa(b.code) + " " + http.StatusText(b.code) + "\r\n")
	_ = h.Write(&sb)
	sb.WriteString("\r\n")
	if b.code != http.StatusNotModified && b.code != http.StatusNoContent {
		sb.Write(b.body)
	}
	return sb.Bytes()
}
