package converge

import (
	"context"
	"sort"
)

// TargetLister is the optional ability of a Store to name its targets:
// tools that show a store (convergectl targets) find it by type assertion.
// MemStore, boltstore and pgstore have it.
type TargetLister interface {
	// TargetNames returns the names that have a target (Store.Target finds
	// it), sorted. A name whose PutTarget stored no target is left out.
	TargetNames(ctx context.Context) ([]string, error)
}

var _ TargetLister = (*MemStore)(nil)

// TargetNames implements TargetLister.
func (s *MemStore) TargetNames(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	names := make([]string, 0, len(s.targets))
	for name, t := range s.targets {
		if t.value != nil {
			names = append(names, name)
		}
	}
	s.mu.RUnlock()
	sort.Strings(names)
	return names, nil
}
