package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/convergekit/converge"
)

// Ref names an object of a kind: what an object watches (Object.Watches).
type Ref struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
}

// String returns "kind/key", the object's key in the store.
func (r Ref) String() string { return r.Kind + "/" + r.Key }

// SetWatches makes the stored object of kind under key in store (a
// converge.Linker) watch the objects of watched, replacing what it
// watched (none: it stops watching): from then on, every transition of
// one of them (a state change, its addition, its deletion) makes the
// object due at once, in the same write as the transition, so that
// whichever replica holds it runs its handler, without waiting for the
// periodic pass. A watched object need not exist yet. The object
// (Object.Watches) and the store's links change in one write, read again
// when someone wrote in between; setting what it watches already writes
// nothing. It fails with an *ObjectError: ErrObjectNotFound when key is
// not stored, ErrObjectInvalid for an empty key, a kind that is empty or
// holds '/', a nil store, a store that keeps no links, or a watched
// object with an empty kind or key, a kind holding '/', or the object
// itself.
func SetWatches(ctx context.Context, store converge.Store, kind, key string, watched []Ref) error {
	objErr := func(err error) error { return &ObjectError{Kind: kind, Key: key, Err: err} }
	invalid := func(why string) error { return objErr(fmt.Errorf("%w: %s", ErrObjectInvalid, why)) }
	switch {
	case kind == "" || strings.Contains(kind, "/"):
		return invalid("the kind must not be empty nor contain '/'")
	case store == nil:
		return invalid("nil store")
	case key == "":
		return invalid("empty key")
	}
	lk, ok := store.(converge.Linker)
	if !ok {
		return invalid(fmt.Sprintf("store %T keeps no links between objects (it does not implement converge.Linker)", store))
	}
	refs := slices.Clone(watched)
	slices.SortFunc(refs, func(a, b Ref) int { return strings.Compare(a.String(), b.String()) })
	refs = slices.Compact(refs)
	keys := make([]string, len(refs))
	for i, r := range refs {
		switch {
		case r.Kind == "" || strings.Contains(r.Kind, "/"):
			return invalid(fmt.Sprintf("watched[%d]: the kind must not be empty nor contain '/'", i))
		case r.Key == "":
			return invalid(fmt.Sprintf("watched[%d]: empty key", i))
		case r.Kind == kind && r.Key == key:
			return invalid("an object cannot watch itself")
		}
		keys[i] = r.String()
	}
	if len(refs) == 0 {
		refs = nil
	}
	rkey := kind + "/" + key
	for {
		rec, err := store.Get(ctx, rkey)
		if errors.Is(err, converge.ErrStoreNotFound) {
			return objErr(ErrObjectNotFound)
		}
		if err != nil {
			return objErr(err)
		}
		obj, err := decodeObject(rec, kind+"/")
		if err != nil {
			return objErr(err)
		}
		if slices.Equal(obj.Watches, refs) {
			return nil
		}
		obj.Watches = refs
		b, err := json.Marshal(obj)
		if err != nil {
			return objErr(err)
		}
		_, err = lk.PutWatching(ctx, converge.StoreRecord{Key: rkey, Version: rec.Version, Value: b}, keys)
		switch {
		case errors.Is(err, converge.ErrStoreStale):
			continue // someone wrote in between: read again
		case errors.Is(err, converge.ErrStoreNotFound):
			return objErr(ErrObjectNotFound)
		case err != nil:
			return objErr(err)
		}
		return nil
	}
}

// SetWatches makes the object key watch the objects of watched as the
// package's SetWatches does, in the controller's store.
func (c *Controller) SetWatches(ctx context.Context, key string, watched []Ref) error {
	return SetWatches(ctx, c.cfg.Store, c.cfg.Kind, key, watched)
}
