package boltstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/convergekit/converge"
)

// maxKey is the longest key accepted: bbolt's limit minus room for the
// index and history prefixes.
const maxKey = bolt.MaxKeySize - 64

func checkKey(key, field string) error {
	switch {
	case key == "":
		return &converge.StoreRequestError{Key: key, Field: field, Reason: "must not be empty"}
	case len(key) > maxKey:
		return &converge.StoreRequestError{Key: key[:32] + "...", Field: field, Reason: fmt.Sprintf("longer than %d bytes", maxKey)}
	}
	return nil
}

// Associated data of sealed values: records and targets live apart, so
// a value cannot move from one to the other either.
func recordAD(key string) string  { return "record\x00" + key }
func targetAD(name string) string { return "target\x00" + name }

// seal returns what is stored for the JSON document v: v itself, or v
// sealed when the store has a Sealer. The result never aliases v.
func (s *Store) seal(ad string, v []byte) ([]byte, error) {
	if s.sealer == nil {
		return slices.Clone(v), nil
	}
	out, err := s.sealer.Seal(ad, v)
	if err != nil {
		return nil, fmt.Errorf("boltstore: seal: %w", err)
	}
	if len(out) == 0 || out[0] != 0 {
		return nil, errors.New("boltstore: seal: the Sealer returned a value that does not start with a zero byte")
	}
	return out, nil
}

// open returns the JSON document stored as b (which it does not keep). With
// a Sealer it fails closed: a clear value is refused unless AllowClear.
func (s *Store) open(what, ad string, b []byte) (json.RawMessage, error) {
	if len(b) == 0 || b[0] != 0 {
		if s.sealer != nil && !s.clear {
			return nil, fmt.Errorf("boltstore: %s: %w (the store has a Sealer; Options.AllowClear reads clear values while migrating)", what, converge.ErrNotSealed)
		}
		return slices.Clone(b), nil
	}
	if s.sealer == nil {
		return nil, fmt.Errorf("boltstore: %s: %w (the store has no Sealer)", what, converge.ErrSealed)
	}
	v, err := s.sealer.Open(ad, b)
	if err != nil {
		if errors.Is(err, converge.ErrSealed) {
			return nil, fmt.Errorf("boltstore: %s: %w", what, err)
		}
		return nil, fmt.Errorf("boltstore: %s: %w: %w", what, converge.ErrSealed, err)
	}
	return v, nil
}

func notFound(key string) error {
	return fmt.Errorf("boltstore: key %q: %w", key, converge.ErrStoreNotFound)
}

func getRecord(tx *bolt.Tx, key string) (record, bool, error) {
	b := tx.Bucket(bucketRecords).Get([]byte(key))
	if b == nil {
		return record{}, false, nil
	}
	r, err := decodeRecord(key, b)
	return r, err == nil, err
}

func putRecord(tx *bolt.Tx, key string, r *record) error {
	return tx.Bucket(bucketRecords).Put([]byte(key), r.encode(key))
}

func getLease(tx *bolt.Tx, key string) (lease, bool, error) {
	b := tx.Bucket(bucketLeases).Get([]byte(key))
	if b == nil {
		return lease{}, false, nil
	}
	l, err := decodeLease(key, b)
	return l, err == nil, err
}

// setIndex moves the entry of key in the due bucket to where r and its
// lease l (nil: none) put it: at the lease's expiry while leased (a record
// whose owner died is taken over then), else at the due time, else
// nowhere. The caller stores r afterwards.
func setIndex(tx *bolt.Tx, key string, r *record, l *lease) error {
	has, at := r.hasDue, r.due
	if l != nil {
		has, at = true, l.expires
	}
	if r.indexed && (!has || r.index != at) {
		if err := tx.Bucket(bucketDue).Delete(dueKey(r.rank(r.index), key)); err != nil {
			return err
		}
		r.indexed = false
	}
	if has && !r.indexed {
		dk := dueKey(r.rank(at), key)
		if err := tx.Bucket(bucketDue).Put(dk, appendSum(kindDue, string(dk), nil)); err != nil {
			return err
		}
	}
	r.indexed, r.index = has, at
	return nil
}

