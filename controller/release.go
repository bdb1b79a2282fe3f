package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// Reasons of the history entries a Controller stores besides the
// transitions its handler makes (whose Reason is the handler's). An entry
// for a halt or a breach goes from the object's state to the same state,
// its Reason starts with one of these, and its By is empty; a release's
// By names who released the object.
const (
	// ReasonQuarantined starts the entry of a quarantine (see
	// Config.QuarantineAfter), followed by ": " and the last error.
	ReasonQuarantined = "quarantined"
	// ReasonTerminal starts the entry of a halt by a terminal error (see
	// Terminal), followed by ": " and the error.
	ReasonTerminal = "terminal error"
	// ReasonAboveSLA starts the entry of an object found above its
	// state's SLA (see Config.SLA), followed by " " and the SLA.
	ReasonAboveSLA = "above SLA"
	// ReasonReleased is the entry of a release (Release,
	// Controller.ReleaseBy).
	ReasonReleased = "released"
)

// Release wakes the stored object of kind under key in store that was
// halted, by a quarantine or by a terminal error, without a Controller at
// hand (an operator's command line, a page in another process): the halt
// is cleared, its count of failures in a row (Object.Retries) starts again
// from zero, and its history gets an entry with Reason ReasonReleased and
// By by, the identity of who released it ("" for the program itself), in
// the same write. Releasing an object that is not halted does nothing and
// stores nothing.
//
// A Controller of kind on the same store runs the object again: replicas
// sharing a converge.Queue (Config.Owner set) at once, since Release makes
// the object due in the store when the store is a Queue; a controller on
// its own when it lists the store next (Config.Resync). Controller.ReleaseBy
// does the same and also queues the object in that controller at once.
//
// It fails with an *ObjectError: ErrObjectNotFound for a key that is not
// stored, ErrObjectInvalid for an empty key, a kind that is empty or holds
// '/', or a nil store, or the store's error. The entry is stamped with
// time.Now.
func Release(ctx context.Context, store converge.Store, kind, key, by string) error {
	_, err := release(ctx, store, kind, key, by, time.Now())
	return err
}

// release clears the halt of the object of kind under key at now, as
// Release does, and reports whether there was one.
func release(ctx context.Context, store converge.Store, kind, key, by string, now time.Time) (bool, error) {
	return changeHalt(ctx, store, kind, key, now, func(obj *Object) (converge.HistoryEntry, bool) {
		if obj.Halted == "" {
			return converge.HistoryEntry{}, false
		}
		obj.Halted, obj.Retries = "", 0
		return converge.HistoryEntry{At: now, From: string(obj.State), To: string(obj.State), Reason: ReasonReleased, By: by}, true
	})
}

// changeHalt changes the halt of the stored object of kind under key, by
// hand (Release, Cancel): it reads the object, lets change modify it and
// name the history entry of the change (false: nothing to change), and
// stores both in one write, reading again when someone wrote in
// between; then, when the store is a converge.Queue, it makes the object
// due at now, which the store's watch announces to the replicas. It
// reports whether it stored a change, and fails with an *ObjectError as
// Release does.
func changeHalt(ctx context.Context, store converge.Store, kind, key string, now time.Time, change func(*Object) (converge.HistoryEntry, bool)) (bool, error) {
	objErr := func(err error) error { return &ObjectError{Kind: kind, Key: key, Err: err} }
	invalid := func(why string) error { return objErr(fmt.Errorf("%w: %s", ErrObjectInvalid, why)) }
	switch {
	case kind == "" || strings.Contains(kind, "/"):
		return false, invalid("the kind must not be empty nor contain '/'")
	case store == nil:
		return false, invalid("nil store")
	case key == "":
		return false, invalid("empty key")
	}
	rkey := kind + "/" + key
	for {
		rec, err := store.Get(ctx, rkey)
		if errors.Is(err, converge.ErrStoreNotFound) {
			return false, objErr(ErrObjectNotFound)
		}
		if err != nil {
			return false, objErr(err)
		}
		obj, err := decodeObject(rec, kind+"/")
		if err != nil {
			return false, objErr(err)
		}
		h, changed := change(obj)
		if !changed {
			return false, nil
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return false, objErr(err)
		}
		_, err = store.Put(ctx, converge.StoreRecord{Key: rkey, Version: rec.Version, Value: b}, h)
		if errors.Is(err, converge.ErrStoreStale) {
			continue // someone wrote in between: read again
		}
		if err != nil {
			return false, objErr(err)
		}
		break
	}
	if q, ok := store.(converge.Queue); ok {
		if err := q.Schedule(ctx, rkey, now); err != nil {
			if errors.Is(err, converge.ErrStoreNotFound) {
				err = ErrObjectNotFound // deleted since
			}
			return true, objErr(err)
		}
	}
	return true, nil
}
