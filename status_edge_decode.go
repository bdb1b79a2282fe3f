package converge

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// edgeDecoder reads the common form of an edge report in one pass over
// its bytes, with no reflection: the form this package writes, and any
// other whitespace, field order or escaping of it. It is a complete
// parser of what it accepts: every byte of an accepted document has been
// read and checked against the JSON grammar. Whenever it meets something
// it does not handle by itself — a syntax error, an unknown or repeated
// field, null, a number that is not plain digits, a missing field, a value
// Validate refuses — it gives up, and the exact reader decides (and names
// the problem). Values it reads are read exactly as encoding/json reads
// them: strings with escapes or invalid UTF-8, and times other than UTC
// ones in the form this package writes, through encoding/json's and
// package time's own code.
//
// To allocate little, the decoder first records where every string is
// (edgeSpan) and what every item holds (edgeRecord); once the whole
// document is read it copies all strings of the report into one string,
// all waitingFor lists into one slice, and builds the items in a slice of
// exactly the right length.
type edgeDecoder struct {
	b []byte
	i int
	// esc holds the decoded bodies of strings that differ from their
	// bytes in b (escapes, invalid UTF-8).
	esc   []byte
	recs  []edgeRecord
	wf    []edgeSpan // the waitingFor entries of all items, in order
	times []time.Time
	// strLen is the total length of all strings recorded.
	strLen int
}

// edgeSpan is where the body of a string is: b[off:off+n] when off >= 0,
// esc[^off:^off+n] otherwise.
type edgeSpan struct{ off, n int32 }

// edgeRecord is one item as read, before its strings exist.
type edgeRecord struct {
	id, msg edgeSpan
	wf      int32 // the number of waitingFor entries, which follow in edgeDecoder.wf
	state   EdgeState
	time    edgeTime
}

// edgeTime is a time as read: none, a UTC time in seconds and
// nanoseconds since the Unix epoch, or an index into edgeDecoder.times.
type edgeTime struct {
	kind uint8 // timeNone, timeUTC or timeOther
	nsec int32
	sec  int64 // Unix seconds, or the index into times
}

const (
	timeNone = iota
	timeUTC
	timeOther
)

func (t edgeTime) get(d *edgeDecoder) time.Time {
	switch t.kind {
	case timeUTC:
		return time.Unix(t.sec, int64(t.nsec)).UTC()
	case timeOther:
		return d.times[t.sec]
	}
	return time.Time{}
}

// decodeEdgeFast decodes b, or reports false to leave it to the exact
// reader.
func decodeEdgeFast(b []byte) (EdgeReport, bool) {
	if len(b) > math.MaxInt32 {
		return EdgeReport{}, false
	}
	// An item takes some 60 to 150 bytes: room for the records of most
	// documents, in less memory than the document's.
	d := edgeDecoder{b: b, recs: make([]edgeRecord, 0, len(b)/64)}
	out, ok := d.report()
	if !ok {
		return EdgeReport{}, false
	}
	d.space()
	if d.i != len(d.b) {
		return EdgeReport{}, false
	}
	out.Items = d.items()
	// The rest of Validate: the decoder already refused empty IDs, states
	// not allowed in a report and misplaced waitingFor lists.
	if firstRepeatedID(len(out.Items), func(i int) ID { return out.Items[i].ID }) >= 0 {
		return EdgeReport{}, false
	}
	return out, true
}

// Bits of the fields of one object seen so far, to find repeats and
// missing required fields.
const (
	fieldRevision = 1 << iota
	fieldTime
	fieldItems
	fieldID
	fieldState
	fieldWaitingFor
	fieldMessage
)

func (d *edgeDecoder) report() (EdgeReport, bool) {
	var out EdgeReport
	if !d.next('{') {
		return out, false
	}
	seen := 0
	for {
		key, ok := d.rawString()
		if !ok || !d.next(':') {
			return out, false
		}
		var bit int
		switch string(key) {
		case "revision":
			bit = fieldRevision
			if out.Revision, ok = d.uint(); !ok || out.Revision == 0 {
				return out, false
			}
		case "time":
			bit = fieldTime
			var t edgeTime
			if t, ok = d.time(); !ok {
				return out, false
			}
			out.Time = t.get(d)
		case "items":
			bit = fieldItems
			if !d.itemList() {
				return out, false
			}
		default:
			return out, false
		}
		if seen&bit != 0 {
			return out, false
		}
		seen |= bit
		if d.next(',') {
			continue
		}
		if !d.next('}') || seen&(fieldRevision|fieldItems) != fieldRevision|fieldItems {
			return out, false
		}
		return out, true
	}
}

