package convergetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// createManyRecords is how many records the "create many" rule creates in
// one call, besides its small cases.
const createManyRecords = 500

// createMany checks converge.Creator.CreateMany (rules "create many",
// "create many: exists", "create many: invalid").
func (c *storeConformer) createMany(cr converge.Creator) {
	const rule = "create many"
	prefix := c.k("many/")
	if v, err := cr.CreateMany(c.ctx, nil); err != nil || len(v) != 0 {
		c.fail(rule, "no records: want no versions and no error, got %v, %v", v, err)
	}
	recs := make([]converge.NewRecord, createManyRecords)
	for i := range recs {
		recs[i] = converge.NewRecord{
			Key:     fmt.Sprintf("%sr%04d", prefix, i),
			Value:   []byte(fmt.Sprintf(`{"n":%d}`, i)),
			History: []converge.HistoryEntry{c.h(1, "added"), c.h(2, fmt.Sprint(i))},
		}
	}
	recs[1].History = nil
	versions, err := cr.CreateMany(c.ctx, recs)
	if err != nil || len(versions) != len(recs) {
		c.fail(rule, "create %d records: want %d versions, got %d, %v", len(recs), len(recs), len(versions), err)
		return
	}
	for _, i := range []int{0, 1, len(recs) - 1} {
		r := recs[i]
		got, err := c.s.Get(c.ctx, r.Key)
		if err != nil || got.Version != versions[i] || !jsonEqual(got.Value, string(r.Value)) {
			c.fail(rule, "get %q: want version %d %s, got %d %s, %v", r.Key, versions[i], r.Value, got.Version, got.Value, err)
		}
		if hist, err := c.s.History(c.ctx, r.Key); err != nil || !historyEqual(hist, c.kept(r.History)) {
			c.fail(rule, "history of %q: want %v, got %v, %v", r.Key, r.History, hist, err)
		}
	}
	if listed, err := c.s.List(c.ctx, prefix); err != nil || len(listed) != len(recs) {
		c.fail(rule, "list: want %d records, got %d, %v", len(recs), len(listed), err)
	}
	if c.q != nil {
		got, ok := c.claimDue(rule, prefix, "owner-many", len(recs)+1)
		if ok && len(got) != len(recs) {
			c.fail(rule, "want every created record due at once, %d claimed of %d", len(got), len(recs))
		}
	}
	c.createManyExists(cr, prefix)
	c.createManyInvalid(cr, prefix)
	c.createManyAgain(cr, prefix)
}

// createManyAgain checks that a record created again after a Delete
// keeps its older history, with retention applied to old and new.
func (c *storeConformer) createManyAgain(cr converge.Creator, prefix string) {
	const rule = "create many: again"
	key := prefix + "z/again"
	var old []converge.HistoryEntry
	n := c.opts.Retention.Entries // more than retention keeps, or a few
	switch {
	case n == 0:
		n = converge.DefaultHistoryEntries
	case n < 0:
		n = 3
	}
	for i := range n + 2 {
		old = append(old, c.h(i, fmt.Sprint("old-", i)))
	}
	v, ok := c.put(rule, key, 0, `1`, old[:len(old)-1]...)
	if !ok {
		return
	}
	if err := c.s.Delete(c.ctx, key, v, old[len(old)-1]); err != nil {
		c.fail(rule, "delete: %v", err)
		return
	}
	added := []converge.HistoryEntry{c.h(len(old), "new-1"), c.h(len(old)+1, "new-2")}
	if _, err := cr.CreateMany(c.ctx, []converge.NewRecord{{Key: key, Value: []byte(`2`), History: added}}); err != nil {
		c.fail(rule, "create again: %v", err)
		return
	}
	want := c.kept(append(old, added...))
	if hist, err := c.s.History(c.ctx, key); err != nil || !historyEqual(hist, want) {
		c.fail(rule, "want the newest %d entries, old and new, got %d: %v, %v", len(want), len(hist), hist, err)
	}
}

