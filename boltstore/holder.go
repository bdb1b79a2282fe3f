package boltstore

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/convergekit/converge"
)

var _ converge.LeaseReader = (*Store)(nil)

// Holder implements converge.LeaseReader: the live lease on key, by the
// store's clock, read without claiming it (a read-only store answers it).
func (s *Store) Holder(ctx context.Context, key string) (converge.Lease, bool, error) {
	now := nanos(s.now())
	var out converge.Lease
	var live bool
	err := s.view(ctx, func(tx *bolt.Tx) error {
		cur, held, err := getLease(tx, key)
		if err != nil {
			return err
		}
		live = held && cur.owner != "" && now < cur.expires
		if live {
			out = cur.public(key)
		}
		return nil
	})
	if err != nil {
		return converge.Lease{}, false, s.dbError(fmt.Sprintf("read the lease of %q", key), err)
	}
	return out, live, nil
}

// Leases implements converge.LeaseReader: the live leases on the keys
// under prefix, by the store's clock, sorted by key.
func (s *Store) Leases(ctx context.Context, prefix string) ([]converge.Lease, error) {
	now := nanos(s.now())
	var out []converge.Lease
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = nil
		c := tx.Bucket(bucketLeases).Cursor()
		for k, v := c.Seek([]byte(prefix)); k != nil && bytes.HasPrefix(k, []byte(prefix)); k, v = c.Next() {
			l, err := decodeLease(string(k), v)
			if err != nil {
				return err
			}
			if l.owner != "" && now < l.expires {
				out = append(out, l.public(string(k)))
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.dbError(fmt.Sprintf("read the leases under %q", prefix), err)
	}
	return out, nil
}
