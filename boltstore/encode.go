package boltstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/convergekit/converge"
)

// Layout of format version 1. Integers are big-endian.
//
//	records  key -> tag 1, flags, version u64, due i64, index i64, value
//	leases   key -> tag 1, flags, token u64, expires i64, saved i64, owner
//	due      index i64 (sign bit flipped, so it sorts) + key -> empty
//	history  uvarint(len(key)) + key + seq u64 -> JSON HistoryEntry
//	targets  name -> tag 1, flags, revision u64, last u64, value
//
// Times are Unix nanoseconds. A value (record or target) starting with a
// zero byte is sealed (see converge.Sealer); anything else is clear JSON.
// A target's revision is the one PutTarget gave its value; last is the
// last revision taken for the name (a PutTarget without a target takes one
// and keeps the value, which is absent until a target is stored). A target
// entry that starts with anything but the tag is a bare value written
// before revisions were kept: it reads as revision 1.

const (
	recordTag  = 1
	leaseTag   = 1
	recordHead = 2 + 8 + 8 + 8
	leaseHead  = 2 + 8 + 8 + 8

	targetTag  = 1
	targetHead = 2 + 8 + 8

	flagDue     = 1 << 0 // record: due holds a due time
	flagIndexed = 1 << 1 // record: the due bucket holds index+key
	flagSaved   = 1 << 0 // lease: saved holds the record's due time at claim
	flagValue   = 1 << 0 // target: a value follows the head
)

// target is a decoded entry of the targets bucket. value aliases the
// transaction's memory.
type target struct {
	rev      uint64 // of value
	last     uint64 // last revision taken for the name
	hasValue bool
	value    []byte
}

func (t *target) encode() []byte {
	b := make([]byte, targetHead, targetHead+len(t.value))
	b[0] = targetTag
	if t.hasValue {
		b[1] |= flagValue
	}
	binary.BigEndian.PutUint64(b[2:], t.rev)
	binary.BigEndian.PutUint64(b[10:], t.last)
	return append(b, t.value...)
}

func decodeTarget(name string, b []byte) (target, error) {
	switch {
	case len(b) == 0:
		return target{}, fmt.Errorf("%w: target %q", ErrCorrupt, name)
	case b[0] != targetTag:
		// A bare value, sealed or JSON, from before revisions were kept.
		return target{rev: 1, last: 1, hasValue: true, value: b}, nil
	case len(b) < targetHead:
		return target{}, fmt.Errorf("%w: target %q", ErrCorrupt, name)
	}
	t := target{
		rev:      binary.BigEndian.Uint64(b[2:]),
		last:     binary.BigEndian.Uint64(b[10:]),
		hasValue: b[1]&flagValue != 0,
		value:    b[targetHead:],
	}
	if t.last == 0 || t.rev > t.last || t.hasValue != (t.rev > 0) || t.hasValue != (len(t.value) > 0) {
		return target{}, fmt.Errorf("%w: target %q", ErrCorrupt, name)
	}
	return t, nil
}

// record is a decoded entry of the records bucket. value aliases the
// transaction's memory.
type record struct {
	version uint64
	hasDue  bool
	due     int64
	indexed bool
	index   int64
	value   []byte
}

func (r *record) encode() []byte {
	b := make([]byte, recordHead, recordHead+len(r.value))
	b[0] = recordTag
	if r.hasDue {
		b[1] |= flagDue
	}
	if r.indexed {
		b[1] |= flagIndexed
	}
	binary.BigEndian.PutUint64(b[2:], r.version)
	binary.BigEndian.PutUint64(b[10:], uint64(r.due))
	binary.BigEndian.PutUint64(b[18:], uint64(r.index))
	return append(b, r.value...)
}

func decodeRecord(key string, b []byte) (record, error) {
	if len(b) < recordHead || b[0] != recordTag {
		return record{}, fmt.Errorf("%w: record %q", ErrCorrupt, key)
	}
	return record{
		version: binary.BigEndian.Uint64(b[2:]),
		hasDue:  b[1]&flagDue != 0,
		due:     int64(binary.BigEndian.Uint64(b[10:])),
		indexed: b[1]&flagIndexed != 0,
		index:   int64(binary.BigEndian.Uint64(b[18:])),
		value:   b[recordHead:],
	}, nil
}

// lease is a decoded entry of the leases bucket.
type lease struct {
	token    uint64
	expires  int64
	hasSaved bool
	saved    int64 // the record's due time when the lease was taken
	owner    string
}

func (l *lease) encode() []byte {
	b := make([]byte, leaseHead, leaseHead+len(l.owner))
	b[0] = leaseTag
	if l.hasSaved {
		b[1] |= flagSaved
	}
	binary.BigEndian.PutUint64(b[2:], l.token)
	binary.BigEndian.PutUint64(b[10:], uint64(l.expires))
	binary.BigEndian.PutUint64(b[18:], uint64(l.saved))
	return append(b, l.owner...)
}

func decodeLease(key string, b []byte) (lease, error) {
	if len(b) < leaseHead || b[0] != leaseTag {
		return lease{}, fmt.Errorf("%w: lease on %q", ErrCorrupt, key)
	}
	return lease{
		token:    binary.BigEndian.Uint64(b[2:]),
		expires:  int64(binary.BigEndian.Uint64(b[10:])),
		hasSaved: b[1]&flagSaved != 0,
		saved:    int64(binary.BigEndian.Uint64(b[18:])),
		owner:    string(b[leaseHead:]),
	}, nil
}

func (l *lease) public(key string) converge.Lease {
	return converge.Lease{Key: key, Owner: l.owner, Expires: fromNanos(l.expires), Token: l.token}
}

// nanos turns t into Unix nanoseconds, clamping times out of range (the
// zero time among them) to the ends of the range.
func nanos(t time.Time) int64 {
	switch {
	case t.Year() < 1700:
		return math.MinInt64
	case t.Year() > 2200:
		return math.MaxInt64
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time { return time.Unix(0, n) }

// dueKey is the key of the due bucket for key indexed at t.
func dueKey(t int64, key string) []byte {
	b := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(b, uint64(t)^(1<<63))
	return append(b, key...)
}

func dueTime(k []byte) int64 { return int64(binary.BigEndian.Uint64(k) ^ (1 << 63)) }

// historyPrefix is what every history key of key starts with. The length
// first makes it prefix-free: no other key's entries start with it.
func historyPrefix(key string) []byte {
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(key)+8), uint64(len(key)))
	return append(b, key...)
}

func historyKey(prefix []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(prefix)+8), prefix...), seq)
}

// earliest returns the earlier of two optional times.
func earliest(hasA bool, a int64, hasB bool, b int64) (bool, int64) {
	switch {
	case !hasA:
		return hasB, b
	case !hasB:
		return hasA, a
	}
	return true, min(a, b)
}
