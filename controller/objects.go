package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// AddObject stores a new object of kind under key in store, in state with
// data (nil for none), its history starting with an entry into state:
// what Controller.Add stores, without a Controller, so that a program
// that only feeds objects (an API server, a seeding step, a test) needs no
// handler. It fails with an *ObjectError: ErrObjectExists when key is
// stored already, ErrObjectInvalid for an empty key or state, data that is
// not JSON, a kind that is empty or holds '/', or a nil store.
//
// A Controller of kind on the same store handles the object once it sees
// it: a replica sharing a converge.Queue (Config.Owner set) claims it as
// soon as it is due, which a new record is at once; a controller on its
// own sees it when it lists the store, at Run and at every periodic pass
// (Config.Resync). Object.Since and the history entry are stamped with
// time.Now.
func AddObject(ctx context.Context, store converge.Store, kind, key string, state State, data json.RawMessage) error {
	_, err := addObject(ctx, store, kind, key, state, data, time.Now())
	return err
}

// addObject stores a new object as AddObject does, at now, and returns it
// with its version.
func addObject(ctx context.Context, store converge.Store, kind, key string, state State, data json.RawMessage, now time.Time) (*Object, error) {
	invalid := func(why string) error {
		return &ObjectError{Kind: kind, Key: key, Err: fmt.Errorf("%w: %s", ErrObjectInvalid, why)}
	}
	switch {
	case kind == "" || strings.Contains(kind, "/"):
		return nil, invalid("the kind must not be empty nor contain '/'")
	case store == nil:
		return nil, invalid("nil store")
	case key == "":
		return nil, invalid("empty key")
	case state == "":
		return nil, invalid("empty state")
	case data != nil && !json.Valid(data):
		return nil, invalid("data is not valid JSON")
	}
	obj := &Object{Key: key, State: state, Since: now, Data: slices.Clone(data)}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, &ObjectError{Kind: kind, Key: key, Err: err}
	}
	v, err := store.Put(ctx, converge.StoreRecord{Key: kind + "/" + key, Value: b},
		converge.HistoryEntry{At: now, To: string(state), Reason: "added"})
	if errors.Is(err, converge.ErrStoreStale) {
		return nil, &ObjectError{Kind: kind, Key: key, Err: ErrObjectExists}
	}
	if err != nil {
		return nil, &ObjectError{Kind: kind, Key: key, Err: err}
	}
	obj.Version = v
	return obj, nil
}

// StoredObjects reads the stored objects of the controller's kind, sorted
// by key: what every replica and earlier run left, as it is now (Objects
// returns this controller's own view, without reading the store). A record
// under the kind that does not decode fails the call, naming it.
func (c *Controller) StoredObjects(ctx context.Context) ([]Object, error) {
	recs, err := c.cfg.Store.List(ctx, c.prefix)
	if err != nil {
		return nil, fmt.Errorf("controller: list %s: %w", c.cfg.Kind, err)
	}
	out := make([]Object, 0, len(recs))
	for _, rec := range recs {
		obj, err := c.decode(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, *obj)
	}
	return out, nil
}
