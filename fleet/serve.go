package fleet

import (
	"net/http"
	"time"
)

// Timeouts of the http.Server NewHTTPServer returns.
const (
	// HTTPReadHeaderTimeout bounds the reading of a request's headers,
	// HTTPReadTimeout of the whole request (a report's body included),
	// and HTTPIdleTimeout a kept-alive connection between requests.
	HTTPReadHeaderTimeout = 10 * time.Second
	HTTPReadTimeout       = 30 * time.Second
	HTTPIdleTimeout       = 120 * time.Second
	// HTTPWriteMargin is added to the server's MaxWait for the write
	// timeout, so a long poll that waited its longest still answers.
	HTTPWriteMargin = 30 * time.Second
	// HTTPMaxHeaderBytes caps a request's headers.
	HTTPMaxHeaderBytes = 16 << 10
)

// NewHTTPServer returns an http.Server on addr serving s with the
// timeouts a fleet server needs against slow or silent clients (the
// Server sets none itself, and net/http's zero values wait forever):
// headers within HTTPReadHeaderTimeout, a whole request within
// HTTPReadTimeout, an answer written within the longest long poll
// (Config.MaxWait) plus HTTPWriteMargin, idle connections closed after
// HTTPIdleTimeout, and headers capped at HTTPMaxHeaderBytes. A program
// that builds its own http.Server must set all of these, with a
// WriteTimeout longer than Config.MaxWait. Add TLS (TLSConfig,
// ListenAndServeTLS) in production: credentials travel in every request.
//
// A long poll of HTTP/1.x that waits leaves net/http: its connection is
// hijacked and parked with no goroutine of its own, and its answer closes
// the connection (the device's next poll opens another). The
// http.Server's Shutdown does not wait for hijacked connections, so
// NewHTTPServer registers, with RegisterOnShutdown, a hook that answers
// every waiting poll at once (304) and any later one without a wait, as
// Server.Close does; a program that builds its own http.Server should
// register s.Close the same way (it also stops the store's watch).
// Long polls over HTTP/2 cannot be hijacked and wait in net/http, which
// Shutdown waits for.
func NewHTTPServer(addr string, s *Server) *http.Server {
	hs := &http.Server{
		Addr:              addr,
		Handler:           s,
		ReadHeaderTimeout: HTTPReadHeaderTimeout,
		ReadTimeout:       HTTPReadTimeout,
		WriteTimeout:      s.cfg.MaxWait + HTTPWriteMargin,
		IdleTimeout:       HTTPIdleTimeout,
		MaxHeaderBytes:    HTTPMaxHeaderBytes,
	}
	hs.RegisterOnShutdown(s.endPolls)
	return hs
}
