package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/convergekit/converge"
)

var _ converge.TargetLister = (*Store)(nil)

// TargetNames implements converge.TargetLister: the names with a target,
// sorted (bytewise, as PostgreSQL's "C" collation sorts).
func (s *Store) TargetNames(ctx context.Context) ([]string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT name FROM `+pgx.Identifier{s.schema}.Sanitize()+`.targets WHERE value IS NOT NULL ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, s.dbError("list targets", "", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.dbError("list targets", "", err)
	}
	if names == nil {
		names = []string{}
	}
	return names, nil
}
