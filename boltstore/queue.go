package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/convergekit/converge"
)

func checkClaim(key, owner string, ttl time.Duration) error {
	if err := checkKey(key, "key"); err != nil {
		return err
	}
	switch {
	case owner == "":
		return &converge.StoreRequestError{Key: key, Field: "owner", Reason: "must not be empty"}
	case ttl <= 0:
		return &converge.StoreRequestError{Key: key, Field: "ttl", Reason: fmt.Sprintf("must be positive, got %s", ttl)}
	}
	return nil
}

func leaseLost(l converge.Lease) error {
	return fmt.Errorf("boltstore: lease on %q by %q (token %d): %w", l.Key, l.Owner, l.Token, converge.ErrLeaseLost)
}

// take gives key to owner until expires in tx, as a new lease (new token)
// unless renew holds the current one. A record under key stops being due:
// its due time is saved in the lease (Release gives it back), and it is
// indexed at the lease's expiry, when it is taken over if nobody
// finished it.
func take(tx *bolt.Tx, key, owner string, expires int64, cur lease, held, renew bool) (lease, error) {
	l := lease{owner: owner, expires: expires, token: cur.token, hasSaved: cur.hasSaved, saved: cur.saved}
	r, isRecord, err := getRecord(tx, key)
	if err != nil {
		return lease{}, err
	}
	if !renew {
		tok, err := tx.Bucket(bucketLeases).NextSequence()
		if err != nil {
			return lease{}, err
		}
		l.token = tok
		if !held {
			l.hasSaved = false
		}
		if isRecord {
			l.hasSaved, l.saved = earliest(l.hasSaved, l.saved, r.hasDue, r.due)
			r.hasDue, r.due = false, 0
		}
	}
	if err := tx.Bucket(bucketLeases).Put([]byte(key), l.encode(key)); err != nil {
		return lease{}, err
	}
	if isRecord {
		if err := setIndex(tx, key, &r, &l); err != nil {
			return lease{}, err
		}
		if err := putRecord(tx, key, &r); err != nil {
			return lease{}, err
		}
	}
	return l, nil
}

// Claim implements converge.Store. Tokens come from one counter kept in
// the file, so they keep increasing across releases and restarts. Claiming
// a record takes it out of the queue until the lease is finished, released
// or expires (see converge.Queue).
func (s *Store) Claim(ctx context.Context, key, owner string, ttl time.Duration) (converge.Lease, error) {
	if err := ctx.Err(); err != nil {
		return converge.Lease{}, err
	}
	if err := checkClaim(key, owner, ttl); err != nil {
		return converge.Lease{}, err
	}
	now := s.now()
	expires := nanos(now.Add(ttl))
	var out lease
	var refused error
	err := s.update(func(tx *bolt.Tx) error {
		out, refused = lease{}, nil
		cur, held, err := getLease(tx, key)
		if err != nil {
			return err
		}
		live := held && nanos(now) < cur.expires
		if live && cur.owner != owner {
			refused = &converge.ClaimError{Key: key, Owner: owner, Holder: cur.owner, Expires: fromNanos(cur.expires)}
			return nil
		}
		out, err = take(tx, key, owner, expires, cur, held, live)
		return err
	})
	if err != nil {
		return converge.Lease{}, s.dbError(fmt.Sprintf("claim %q", key), err)
	}
	if refused != nil {
		return converge.Lease{}, refused
	}
	return out.public(key), nil
}

// end ends the lease l in tx and returns whether it was the current one;
// when expired is set, a lease past that time is not current either.
// A record under its key becomes due at the earliest of its due time
// (Schedule while leased), next (when hasNext) and, when restore is set,
// the due time it had when claimed.
func end(tx *bolt.Tx, l converge.Lease, hasNext bool, next int64, restore bool, expired *int64) (bool, error) {
	cur, held, err := getLease(tx, l.Key)
	if err != nil {
		return false, err
	}
	if !held || cur.token != l.Token || cur.owner != l.Owner || (expired != nil && *expired >= cur.expires) {
		return false, nil
	}
	if err := tx.Bucket(bucketLeases).Delete([]byte(l.Key)); err != nil {
		return false, err
	}
	r, isRecord, err := getRecord(tx, l.Key)
	if err != nil || !isRecord {
		return true, err
	}
	r.hasDue, r.due = earliest(r.hasDue, r.due, hasNext, next)
	if restore {
		r.hasDue, r.due = earliest(r.hasDue, r.due, cur.hasSaved, cur.saved)
	}
	if err := setIndex(tx, l.Key, &r, nil); err != nil {
		return false, err
	}
	return true, putRecord(tx, l.Key, &r)
}

// Release implements converge.Store. A record under the lease's key gets
// back the due time it had when it was claimed (or an earlier one given by
// Schedule meanwhile); Finish is the call that says the work is done.
func (s *Store) Release(ctx context.Context, l converge.Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var current bool
	err := s.update(func(tx *bolt.Tx) (err error) {
		current, err = end(tx, l, false, 0, true, nil)
		return err
	})
	if err != nil {
		return s.dbError(fmt.Sprintf("release %q", l.Key), err)
	}
	if !current {
		return leaseLost(l)
	}
	s.notify(l.Key)
	return nil
}

// Finish implements converge.Queue. A lease that expired is no longer
// current, even when nobody took the key since: the work it covered may be
// under way elsewhere.
func (s *Store) Finish(ctx context.Context, l converge.Lease, next time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := nanos(s.now())
	var current bool
	err := s.update(func(tx *bolt.Tx) (err error) {
		current, err = end(tx, l, !next.IsZero(), nanos(next), false, &now)
		return err
	})
	if err != nil {
		return s.dbError(fmt.Sprintf("finish %q", l.Key), err)
	}
	if !current {
		return leaseLost(l)
	}
	s.notify(l.Key)
	return nil
}

