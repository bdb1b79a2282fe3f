package boltstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"
	"unsafe"

	"github.com/convergekit/converge"
)

// Layout of format version 2. Integers are big-endian.
//
//	records  key -> tag 2, flags, version u64, due i64, index i64, [priority u32,] value, sum
//	leases   key -> tag 2, flags, token u64, expires i64, saved i64, owner, sum
//	due      rank i64 (sign bit flipped, so it sorts) + key -> sum
//	history  uvarint(len(key)) + key + seq u64 -> JSON HistoryEntry, sum
//	targets  name -> tag 1, flags, revision u64, last u64, value, sum
//	meta     "format" -> the format version in decimal
//
// Times are Unix nanoseconds. A value (record or target) starting with a
// zero byte is sealed (see converge.Sealer); anything else is clear JSON.
// Every sum is the CRC-32C (Castagnoli) of the entry's kind, its key and
// the bytes before the sum (see entrySum): an entry whose bytes, key
// included, changed on the disk fails its sum and is reported as
// ErrCorrupt rather than read. The sum covers the stored bytes as they are,
// sealed or not.
//
// A record's priority (converge.Prioritizer) follows its head when it is
// not 0, with flagPriority set; a record without the flag, as every
// record written before priorities were kept, has priority 0. The due
// bucket orders a record by its rank: its index time less its priority's
// worth (converge.PriorityRank), which is the index time itself for
// priority 0, so files written before priorities were kept are read as
// they are.
//
// Format version 1 had the same layout without the sums (and tag 1 for
// records and leases); Open upgrades such a file in place (see migrate).
//
// A target's revision is the one PutTarget gave its value; last is the
// last revision taken for the name (a PutTarget without a target takes one
// and keeps the value, which is absent until a target is stored). A target
// entry (before its sum) that starts with anything but the tag is a bare
// value written before revisions were kept: it reads as revision 1.

const (
	recordTag  = 2
	leaseTag   = 2
	recordHead = 2 + 8 + 8 + 8
	leaseHead  = 2 + 8 + 8 + 8
	sumSize    = 4

	targetTag  = 1
	targetHead = 2 + 8 + 8

	flagDue      = 1 << 0 // record: due holds a due time
	flagIndexed  = 1 << 1 // record: the due bucket holds rank+key
	flagPriority = 1 << 2 // record: a priority u32 follows the head
	flagSaved    = 1 << 0 // lease: saved holds the record's due time at claim
	flagValue    = 1 << 0 // target: a value follows the head
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
		return target{}, corrupt("target %q: bad entry", name)
	case b[0] != targetTag:
		// A bare value, sealed or JSON, from before revisions were kept.
		return target{rev: 1, last: 1, hasValue: true, value: b}, nil
	case len(b) < targetHead:
		return target{}, corrupt("target %q: bad entry", name)
	}
	t := target{
		rev:      binary.BigEndian.Uint64(b[2:]),
		last:     binary.BigEndian.Uint64(b[10:]),
		hasValue: b[1]&flagValue != 0,
		value:    b[targetHead:],
	}
	if t.last == 0 || t.rev > t.last || t.hasValue != (t.rev > 0) || t.hasValue != (len(t.value) > 0) {
		return target{}, corrupt("target %q: bad entry", name)
	}
	return t, nil
}

