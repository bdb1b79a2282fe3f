package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// silentServer listens on a port, accepts every connection and never
// answers; it returns the port.
func silentServer(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read or written
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// TestOpenSilentServerFailsWithinConnectTimeout: Open against a server
// that accepts and never answers returns a *ConnectError once the connect
// timeout passed, with a context that has no deadline (it hung for ever
// before).
func TestOpenSilentServerFailsWithinConnectTimeout(t *testing.T) {
	tests := []struct {
		name string
		opts pgstore.Options
		want time.Duration
	}{
		{"default", pgstore.Options{}, pgstore.DefaultConnectTimeout},
		{"configured", pgstore.Options{ConnectTimeout: 300 * time.Millisecond}, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			port := silentServer(t)
			dsn := fmt.Sprintf("postgres://alice:s3cret@127.0.0.1:%d/appdb?sslmode=disable", port)
			start := time.Now()
			done := make(chan error, 1)
			go func() {
				_, err := pgstore.Open(context.Background(), dsn, tt.opts)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(tt.want + time.Minute):
				t.Fatalf("Open still waits %s after the connect timeout", time.Minute)
			}
			require.ErrorIs(t, err, pgstore.ErrConnect)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			var ce *pgstore.ConnectError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, uint16(port), ce.Port)
			assert.Contains(t, err.Error(), fmt.Sprintf("no answer within %s", tt.want))
			assert.NotContains(t, err.Error(), "s3cret")
			assert.GreaterOrEqual(t, time.Since(start), tt.want, "not before the timeout")
		})
	}
}

// TestStatementsAreBounded: a store whose server stops answering (a
// blackholed connection) fails each call after the statement timeout,
// with an error matching context.DeadlineExceeded, instead of waiting for
// as long as the context allows.
func TestStatementsAreBounded(t *testing.T) {
	dsn := pgtest.DSN(t)
	p, via := newProxy(t, dsn)
	st := open(t, via, pgstore.Options{StatementTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	_, err := st.Put(ctx, converge.StoreRecord{Key: "k", Value: json.RawMessage(`1`)})
	require.NoError(t, err)

	p.Partition(convergetest.PartitionHang)
	calls := map[string]func() error{
		"Get": func() error { _, err := st.Get(ctx, "k"); return err },
		"Put": func() error {
			_, err := st.Put(ctx, converge.StoreRecord{Key: "k", Version: 1, Value: json.RawMessage(`2`)})
			return err
		},
		"List":     func() error { _, err := st.List(ctx, ""); return err },
		"Claim":    func() error { _, err := st.Claim(ctx, "k", "a", time.Minute); return err },
		"ClaimDue": func() error { _, err := st.ClaimDue(ctx, "", "a", time.Minute, 1); return err },
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		require.ErrorIs(t, err, context.DeadlineExceeded, name)
		assert.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, name)
	}
	// A caller's deadline later than the timeout does not lift it; an
	// earlier one is kept.
	later, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = st.Get(later, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 4*time.Second, "bounded by the statement timeout, not the caller's later deadline")
	earlier, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = st.Get(earlier, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 400*time.Millisecond, "bounded by the caller's earlier deadline")
	p.Partition(convergetest.PartitionNone)
	_, err = st.Get(ctx, "k")
	require.NoError(t, err, "healed: the pool makes new connections")
}
