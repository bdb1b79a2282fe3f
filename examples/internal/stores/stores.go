// Package stores opens the durable converge.Store an example keeps its
// state in: PostgreSQL when a DSN is given (flag or CONVERGE_PG_DSN), the
// embedded boltstore file otherwise.
package stores

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/pgstore"
)

// DSNEnv is the environment variable an example reads its PostgreSQL DSN
// from when no flag gives one.
const DSNEnv = "CONVERGE_PG_DSN"

// SealKeyEnv is the environment variable holding a hex AES key (16, 24 or
// 32 bytes); when set, stored values and targets are sealed with it.
const SealKeyEnv = "CONVERGE_SEAL_KEY"

// Options says where the state lives.
type Options struct {
	// DSN, when set, selects PostgreSQL.
	DSN string
	// Path is the boltstore file used without a DSN; empty means a new
	// file in a temporary directory, removed by the close function.
	Path string
	// OnCorrupt, when set, is boltstore.Options.OnCorrupt: a damaged
	// boltstore file is moved aside and the example starts with an empty
	// store, told through this function. Nil: a damaged file fails Open.
	OnCorrupt func(boltstore.Recovery)
}

// Store is an open store and what it is, for the example to print.
type Store struct {
	converge.Store // the store; a *pgstore.Store or *boltstore.Store, both converge.Queue
	// Shared is true for a store that several processes share
	// (PostgreSQL): controllers on it should set Config.Owner.
	Shared bool
	// Where says where the state is kept, without secrets.
	Where string
}

// Open opens the store opts names. The returned function closes it (both
// stores' Close return an error, as io.Closer).
func Open(ctx context.Context, opts Options) (*Store, func() error, error) {
	sealer, err := sealerFromEnv()
	if err != nil {
		return nil, nil, err
	}
	if opts.DSN != "" {
		st, err := pgstore.Open(ctx, opts.DSN, pgstore.Options{Sealer: sealer})
		if err != nil {
			return nil, nil, err
		}
		return &Store{Store: st, Shared: true, Where: "PostgreSQL"}, st.Close, nil
	}
	path, cleanup := opts.Path, func() {}
	if path == "" {
		dir, err := os.MkdirTemp("", "converge-example-")
		if err != nil {
			return nil, nil, err
		}
		path = filepath.Join(dir, "state.db")
		cleanup = func() { _ = os.RemoveAll(dir) }
	} else if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, err
	}
	st, err := boltstore.Open(path, boltstore.Options{Sealer: sealer, OnCorrupt: opts.OnCorrupt})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return &Store{Store: st, Where: path}, func() error { defer cleanup(); return st.Close() }, nil
}

func sealerFromEnv() (converge.Sealer, error) {
	h := os.Getenv(SealKeyEnv)
	if h == "" {
		return nil, nil
	}
	key, err := hex.DecodeString(h)
	if err != nil {
		return nil, fmt.Errorf("%s is not hex: %w", SealKeyEnv, err)
	}
	return converge.NewAESGCMSealer(key)
}