// createManyExists checks that a batch with stored keys names them all and
// writes nothing.
func (c *storeConformer) createManyExists(cr converge.Creator, prefix string) {
	const rule = "create many: exists"
	fresh := []string{prefix + "x/new-1", prefix + "x/new-2"}
	batch := []converge.NewRecord{
		{Key: fresh[0], Value: []byte(`1`), History: []converge.HistoryEntry{c.h(1, "added")}},
		{Key: prefix + "r0003", Value: []byte(`2`)},
		{Key: fresh[1], Value: []byte(`3`)},
		{Key: prefix + "r0002", Value: []byte(`4`)},
	}
	_, err := cr.CreateMany(c.ctx, batch)
	var ee *converge.StoreExistsError
	switch {
	case !errors.As(err, &ee) || !errors.Is(err, converge.ErrStoreExists) || !errors.Is(err, converge.ErrStoreStale):
		c.fail(rule, "want a *StoreExistsError matching ErrStoreExists and ErrStoreStale, got %v", err)
	case !slices.Equal(ee.Keys, []string{prefix + "r0002", prefix + "r0003"}):
		c.fail(rule, "want the stored keys named, sorted, got %q", ee.Keys)
	case strings.Count(err.Error(), "r0002") != 1:
		c.fail(rule, "want each stored key named once in %q", err)
	}
	c.wroteNothing(rule, fresh, prefix+"r0003", `{"n":3}`)
}

// wroteNothing checks that none of fresh is stored nor has history, and
// that the stored record key still holds value.
func (c *storeConformer) wroteNothing(rule string, fresh []string, key, value string) {
	for _, k := range fresh {
		if _, err := c.s.Get(c.ctx, k); !errors.Is(err, converge.ErrStoreNotFound) {
			c.fail(rule, "%q: want nothing written, got %v", k, err)
		}
		if hist, err := c.s.History(c.ctx, k); err != nil || len(hist) != 0 {
			c.fail(rule, "%q: want no history written, got %v, %v", k, hist, err)
		}
	}
	if key == "" {
		return
	}
	if got, err := c.s.Get(c.ctx, key); err != nil || !jsonEqual(got.Value, value) {
		c.fail(rule, "%q: want %s kept, got %s, %v", key, value, got.Value, err)
	}
}

// createManyInvalid checks that an invalid record fails the whole batch
// with a *StoreRequestError naming it.
func (c *storeConformer) createManyInvalid(cr converge.Creator, prefix string) {
	const rule = "create many: invalid"
	good := converge.NewRecord{Key: prefix + "y/good", Value: []byte(`1`), History: []converge.HistoryEntry{c.h(1, "added")}}
	for _, tc := range []struct {
		name string
		bad  converge.NewRecord
		key  string
	}{
		{"empty key", converge.NewRecord{Value: []byte(`1`)}, ""},
		{"key twice", good, good.Key},
		{"value not JSON", converge.NewRecord{Key: prefix + "y/bad", Value: []byte(`{`)}, prefix + "y/bad"},
	} {
		_, err := cr.CreateMany(c.ctx, []converge.NewRecord{good, tc.bad})
		var re *converge.StoreRequestError
		if !errors.As(err, &re) || !errors.Is(err, converge.ErrStoreInvalid) || re.Key != tc.key {
			c.fail(rule, "%s: want a *StoreRequestError naming %q, got %v", tc.name, tc.key, err)
		}
		c.wroteNothing(rule, []string{good.Key, prefix + "y/bad"}, "", "")
	}
}

// queueDue checks Claimed.Due (rule "queue: claim due time"): a record
// scheduled at a time in the past is claimed with that time as its due
// time, to the microsecond.
func (c *storeConformer) queueDue() {
	const rule = "queue: claim due time"
	prefix := c.k("qdue/")
	key := prefix + "a"
	if _, ok := c.put(rule, key, 0, `1`); !ok {
		return
	}
	at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	if err := c.q.Schedule(c.ctx, key, at); err != nil {
		c.fail(rule, "schedule: %v", err)
		return
	}
	got, ok := c.claimDue(rule, prefix, "owner-due", 10)
	switch {
	case !ok:
	case len(got) != 1:
		c.fail(rule, "want the record claimed, got %d records", len(got))
	case !got[0].Due.Equal(at):
		c.fail(rule, "want Due %s, the time it was scheduled at, got %s", at, got[0].Due)
	}
}
