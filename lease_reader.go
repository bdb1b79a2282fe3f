package converge

import (
	"context"
	"slices"
	"strings"
)

// LeaseReader is a Store that tells who holds the lease on a key now,
// without claiming it: for views that must change nothing, such as the
// slots of a controller's limits in use on the status page and in
// convergectl. MemStore, boltstore and pgstore have it.
type LeaseReader interface {
	// Holder returns the lease on key and true when one is held now, by
	// the store's clock, and false when none is: never claimed, released
	// or expired.
	Holder(ctx context.Context, key string) (Lease, bool, error)
	// Leases returns the leases held now, by the store's clock, on the
	// keys that start with prefix, sorted by key.
	Leases(ctx context.Context, prefix string) ([]Lease, error)
}

var _ LeaseReader = (*MemStore)(nil)

// Holder implements LeaseReader.
func (s *MemStore) Holder(ctx context.Context, key string) (Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, false, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, held := s.leases[key]
	if !held || !now.Before(cur.Expires) {
		return Lease{}, false, nil
	}
	return cur, true, nil
}

// Leases implements LeaseReader.
func (s *MemStore) Leases(ctx context.Context, prefix string) ([]Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.now()
	s.mu.Lock()
	var out []Lease
	for k, l := range s.leases {
		if strings.HasPrefix(k, prefix) && now.Before(l.Expires) {
			out = append(out, l)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Lease) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
