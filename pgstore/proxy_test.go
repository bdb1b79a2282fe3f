package pgstore_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/convergetest"
)

// newProxy starts a convergetest.Proxy between one replica and the
// database server of dsn, the real-world partition, and returns it with
// the DSN that goes through it; it is closed when the test ends.
func newProxy(t testing.TB, dsn string) (*convergetest.Proxy, string) {
	t.Helper()
	p, via := newProxyNoCleanup(dsn)
	require.NotNil(t, p, via)
	t.Cleanup(func() { _ = p.Close() })
	return p, via
}

// newProxyNoCleanup starts a convergetest.Proxy to the server of dsn and
// returns it with the DSN that goes through it; the caller closes it. On
// failure it returns nil and the error's text.
func newProxyNoCleanup(dsn string) (*convergetest.Proxy, string) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err.Error()
	}
	p, err := convergetest.NewProxy(u.Host)
	if err != nil {
		return nil, err.Error()
	}
	u.Host = p.Addr()
	return p, u.String()
}
