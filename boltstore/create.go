package boltstore

import (
	"context"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/convergekit/converge"
)

var _ converge.Creator = (*Store)(nil)

// CreateMany implements converge.Creator in one transaction: every record
// (sealed first, with a Sealer) and its history, or nothing. Each new
// record is due at once.
func (s *Store) CreateMany(ctx context.Context, recs []converge.NewRecord) ([]uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := converge.CheckNewRecords(recs); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return []uint64{}, nil
	}
	values := make([][]byte, len(recs))
	hists := make([][][]byte, len(recs))
	for i, r := range recs {
		if err := checkKey(r.Key, fmt.Sprintf("recs[%d].Key", i)); err != nil {
			return nil, err
		}
		v, err := s.seal(recordAD(r.Key), r.Value)
		if err != nil {
			return nil, err
		}
		h, err := encodeHistory(r.History)
		if err != nil {
			return nil, err
		}
		values[i], hists[i] = v, h
	}
	now := nanos(s.now())
	var refused error
	err := s.update(func(tx *bolt.Tx) error {
		refused = nil
		var exist []string
		for _, r := range recs {
			_, ok, err := getRecord(tx, r.Key)
			if err != nil {
				return err
			}
			if ok {
				exist = append(exist, r.Key)
			}
		}
		if len(exist) > 0 {
			slices.Sort(exist)
			refused = &converge.StoreExistsError{Keys: exist}
			return nil // nothing written
		}
		for i, r := range recs {
			next := record{version: 1, value: values[i], hasDue: true, due: now, prio: r.Priority}
			l, held, err := getLease(tx, r.Key)
			if err != nil {
				return err
			}
			lp := &l
			if !held {
				lp = nil
			}
			if err := setIndex(tx, r.Key, &next, lp); err != nil {
				return err
			}
			if err := putRecord(tx, r.Key, &next); err != nil {
				return err
			}
			if err := s.appendHistory(tx, r.Key, hists[i], now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.dbError(fmt.Sprintf("create %d records from %q", len(recs), recs[0].Key), err)
	}
	if refused != nil {
		return nil, refused
	}
	versions := make([]uint64, len(recs))
	for i, r := range recs {
		versions[i] = 1
		s.notify(r.Key)
	}
	return versions, nil
}