// itemList reads the list of items into d.recs.
func (d *edgeDecoder) itemList() bool {
	if !d.next('[') {
		return false
	}
	if d.next(']') {
		return true
	}
	for {
		if !d.item() {
			return false
		}
		if d.next(',') {
			continue
		}
		return d.next(']')
	}
}

// item reads one item into a new record.
func (d *edgeDecoder) item() bool {
	if !d.next('{') {
		return false
	}
	var rec edgeRecord
	seen := 0
	if !d.next('}') {
		for {
			key, ok := d.rawString()
			if !ok || !d.next(':') {
				return false
			}
			var bit int
			switch string(key) {
			case "id":
				bit = fieldID
				if rec.id, ok = d.string(); !ok || rec.id.n == 0 {
					return false
				}
			case "state":
				bit = fieldState
				s, ok := d.rawString()
				if !ok {
					return false
				}
				if rec.state, ok = reportedState(s); !ok {
					return false
				}
			case "waitingFor":
				bit = fieldWaitingFor
				if rec.wf, ok = d.idList(); !ok {
					return false
				}
			case "message":
				bit = fieldMessage
				if rec.msg, ok = d.string(); !ok {
					return false
				}
			case "time":
				bit = fieldTime
				if rec.time, ok = d.time(); !ok {
					return false
				}
			default:
				return false
			}
			if seen&bit != 0 {
				return false
			}
			seen |= bit
			if d.next(',') {
				continue
			}
			if !d.next('}') {
				return false
			}
			break
		}
	}
	if seen&(fieldID|fieldState) != fieldID|fieldState || rec.wf > 0 && rec.state != EdgeWaitingForDependencies {
		return false
	}
	d.recs = append(d.recs, rec)
	return true
}

// reportedState returns the state named s, refusing names that are not
// allowed in an edge report.
func reportedState(s []byte) (EdgeState, bool) {
	for i, n := range edgeStateNames {
		if i != int(EdgeNotReported) && n == string(s) {
			return EdgeState(i), true
		}
	}
	return 0, false
}

// idList reads a list of non-empty IDs into d.wf, returning their number.
func (d *edgeDecoder) idList() (int32, bool) {
	if !d.next('[') {
		return 0, false
	}
	if d.next(']') {
		return 0, true
	}
	var n int32
	for {
		s, ok := d.string()
		if !ok || s.n == 0 {
			return 0, false
		}
		d.wf = append(d.wf, s)
		n++
		if d.next(',') {
			continue
		}
		return n, d.next(']')
	}
}

// items builds the items from the records: all their strings in one
// string, all waitingFor lists in one slice.
func (d *edgeDecoder) items() []EdgeItem {
	if len(d.recs) == 0 {
		return nil
	}
	var sb strings.Builder
	sb.Grow(d.strLen)
	k := 0
	for _, r := range d.recs {
		sb.Write(d.bytes(r.id))
		for _, w := range d.wf[k : k+int(r.wf)] {
			sb.Write(d.bytes(w))
		}
		k += int(r.wf)
		sb.Write(d.bytes(r.msg))
	}
	all := sb.String()
	pos := 0
	take := func(n int32) string {
		s := all[pos : pos+int(n)]
		pos += int(n)
		return s
	}
	var waiting []ID
	if len(d.wf) > 0 {
		waiting = make([]ID, len(d.wf))
	}
	out := make([]EdgeItem, len(d.recs))
	k = 0
	for i, r := range d.recs {
		it := &out[i]
		it.ID = ID(take(r.id.n))
		if r.wf > 0 {
			wf := waiting[k : k+int(r.wf) : k+int(r.wf)]
			for j, w := range d.wf[k : k+int(r.wf)] {
				wf[j] = ID(take(w.n))
			}
			it.WaitingFor = wf
			k += int(r.wf)
		}
		it.Message = take(r.msg.n)
		it.State = r.state
		it.Time = r.time.get(d)
	}
	return out
}

// bytes returns the body of the string at s.
func (d *edgeDecoder) bytes(s edgeSpan) []byte {
	if s.off >= 0 {
		return d.b[s.off : s.off+s.n]
	}
	return d.esc[^s.off : ^s.off+s.n]
}

