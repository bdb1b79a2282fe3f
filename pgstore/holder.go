package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/convergekit/converge"
)

var _ converge.LeaseReader = (*Store)(nil)

// Holder implements converge.LeaseReader: the live lease on key, by the
// database's clock, read without claiming it (a read-only session answers
// it).
func (s *Store) Holder(ctx context.Context, key string) (converge.Lease, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkText(key, "key", key); err != nil {
		return converge.Lease{}, false, err
	}
	l := converge.Lease{Key: key}
	var token int64
	var free bool
	err := s.pool.QueryRow(ctx, `SELECT owner, expires, token, owner = '' OR expires <= clock_timestamp() FROM `+pgx.Identifier{s.schema}.Sanitize()+`.leases WHERE key = $1`, key).Scan(&l.Owner, &l.Expires, &token, &free)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return converge.Lease{}, false, nil
	case err != nil:
		return converge.Lease{}, false, s.dbError("read the lease", key, err)
	case free:
		return converge.Lease{}, false, nil
	}
	l.Token = uint64(token)
	return l, true, nil
}

// Leases implements converge.LeaseReader: the live leases on the keys
// under prefix, by the database's clock, sorted by key.
func (s *Store) Leases(ctx context.Context, prefix string) ([]converge.Lease, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkText(prefix, "prefix", prefix); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT key, owner, expires, token FROM `+pgx.Identifier{s.schema}.Sanitize()+`.leases
		WHERE key >= $1 AND starts_with(key, $1) AND owner <> '' AND expires > clock_timestamp() ORDER BY key`, prefix)
	if err != nil {
		return nil, s.dbError("read the leases", prefix, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (converge.Lease, error) {
		var l converge.Lease
		var token int64
		err := r.Scan(&l.Key, &l.Owner, &l.Expires, &token)
		l.Token = uint64(token)
		return l, err
	})
	if err != nil {
		return nil, s.dbError("read the leases", prefix, err)
	}
	return out, nil
}
