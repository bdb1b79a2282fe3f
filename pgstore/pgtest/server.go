package pgtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultStartTimeout bounds the wait for a new cluster to accept
// connections when Options.StartTimeout is 0.
const DefaultStartTimeout = 60 * time.Second

// ErrServerClosed means the Server was closed (CreateDatabase after
// Close).
var ErrServerClosed = errors.New("pgtest: server is closed")

// Options tunes Start. The zero value starts a cluster with the programs
// found on PATH or under /usr/lib/postgresql/*/bin, in a new directory
// under os.TempDir, waiting DefaultStartTimeout at most for it.
type Options struct {
	// Bin is the directory holding initdb and postgres; empty means look
	// them up on PATH, then under /usr/lib/postgresql/*/bin (the newest
	// version first).
	Bin string
	// Dir is where the cluster's directory is made (data, the unix socket
	// and postgres.log); empty means os.TempDir. Run as root, the server
	// runs as the user postgres, who must be able to reach Dir.
	Dir string
	// Settings are server settings passed as postgres -c name=value, after
	// pgtest's own (fsync on, 300 connections, 32MB of shared buffers), so
	// they may override them.
	Settings map[string]string
	// StartTimeout bounds the wait for the server to accept connections;
	// 0 means DefaultStartTimeout.
	StartTimeout time.Duration
}

// Server is a throw-away PostgreSQL cluster started by Start, for programs
// that are not tests (an integration program, a demo) and for tests that
// want a cluster of their own. It runs until Close; on Linux it is also
// killed if the program dies. Its methods are safe for concurrent use.
type Server struct {
	c *cluster

	mu     sync.Mutex
	closed bool
}

// Start runs initdb into a new temporary directory and starts postgres on
// a free loopback port (its unix socket in that directory, fsync on), as
// DSN does for tests, and returns once it accepts connections. Root runs
// it as the user postgres, since initdb and postgres refuse root. Without
// the programs it fails with an error matching ErrNoPostgres; when ctx
// ends first, with ctx's error, leaving no server and no directory behind.
// The caller must Close the Server.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.StartTimeout < 0 {
		return nil, fmt.Errorf("pgtest: StartTimeout must not be negative, got %s", opts.StartTimeout)
	}
	c, err := start(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Server{c: c}, nil
}

// DSN returns the DSN (a postgres:// URL) of the server's maintenance
// database "postgres", as the superuser postgres (trust authentication,
// loopback only).
func (s *Server) DSN() string { return s.c.dsn }

// Dir returns the cluster's directory: data, the unix socket and
// postgres.log, removed by Close.
func (s *Server) Dir() string { return s.c.dir }

// CreateDatabase creates a fresh, empty database with a random name and
// returns its DSN. It lives until Close.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return "", ErrServerClosed
	}
	name := "db_" + randomHex(8)
	if err := admin(ctx, s.c.dsn, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return withDatabase(s.c.dsn, name)
}

// Close stops the server (a fast shutdown, then a kill after 20 s) and
// removes its directory. A second Close returns nil.
func (s *Server) Close() error {
	s.mu.Lock()
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if closed {
		return nil
	}
	return s.c.stop()
}
