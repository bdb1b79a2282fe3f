package convergetest

import (
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/convergekit/converge"
)

// links runs the rules of a converge.Linker.
func (c *storeConformer) links(l converge.Linker) {
	const rule = "queue: watches"
	a, b, other := c.k("qlink/a"), c.k("qlink/b"), c.k("qlink/other")
	prefix := c.k("qlink/")
	va, ok := c.put(rule, a, 0, `0`)
	if !ok {
		return
	}
	vb, ok := c.put(rule, b, 0, `0`, converge.HistoryEntry{At: c.fresh, To: "new"})
	if !ok {
		return
	}
	va, err := l.PutWatching(c.ctx, converge.StoreRecord{Key: a, Version: va, Value: json.RawMessage(`1`)}, []string{b, other, b})
	if err != nil {
		c.fail(rule, "put watching: %v", err)
		return
	}
	if got, err := l.Watching(c.ctx, a); err != nil || !slices.Equal(got, []string{b, other}) {
		c.fail(rule, "watching: want [%s %s] (sorted, once each), got %v, %v", b, other, got, err)
	}
	c.expectClaimed(rule, "the new records", prefix, "owner-a", 10, []string{"qlink/a", "qlink/b"}, true)

	// A write of b that records no transition wakes nobody.
	if vb, ok = c.put(rule, b, vb, `1`, converge.HistoryEntry{At: c.fresh, From: "new", To: "new", Reason: "waiting"}); !ok {
		return
	}
	c.expectClaimed(rule, "after a write without a transition", prefix, "owner-a", 10, nil, true)
	// A transition of b makes a due, in the same write.
	if vb, ok = c.put(rule, b, vb, `2`, converge.HistoryEntry{At: c.fresh, From: "new", To: "ready"}); !ok {
		return
	}
	c.expectClaimed(rule, "after a transition of the watched record", prefix, "owner-a", 10, []string{"qlink/a"}, true)

	// A transition while a is claimed makes it due once it is finished.
	if err := l.Schedule(c.ctx, a, time.Now().Add(-time.Second)); err != nil {
		c.fail(rule, "schedule: %v", err)
		return
	}
	claimed := c.expectClaimed(rule, "a scheduled", prefix, "owner-a", 10, []string{"qlink/a"}, false)
	if vb, ok = c.put(rule, b, vb, `3`, converge.HistoryEntry{At: c.fresh, From: "ready", To: "broken"}); !ok {
		return
	}
	c.expectClaimed(rule, "a held by its claim", prefix, "owner-b", 10, nil, true)
	c.finishAll(rule, claimed)
	c.expectClaimed(rule, "a after its claim finished", prefix, "owner-a", 10, []string{"qlink/a"}, true)

	// The deletion of b is a transition.
	if err := l.Delete(c.ctx, b, vb, converge.HistoryEntry{At: c.fresh, From: "broken"}); err != nil {
		c.fail(rule, "delete: %v", err)
		return
	}
	c.expectClaimed(rule, "after the watched record was deleted", prefix, "owner-a", 10, []string{"qlink/a"}, true)
	// So is its creation.
	if _, ok = c.put(rule, b, 0, `4`, converge.HistoryEntry{At: c.fresh, To: "new"}); !ok {
		return
	}
	c.expectClaimed(rule, "after the watched record was created again", prefix, "owner-a", 10, []string{"qlink/a", "qlink/b"}, true)

	// Bad input writes nothing.
	for _, bad := range [][]string{{a}, {""}} {
		_, err := l.PutWatching(c.ctx, converge.StoreRecord{Key: a, Version: va, Value: json.RawMessage(`9`)}, bad)
		var re *converge.StoreRequestError
		if !errors.As(err, &re) || re.Field != "watched" || re.Key != a {
			c.fail(rule, "watching %q: want a *converge.StoreRequestError on field watched naming %q, got %v", bad, a, err)
		}
	}
	// Watching nothing stops it; Delete drops what it watched.
	if va, err = l.PutWatching(c.ctx, converge.StoreRecord{Key: a, Version: va, Value: json.RawMessage(`2`)}, nil); err != nil {
		c.fail(rule, "put watching nothing: %v", err)
		return
	}
	if got, err := l.Watching(c.ctx, a); err != nil || len(got) != 0 {
		c.fail(rule, "watching after watching nothing: want none, got %v, %v", got, err)
	}
	if _, err = l.PutWatching(c.ctx, converge.StoreRecord{Key: a, Version: va, Value: json.RawMessage(`3`)}, []string{b}); err != nil {
		c.fail(rule, "put watching: %v", err)
		return
	}
	if err := l.Delete(c.ctx, a, va+1); err != nil {
		c.fail(rule, "delete the watcher: %v", err)
		return
	}
	if got, err := l.Watching(c.ctx, a); err != nil || len(got) != 0 {
		c.fail(rule, "watching after Delete: want none, got %v, %v", got, err)
	}
}
