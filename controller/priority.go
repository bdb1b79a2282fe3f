package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/convergekit/converge"
)

// checkPriority says why an object of priority cannot be stored in
// store, or returns "".
func checkPriority(store converge.Store, priority int) string {
	if priority < 0 || priority > converge.MaxPriority {
		return fmt.Sprintf("priority %d is not between 0 and %d", priority, converge.MaxPriority)
	}
	if _, ok := store.(converge.Prioritizer); !ok && priority != 0 {
		return fmt.Sprintf("store %T keeps no priorities (it does not implement converge.Prioritizer)", store)
	}
	return ""
}

// AddObject stores the new object obj as the package's AddObject does,
// with its priority (NewObject.Priority), and queues it when the
// controller runs. It fails as AddObject does, and with ErrObjectInvalid
// for a priority out of range or one other than 0 in a store that keeps
// none.
func (c *Controller) AddObject(ctx context.Context, obj NewObject) error {
	o, err := addPrioritized(ctx, c.cfg.Store, obj, c.cfg.Kind, c.now())
	if err != nil {
		return err
	}
	c.adopt(o, true)
	return nil
}

// SetPriority changes the priority of the stored object of kind under key
// in store (a converge.Prioritizer) to priority: the stored object
// (Object.Priority) and the store's order of claims change in one write,
// read again when someone wrote in between. The object's due time stays
// as it is: a due object is claimed in its new place, and one that is
// not due is not made due. Setting the priority it has writes nothing.
// It fails with an *ObjectError: ErrObjectNotFound when key is not
// stored, ErrObjectInvalid for an empty key, a kind that is empty or
// holds '/', a nil store, a store that keeps no priorities, or a priority
// outside 0..converge.MaxPriority.
func SetPriority(ctx context.Context, store converge.Store, kind, key string, priority int) error {
	_, err := setPriority(ctx, store, kind, key, priority)
	return err
}

// setPriority changes the priority as SetPriority does, and returns the
// object as stored, with its version (nil when it wrote nothing).
func setPriority(ctx context.Context, store converge.Store, kind, key string, priority int) (*Object, error) {
	objErr := func(err error) error { return &ObjectError{Kind: kind, Key: key, Err: err} }
	invalid := func(why string) error { return objErr(fmt.Errorf("%w: %s", ErrObjectInvalid, why)) }
	switch {
	case kind == "" || strings.Contains(kind, "/"):
		return nil, invalid("the kind must not be empty nor contain '/'")
	case store == nil:
		return nil, invalid("nil store")
	case key == "":
		return nil, invalid("empty key")
	}
	pq, ok := store.(converge.Prioritizer)
	if !ok {
		return nil, invalid(fmt.Sprintf("store %T keeps no priorities (it does not implement converge.Prioritizer)", store))
	}
	if why := checkPriority(store, priority); why != "" {
		return nil, invalid(why)
	}
	rkey := kind + "/" + key
	for {
		rec, err := store.Get(ctx, rkey)
		if errors.Is(err, converge.ErrStoreNotFound) {
			return nil, objErr(ErrObjectNotFound)
		}
		if err != nil {
			return nil, objErr(err)
		}
		obj, err := decodeObject(rec, kind+"/")
		if err != nil {
			return nil, objErr(err)
		}
		if obj.Priority == priority {
			return nil, nil
		}
		obj.Priority = priority
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, objErr(err)
		}
		v, err := pq.PutPriority(ctx, converge.StoreRecord{Key: rkey, Version: rec.Version, Value: b}, priority)
		if errors.Is(err, converge.ErrStoreStale) {
			continue // someone wrote in between: read again
		}
		if errors.Is(err, converge.ErrStoreNotFound) {
			return nil, objErr(ErrObjectNotFound)
		}
		if err != nil {
			return nil, objErr(err)
		}
		obj.Version = v
		return obj, nil
	}
}

// SetPriority changes the priority of the object key as the package's
// SetPriority does, in the controller's store. The controller's view
// (Get, Objects) shows the new priority once it reads the object again,
// at its next run or periodic pass; the store orders claims by it at
// once.
func (c *Controller) SetPriority(ctx context.Context, key string, priority int) error {
	obj, err := setPriority(ctx, c.cfg.Store, c.cfg.Kind, key, priority)
	if err != nil || obj == nil {
		return err
	}
	c.adopt(obj, false)
	return nil
}
