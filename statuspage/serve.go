package statuspage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// The timeouts of the server ListenAndServe runs: a client that sends its
// request or reads its answer slower than this is cut off, so that slow
// clients cannot hold the program's connections (slowloris).
const (
	ServeReadHeaderTimeout = 10 * time.Second
	ServeReadTimeout       = 30 * time.Second
	ServeWriteTimeout      = 60 * time.Second
	ServeIdleTimeout       = 2 * time.Minute
	// ServeShutdownGrace is how long requests in flight are given to end
	// once ctx is done.
	ServeShutdownGrace = 5 * time.Second
)

// ListenAndServe serves h (the surface Mux returns, say) on the TCP
// address addr until ctx is done, with the Serve* timeouts, then shuts the
// server down, giving requests in flight ServeShutdownGrace, and returns
// nil. It fails at once, naming addr, when it cannot listen there, and
// returns the server's error if it stops serving by itself. A program runs
// it beside its loop, for example in an errgroup sharing ctx.
func ListenAndServe(ctx context.Context, addr string, h http.Handler) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("statuspage: listen on %s: %w", addr, err)
	}
	return serve(ctx, ln, h, serveTimeouts{ServeReadHeaderTimeout, ServeReadTimeout, ServeWriteTimeout, ServeIdleTimeout, ServeShutdownGrace})
}

// serveTimeouts are the Serve* constants, which tests shorten.
type serveTimeouts struct {
	readHeader, read, write, idle, grace time.Duration
}

func serve(ctx context.Context, ln net.Listener, h http.Handler, t serveTimeouts) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.readHeader,
		ReadTimeout:       t.read,
		WriteTimeout:      t.write,
		IdleTimeout:       t.idle,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("statuspage: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.grace)
	defer cancel()
	err := srv.Shutdown(shutdown)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("statuspage: stop serving on %s: %w", ln.Addr(), err)
	}
	return nil
}
