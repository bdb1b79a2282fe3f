package pgstore_test

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
)

// open opens a Store on dsn, closed when the test ends.
func open(t testing.TB, dsn string, opts pgstore.Options) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, dsn, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// query runs sql on a connection of its own and scans the one row.
func query(t testing.TB, dsn, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	if len(dest) == 0 {
		_, err = conn.Exec(ctx, sql, args...)
	} else {
		err = conn.QueryRow(ctx, sql, args...).Scan(dest...)
	}
	require.NoError(t, err, sql)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testSealer is AES-GCM with the key as associated data, in the sealed
// format the converge.Sealer contract asks for (a leading zero byte).
type testSealer struct{ aead cipher.AEAD }

func newTestSealer(t testing.TB) *testSealer {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	block, err := aes.NewCipher(key)
	require.NoError(t, err)
	aead, err := cipher.NewGCM(block)
	require.NoError(t, err)
	return &testSealer{aead: aead}
}

func (s *testSealer) Seal(key string, plain []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	out := append([]byte{0}, nonce...)
	return s.aead.Seal(out, nonce, plain, []byte(key)), nil
}

func (s *testSealer) Open(key string, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != 0 {
		return nil, fmt.Errorf("test sealer: too short: %w", converge.ErrSealed)
	}
	plain, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(key))
	if err != nil {
		return nil, fmt.Errorf("test sealer: %w", converge.ErrSealed)
	}
	return plain, nil
}

// undoMigration6 makes the records of schema indexed as schema version 5
// left them, and forgets migration 6 (and any later one: the column of
// migration 7 stays, which its step adds only when absent).
func undoMigration6(t testing.TB, dsn, schema string) {
	t.Helper()
	query(t, dsn, `DROP INDEX `+schema+`.records_claimed`, nil)
	query(t, dsn, `DROP INDEX `+schema+`.records_due`, nil)
	query(t, dsn, `CREATE INDEX records_due ON `+schema+`.records ((least(due_at, claimed_due)), key)`, nil)
	query(t, dsn, `DELETE FROM `+schema+`.migrations WHERE version >= 6`, nil)
}

// awaitExpired waits until the lease on key in schema has run out by the
// database's clock.
func awaitExpired(t testing.TB, dsn, schema, key string) {
	t.Helper()
	// The condition runs on a goroutine of its own, on a connection of
	// its own: it reports what fails to c, never to t.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if !assert.NoError(c, err) {
			return
		}
		defer conn.Close(ctx)
		var over bool
		assert.NoError(c, conn.QueryRow(ctx, `SELECT expires <= now() FROM `+schema+`.leases WHERE key = $1`, key).Scan(&over))
		assert.True(c, over, "the lease on %s has run out by the database's clock", key)
	}, 10*time.Second, 20*time.Millisecond)
}