// Schedule implements converge.Queue.
func (s *Store) Schedule(ctx context.Context, key string, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkKey(key, "key"); err != nil {
		return err
	}
	var refused error
	err := s.update(func(tx *bolt.Tx) error {
		refused = nil
		r, ok, err := getRecord(tx, key)
		if err != nil {
			return err
		}
		if !ok {
			refused = notFound(key)
			return nil
		}
		l, held, err := getLease(tx, key)
		if err != nil {
			return err
		}
		lp := &l
		if !held {
			lp = nil
		}
		r.hasDue, r.due = earliest(r.hasDue, r.due, true, nanos(at))
		if err := setIndex(tx, key, &r, lp); err != nil {
			return err
		}
		return putRecord(tx, key, &r)
	})
	if err != nil {
		return s.dbError(fmt.Sprintf("schedule %q", key), err)
	}
	if refused != nil {
		return refused
	}
	s.notify(key)
	return nil
}

// ClaimDue implements converge.Queue and converge.Prioritizer. It walks
// the due records in the order of their rank (the due time less the
// priority's worth, see converge.PriorityStep); a record whose lease
// expired is due at the lease's expiry, ranked by its priority too. Claims are serialized by the file's single writer, so no
// two calls ever take the same record.
func (s *Store) ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]converge.Claimed, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch {
	case owner == "":
		return nil, &converge.StoreRequestError{Key: prefix, Field: "owner", Reason: "must not be empty"}
	case ttl <= 0:
		return nil, &converge.StoreRequestError{Key: prefix, Field: "ttl", Reason: fmt.Sprintf("must be positive, got %s", ttl)}
	case limit <= 0:
		return nil, &converge.StoreRequestError{Key: prefix, Field: "limit", Reason: fmt.Sprintf("must be positive, got %d", limit)}
	}
	now := s.now()
	nowN, expires := nanos(now), nanos(now.Add(ttl))
	type taken struct {
		key     string
		version uint64
		value   []byte
		lease   lease
		held    bool
		history []converge.HistoryEntry
		due     int64
	}
	var out []taken
	var refused error
	err := s.update(func(tx *bolt.Tx) error {
		out, refused = out[:0], nil
		p := []byte(prefix)
		c := tx.Bucket(bucketDue).Cursor()
		for k, v := c.First(); k != nil && len(out) < limit; k, v = c.Next() {
			if _, ok := checkSum(kindDue, string(k), v); !ok || len(k) <= 8 {
				return corrupt("due index entry %q: checksum mismatch", k)
			}
			if dueTime(k) > nowN {
				break // a rank is never after its index time
			}
			if !bytes.HasPrefix(k[8:], p) {
				continue
			}
			key := string(k[8:])
			cur, held, err := getLease(tx, key)
			if err != nil {
				return err
			}
			if held && nowN < cur.expires {
				continue // indexed at its expiry: not reached yet
			}
			r, ok, err := getRecord(tx, key)
			if err != nil {
				return err
			}
			if !ok {
				return corrupt("due index names %q, which is not stored", key)
			}
			if r.index > nowN {
				continue // ranked by now by its priority, but not due yet
			}
			// Open before anything is written: a value that cannot be
			// opened fails the call with nothing claimed.
			v, err := s.open(fmt.Sprintf("record %q", key), recordAD(key), r.value)
			if err != nil {
				refused = err
				return nil
			}
			h, err := historyTail(tx, key)
			if err != nil {
				return err
			}
			out = append(out, taken{key: key, version: r.version, value: v, lease: cur, held: held, history: h, due: r.index})
		}
		// Claim after the walk: writing to a bucket moves its cursors.
		for i := range out {
			l, err := take(tx, out[i].key, owner, expires, out[i].lease, out[i].held, false)
			if err != nil {
				return err
			}
			out[i].lease = l
		}
		return nil
	})
	if err != nil {
		return nil, s.dbError(fmt.Sprintf("claim due under %q", prefix), err)
	}
	if refused != nil {
		return nil, refused
	}
	claimed := make([]converge.Claimed, 0, len(out))
	for _, t := range out {
		claimed = append(claimed, converge.Claimed{
			Record:     converge.StoreRecord{Key: t.key, Version: t.version, Value: t.value},
			Lease:      t.lease.public(t.key),
			History:    t.history,
			HasHistory: true,
			Due:        dueAt(t.due),
		})
	}
	return claimed, nil
}

// historyTail returns the newest converge.ClaimHistoryEntries history
// entries of key, oldest first, never nil: it walks the key's history
// backwards from its end.
func historyTail(tx *bolt.Tx, key string) ([]converge.HistoryEntry, error) {
	p := historyPrefix(key)
	c := tx.Bucket(bucketHistory).Cursor()
	// The first key after the key's entries (a prefix and a sequence
	// number of 8 bytes), or the bucket's end.
	k, v := c.Seek(append(historyKey(p, math.MaxUint64), 0))
	if k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	out := []converge.HistoryEntry{}
	for ; k != nil && bytes.HasPrefix(k, p) && len(out) < converge.ClaimHistoryEntries; k, v = c.Prev() {
		h, err := decodeHistory(key, k, v)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	slices.Reverse(out)
	return out, nil
}

// dueAt is the time of the due index's nanoseconds n; the zero time for
// the earliest (a record due since "at once").
func dueAt(n int64) time.Time {
	if n == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