// The kinds of entries, the first byte their sums cover: an entry moved to
// another bucket fails its sum.
const (
	kindRecord  = 'r'
	kindLease   = 'l'
	kindDue     = 'd'
	kindHistory = 'h'
	kindTarget  = 't'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entrySum is the checksum of the entry of kind under key whose bytes
// (without the sum) are body.
func entrySum(kind byte, key string, body []byte) uint32 {
	c := crcBytes(0, kind)
	for n := uint64(len(key)); ; n >>= 7 { // uvarint(len(key))
		if n < 0x80 {
			c = crcBytes(c, byte(n))
			break
		}
		c = crcBytes(c, byte(n)|0x80)
	}
	// Read in place: crc32 only reads it.
	c = crc32.Update(c, castagnoli, unsafe.Slice(unsafe.StringData(key), len(key)))
	return crc32.Update(c, castagnoli, body)
}

// crcBytes is crc32.Update of the one byte b, without the slice a call of
// crc32.Update would move to the heap.
func crcBytes(crc uint32, b byte) uint32 {
	crc = ^crc
	crc = castagnoli[byte(crc)^b] ^ (crc >> 8)
	return ^crc
}

// appendSum appends the sum of body to body.
func appendSum(kind byte, key string, body []byte) []byte {
	return binary.BigEndian.AppendUint32(body, entrySum(kind, key, body))
}

// checkSum returns b without its sum, and whether the sum matches.
func checkSum(kind byte, key string, b []byte) ([]byte, bool) {
	if len(b) < sumSize {
		return nil, false
	}
	body := b[:len(b)-sumSize]
	return body, binary.BigEndian.Uint32(b[len(body):]) == entrySum(kind, key, body)
}

// corruptEntry is the error of a damaged entry: it matches ErrCorrupt and
// names the entry.
type corruptEntry struct{ what string }

func corrupt(format string, args ...any) error {
	return &corruptEntry{what: fmt.Sprintf(format, args...)}
}

func (e *corruptEntry) Error() string { return ErrCorrupt.Error() + ": " + e.what }
func (e *corruptEntry) Unwrap() error { return ErrCorrupt }

// record is a decoded entry of the records bucket. value aliases the
// transaction's memory.
type record struct {
	version uint64
	hasDue  bool
	due     int64
	indexed bool
	index   int64
	// prio is the record's priority (converge.Prioritizer); its due
	// bucket entry, when indexed, is at rank(index).
	prio  int
	value []byte
}

// rank is where the due bucket orders the record when indexed at at.
func (r *record) rank(at int64) int64 {
	if r.prio == 0 {
		return at
	}
	return converge.PriorityRank(at, r.prio)
}

func (r *record) encode(key string) []byte {
	b := make([]byte, recordHead, recordHead+len(r.value)+sumSize)
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
	if r.prio != 0 {
		b[1] |= flagPriority
		b = binary.BigEndian.AppendUint32(b, uint32(r.prio))
	}
	return appendSum(kindRecord, key, append(b, r.value...))
}

func decodeRecord(key string, b []byte) (record, error) {
	b, ok := checkSum(kindRecord, key, b)
	if !ok || len(b) < recordHead || b[0] != recordTag || b[1]&^(flagDue|flagIndexed|flagPriority) != 0 {
		return record{}, corrupt("record %q: checksum mismatch", key)
	}
	r := record{
		version: binary.BigEndian.Uint64(b[2:]),
		hasDue:  b[1]&flagDue != 0,
		due:     int64(binary.BigEndian.Uint64(b[10:])),
		indexed: b[1]&flagIndexed != 0,
		index:   int64(binary.BigEndian.Uint64(b[18:])),
		value:   b[recordHead:],
	}
	if b[1]&flagPriority != 0 {
		if len(b) < recordHead+4 {
			return record{}, corrupt("record %q: checksum mismatch", key)
		}
		p := binary.BigEndian.Uint32(b[recordHead:])
		if p == 0 || p > converge.MaxPriority {
			return record{}, corrupt("record %q: priority %d out of range", key, p)
		}
		r.prio, r.value = int(p), b[recordHead+4:]
	}
	return r, nil
}

// lease is a decoded entry of the leases bucket.
type lease struct {
	token    uint64
	expires  int64
	hasSaved bool
	saved    int64 // the record's due time when the lease was taken
	owner    string
}

func (l *lease) encode(key string) []byte {
	b := make([]byte, leaseHead, leaseHead+len(l.owner)+sumSize)
	b[0] = leaseTag
	if l.hasSaved {
		b[1] |= flagSaved
	}
	binary.BigEndian.PutUint64(b[2:], l.token)
	binary.BigEndian.PutUint64(b[10:], uint64(l.expires))
	binary.BigEndian.PutUint64(b[18:], uint64(l.saved))
	return appendSum(kindLease, key, append(b, l.owner...))
}

func decodeLease(key string, b []byte) (lease, error) {
	b, ok := checkSum(kindLease, key, b)
	if !ok || len(b) < leaseHead || b[0] != leaseTag || b[1]&^flagSaved != 0 {
		return lease{}, corrupt("lease on %q: checksum mismatch", key)
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