// encodeHistory marshals entries before a write starts.
func encodeHistory(entries []converge.HistoryEntry) ([][]byte, error) {
	out := make([][]byte, len(entries))
	for i, h := range entries {
		b, err := json.Marshal(h)
		if err != nil {
			return nil, fmt.Errorf("boltstore: history entry %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}

// appendHistory appends the encoded entries to key's history and applies
// the retention.
func (s *Store) appendHistory(tx *bolt.Tx, key string, entries [][]byte, now int64) error {
	if len(entries) == 0 {
		return nil
	}
	hb := tx.Bucket(bucketHistory)
	p := historyPrefix(key)
	first, last, ok := historyBounds(hb, p)
	next := uint64(1)
	if ok {
		next = last + 1
	} else {
		first = 1
	}
	for _, e := range entries {
		hk := historyKey(p, next)
		if err := hb.Put(hk, appendSum(kindHistory, string(hk), slices.Clip(e))); err != nil {
			return err
		}
		next++
	}
	count := next - first
	if s.keep > 0 && count > uint64(s.keep) {
		for ; count > uint64(s.keep); count-- {
			if err := hb.Delete(historyKey(p, first)); err != nil {
				return err
			}
			first++
		}
	}
	if s.maxAge <= 0 || count <= 1 {
		return nil
	}
	// Drop the oldest entries past their age, never the newest one.
	cutoff := now - int64(s.maxAge)
	var drop [][]byte
	c := hb.Cursor()
	for k, v := c.Seek(p); k != nil && count > 1 && bytes.HasPrefix(k, p); k, v = c.Next() {
		h, err := decodeHistory(key, k, v)
		if err != nil {
			return err
		}
		if nanos(h.At) >= cutoff {
			break
		}
		drop = append(drop, slices.Clone(k))
		count--
	}
	for _, k := range drop {
		if err := hb.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// historyBounds returns the first and last sequence numbers of the history
// under prefix p, which are contiguous: entries are only ever dropped from
// the front.
func historyBounds(hb *bolt.Bucket, p []byte) (first, last uint64, ok bool) {
	c := hb.Cursor()
	k, _ := c.Seek(p)
	if k == nil || !bytes.HasPrefix(k, p) || len(k) != len(p)+8 {
		return 0, 0, false
	}
	first = seqOf(k)
	k, _ = c.Seek(historyKey(p, ^uint64(0)))
	if k == nil {
		k, _ = c.Last()
	} else if !bytes.Equal(k, historyKey(p, ^uint64(0))) {
		k, _ = c.Prev()
	}
	return first, seqOf(k), true
}

// decodeHistory decodes the history entry of key stored as k, v.
func decodeHistory(key string, k, v []byte) (converge.HistoryEntry, error) {
	var h converge.HistoryEntry
	body, ok := checkSum(kindHistory, string(k), v)
	if !ok {
		return h, corrupt("history of %q: checksum mismatch", key)
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return h, corrupt("history of %q: %v", key, err)
	}
	return h, nil
}

func seqOf(k []byte) uint64 {
	var s uint64
	for _, b := range k[len(k)-8:] {
		s = s<<8 | uint64(b)
	}
	return s
}

// Get implements converge.Store.
func (s *Store) Get(ctx context.Context, key string) (converge.StoreRecord, error) {
	var out converge.StoreRecord
	var stored []byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		r, ok, err := getRecord(tx, key)
		if err != nil {
			return err
		}
		if !ok {
			return notFound(key)
		}
		out = converge.StoreRecord{Key: key, Version: r.version}
		stored = slices.Clone(r.value)
		return nil
	})
	if err != nil {
		return converge.StoreRecord{}, s.readError("get", key, err)
	}
	if out.Value, err = s.open(fmt.Sprintf("record %q", key), recordAD(key), stored); err != nil {
		return converge.StoreRecord{}, err
	}
	return out, nil
}

// readError passes through the errors a read reports on purpose.
func (s *Store) readError(what, key string, err error) error {
	if errors.Is(err, converge.ErrStoreNotFound) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return s.dbError(fmt.Sprintf("%s %q", what, key), err)
}

// Put implements converge.Store. A record created by Put is due at once
// (see converge.Queue), with priority 0; writing it again keeps its due
// time and priority. With a Sealer, the value is sealed before it is
// written.
func (s *Store) Put(ctx context.Context, rec converge.StoreRecord, history ...converge.HistoryEntry) (uint64, error) {
	return s.put(ctx, rec, -1, history)
}

// PutPriority implements converge.Prioritizer: Put, and the record's
// priority set in the same transaction (its due bucket entry moved to
// its new rank).
func (s *Store) PutPriority(ctx context.Context, rec converge.StoreRecord, priority int, history ...converge.HistoryEntry) (uint64, error) {
	if err := converge.CheckPriority(rec.Key, priority); err != nil {
		return 0, err
	}
	return s.put(ctx, rec, priority, history)
}

// Priority implements converge.Prioritizer.
func (s *Store) Priority(ctx context.Context, key string) (int, error) {
	var prio int
	err := s.view(ctx, func(tx *bolt.Tx) error {
		r, ok, err := getRecord(tx, key)
		if err != nil {
			return err
		}
		if !ok {
			return notFound(key)
		}
		prio = r.prio
		return nil
	})
	if err != nil {
		return 0, s.readError("priority of", key, err)
	}
	return prio, nil
}

// put writes rec, and sets its priority unless priority is negative.
func (s *Store) put(ctx context.Context, rec converge.StoreRecord, priority int, history []converge.HistoryEntry) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := checkKey(rec.Key, "Key"); err != nil {
		return 0, err
	}
	if !json.Valid(rec.Value) {
		return 0, &converge.StoreRequestError{Key: rec.Key, Field: "Value", Reason: "not valid JSON"}
	}
	value, err := s.seal(recordAD(rec.Key), rec.Value)
	if err != nil {
		return 0, err
	}
	hist, err := encodeHistory(history)
	if err != nil {
		return 0, err
	}
	now := nanos(s.now())
	var version uint64
	var refused error
	err = s.update(func(tx *bolt.Tx) error {
		version, refused = 0, nil
		cur, ok, err := getRecord(tx, rec.Key)
		if err != nil {
			return err
		}
		if cur.version != rec.Version || (!ok && rec.Version != 0) {
			refused = &converge.StoreVersionError{Key: rec.Key, Want: rec.Version, Have: cur.version}
			return nil
		}
		if rec.Token != 0 {
			l, held, err := getLease(tx, rec.Key)
			if err != nil {
				return err
			}
			if !held || l.token != rec.Token || now >= l.expires {
				refused = fmt.Errorf("boltstore: put %q with lease token %d: %w", rec.Key, rec.Token, converge.ErrLeaseLost)
				return nil
			}
		}
		next := cur
		next.version = cur.version + 1
		next.value = value
		if ok && priority >= 0 && priority != next.prio {
			// Move the due bucket entry to the new rank.
			if next.indexed {
				if err := tx.Bucket(bucketDue).Delete(dueKey(next.rank(next.index), rec.Key)); err != nil {
					return err
				}
				next.prio = priority
				dk := dueKey(next.rank(next.index), rec.Key)
				if err := tx.Bucket(bucketDue).Put(dk, appendSum(kindDue, string(dk), nil)); err != nil {
					return err
				}
			}
			next.prio = priority
		}
		if !ok {
			next = record{version: 1, value: value, hasDue: true, due: now, prio: max(priority, 0)}
			l, held, err := getLease(tx, rec.Key)
			if err != nil {
				return err
			}
			lp := &l
			if !held {
				lp = nil
			}
			if err := setIndex(tx, rec.Key, &next, lp); err != nil {
				return err
			}
		}
		if err := putRecord(tx, rec.Key, &next); err != nil {
			return err
		}
		if err := s.appendHistory(tx, rec.Key, hist, now); err != nil {
			return err
		}
		version = next.version
		return nil
	})
	if err != nil {
		return 0, s.dbError(fmt.Sprintf("put %q", rec.Key), err)
	}
	if refused != nil {
		return 0, refused
	}
	s.notify(rec.Key)
	return version, nil
}

// Delete implements converge.Store. A lease on the key is kept.
func (s *Store) Delete(ctx context.Context, key string, version uint64, history ...converge.HistoryEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkKey(key, "key"); err != nil {
		return err
	}
	hist, err := encodeHistory(history)
	if err != nil {
		return err
	}
	now := nanos(s.now())
	var refused error
	err = s.update(func(tx *bolt.Tx) error {
		refused = nil
		cur, ok, err := getRecord(tx, key)
		if err != nil {
			return err
		}
		switch {
		case !ok:
			refused = notFound(key)
			return nil
		case cur.version != version:
			refused = &converge.StoreVersionError{Key: key, Want: version, Have: cur.version}
			return nil
		}
		if cur.indexed {
			if err := tx.Bucket(bucketDue).Delete(dueKey(cur.rank(cur.index), key)); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketRecords).Delete([]byte(key)); err != nil {
			return err
		}
		return s.appendHistory(tx, key, hist, now)
	})
	if err != nil {
		return s.dbError(fmt.Sprintf("delete %q", key), err)
	}
	if refused != nil {
		return refused
	}
	s.notify(key)
	return nil
}

// List implements converge.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]converge.StoreRecord, error) {
	var out []converge.StoreRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = out[:0]
		p := []byte(prefix)
		c := tx.Bucket(bucketRecords).Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			r, err := decodeRecord(string(k), v)
			if err != nil {
				return err
			}
			out = append(out, converge.StoreRecord{Key: string(k), Version: r.version, Value: slices.Clone(r.value)})
		}
		return nil
	})
	if err != nil {
		return nil, s.readError("list", prefix, err)
	}
	if out == nil {
		out = []converge.StoreRecord{}
	}
	for i := range out {
		if out[i].Value, err = s.open(fmt.Sprintf("record %q", out[i].Key), recordAD(out[i].Key), out[i].Value); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// History implements converge.Store.
func (s *Store) History(ctx context.Context, key string) ([]converge.HistoryEntry, error) {
	out := []converge.HistoryEntry{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = out[:0]
		p := historyPrefix(key)
		c := tx.Bucket(bucketHistory).Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			h, err := decodeHistory(key, k, v)
			if err != nil {
				return err
			}
			out = append(out, h)
		}
		return nil
	})
	if err != nil {
		return nil, s.readError("history", key, err)
	}
	return out, nil
}