// space skips JSON whitespace.
func (d *edgeDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips whitespace and consumes c when it comes next.
func (d *edgeDecoder) next(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// strPlain marks the bytes that may appear in a string this decoder reads
// by itself: printable ASCII other than the quote and the backslash.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plainEnd returns the index of the first byte of b from j on that strPlain
// does not mark, or len(b). It looks at eight bytes at a time: in each
// word, the high bit of a byte is set by x itself (non-ASCII), by x-0x20
// (below 0x20), or by x^'"'-1 or x^'\\'-1 (the quote, the backslash). A
// borrow can set the bit of a later byte only after one that is truly
// flagged, so the first flagged byte is the answer.
func plainEnd(b []byte, j int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; j+8 <= len(b); j += 8 {
		x := binary.LittleEndian.Uint64(b[j:])
		if t := (x | (x - 0x20*ones) | ((x ^ '"'*ones) - ones) | ((x ^ '\\'*ones) - ones)) & highs; t != 0 {
			return j + bits.TrailingZeros64(t)/8
		}
	}
	for j < len(b) && strPlain[b[j]] {
		j++
	}
	return j
}

// rawString reads a string with no escapes, no control characters and
// only ASCII, returning its bytes (a part of the input).
func (d *edgeDecoder) rawString() ([]byte, bool) {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	j := plainEnd(d.b, d.i+1)
	if j >= len(d.b) || d.b[j] != '"' {
		return nil, false
	}
	s := d.b[d.i+1 : j]
	d.i = j + 1
	return s, true
}

// string reads any string as encoding/json does and records where its
// body is: plain ones and valid UTF-8 without escapes are parts of the
// input; the rest (escapes, invalid UTF-8, which encoding/json replaces)
// are decoded by encoding/json into d.esc.
func (d *edgeDecoder) string() (edgeSpan, bool) {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return edgeSpan{}, false
	}
	j := plainEnd(d.b, d.i+1)
	if j < len(d.b) && d.b[j] == '"' {
		s := edgeSpan{off: int32(d.i + 1), n: int32(j - d.i - 1)}
		d.i = j + 1
		d.strLen += int(s.n)
		return s, true
	}
	simple := true
	for ; j < len(d.b); j++ {
		c := d.b[j]
		switch {
		case c == '\\':
			simple = false
			j++ // the escaped character, which may be a quote
		case c == '"':
			raw := d.b[d.i : j+1]
			body := raw[1 : len(raw)-1]
			var s edgeSpan
			if simple && utf8.Valid(body) {
				s = edgeSpan{off: int32(d.i + 1), n: int32(len(body))}
			} else {
				var v string
				if json.Unmarshal(raw, &v) != nil || len(d.esc)+len(v) > math.MaxInt32 {
					return edgeSpan{}, false
				}
				s = edgeSpan{off: ^int32(len(d.esc)), n: int32(len(v))}
				d.esc = append(d.esc, v...)
			}
			d.i = j + 1
			d.strLen += int(s.n)
			return s, true
		case c < 0x20:
			return edgeSpan{}, false
		}
	}
	return edgeSpan{}, false
}

// uint reads a non-negative integer written as plain digits (no sign,
// fraction, exponent or leading zero), as encoding/json accepts it for
// a uint64.
func (d *edgeDecoder) uint() (uint64, bool) {
	d.space()
	start := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	digits := d.b[start:d.i]
	if len(digits) == 0 || len(digits) > 1 && digits[0] == '0' {
		return 0, false
	}
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	v, err := strconv.ParseUint(string(digits), 10, 64)
	return v, err == nil
}

// time reads a time as time.Time's own JSON decoding does, as
// encoding/json does: UTC times in the form appendJSONTime writes
// directly, every other one through time.Time.UnmarshalJSON.
func (d *edgeDecoder) time() (edgeTime, bool) {
	raw, ok := d.rawString()
	if !ok {
		return edgeTime{}, false
	}
	if sec, nsec, ok := parseUTCTime(raw); ok {
		return edgeTime{kind: timeUTC, sec: sec, nsec: nsec}, true
	}
	var t time.Time
	if t.UnmarshalJSON(d.b[d.i-len(raw)-2:d.i]) != nil {
		return edgeTime{}, false
	}
	d.times = append(d.times, t)
	return edgeTime{kind: timeOther, sec: int64(len(d.times) - 1)}, true
}
