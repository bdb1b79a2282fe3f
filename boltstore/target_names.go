package boltstore

import (
	"context"
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/convergekit/converge"
)

var _ converge.TargetLister = (*Store)(nil)

// TargetNames implements converge.TargetLister: the names with a target,
// sorted. A damaged entry fails it with ErrCorrupt.
func (s *Store) TargetNames(ctx context.Context) ([]string, error) {
	names := []string{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTargets).ForEach(func(k, v []byte) error {
			name := string(k)
			t, err := storedTarget(name, v)
			if err != nil {
				return err
			}
			if t.hasValue {
				names = append(names, name)
			}
			return nil
		})
	})
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	if err != nil {
		return nil, s.dbError("target names", err)
	}
	return names, nil
}

// storedTarget decodes the entry v of the target name, checking its
// checksum first.
func storedTarget(name string, v []byte) (target, error) {
	body, ok := checkSum(kindTarget, name, v)
	if !ok {
		return target{}, corrupt("target %q: checksum mismatch", name)
	}
	return decodeTarget(name, body)
}