// PutTarget implements converge.Store. With a Sealer, the target is sealed
// before it is written; its revision is not.
func (s *Store) PutTarget(ctx context.Context, name string, tgt json.RawMessage) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := checkKey(name, "name"); err != nil {
		return 0, err
	}
	var value []byte
	if len(tgt) > 0 {
		if !json.Valid(tgt) {
			return 0, &converge.StoreRequestError{Key: name, Field: "target", Reason: "not valid JSON"}
		}
		var err error
		if value, err = s.seal(targetAD(name), tgt); err != nil {
			return 0, err
		}
	}
	var rev uint64
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTargets)
		var cur target
		if v := b.Get([]byte(name)); v != nil {
			var err error
			if cur, err = storedTarget(name, v); err != nil {
				return err
			}
		}
		cur.last++
		if value != nil {
			cur.rev, cur.hasValue, cur.value = cur.last, true, value
		}
		rev = cur.last
		return b.Put([]byte(name), appendSum(kindTarget, name, cur.encode()))
	})
	if err != nil {
		return 0, s.dbError(fmt.Sprintf("put target %q", name), err)
	}
	return rev, nil
}

// Target implements converge.Store.
func (s *Store) Target(ctx context.Context, name string) (json.RawMessage, uint64, error) {
	var stored []byte
	var rev uint64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketTargets).Get([]byte(name))
		if v == nil {
			return fmt.Errorf("boltstore: target %q: %w", name, converge.ErrStoreNotFound)
		}
		t, err := storedTarget(name, v)
		if err != nil {
			return err
		}
		if !t.hasValue {
			return fmt.Errorf("boltstore: target %q: %w", name, converge.ErrStoreNotFound)
		}
		stored, rev = slices.Clone(t.value), t.rev
		return nil
	})
	if err != nil {
		return nil, 0, s.readError("target", name, err)
	}
	v, err := s.open(fmt.Sprintf("target %q", name), targetAD(name), stored)
	if err != nil {
		return nil, 0, err
	}
	return v, rev, nil
}
