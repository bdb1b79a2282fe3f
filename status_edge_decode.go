package converge

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// edgeDecoder reads the common form of an edge report in one pass over
// its bytes, with no reflection: the form this package writes, and any
// other whitespace, field order or escaping of it. Whenever it meets
// something it does not handle by itself — a syntax error, an unknown or
// repeated field, null, a number that is not plain digits, a missing
// field, a value Validate refuses — it gives up, and the exact reader
// decides (and names the problem). Values it reads are read exactly as
// encoding/json reads them: strings with escapes or invalid UTF-8, and
// times, through encoding/json's own code.
type edgeDecoder struct {
	b []byte
	i int
}

// decodeEdgeFast decodes b, or reports false to leave it to the exact
// reader.
func decodeEdgeFast(b []byte) (EdgeReport, bool) {
	d := edgeDecoder{b: b}
	out, ok := d.report()
	if !ok {
		return EdgeReport{}, false
	}
	d.space()
	if d.i != len(d.b) || out.Validate() != nil {
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
	seen := 0
	ok := d.object(func(key []byte) bool {
		var bit int
		switch string(key) {
		case "revision":
			bit = fieldRevision
			var ok bool
			out.Revision, ok = d.uint()
			if !ok {
				return false
			}
		case "time":
			bit = fieldTime
			if !d.time(&out.Time) {
				return false
			}
		case "items":
			bit = fieldItems
			out.Items = make([]EdgeItem, 0, 16)
			if !d.array(func() bool {
				it, ok := d.item()
				out.Items = append(out.Items, it)
				return ok
			}) {
				return false
			}
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	if !ok || seen&(fieldRevision|fieldItems) != fieldRevision|fieldItems {
		return EdgeReport{}, false
	}
	if len(out.Items) == 0 {
		out.Items = nil
	}
	return out, true
}

func (d *edgeDecoder) item() (EdgeItem, bool) {
	var it EdgeItem
	seen := 0
	ok := d.object(func(key []byte) bool {
		var bit int
		switch string(key) {
		case "id":
			bit = fieldID
			s, ok := d.string()
			if !ok {
				return false
			}
			it.ID = ID(s)
		case "state":
			bit = fieldState
			s, ok := d.rawString()
			if !ok {
				return false
			}
			v, err := parseEnum(edgeStateNames[:], string(s))
			if err != nil || v == int(EdgeNotReported) {
				return false
			}
			it.State = EdgeState(v)
		case "waitingFor":
			bit = fieldWaitingFor
			if !d.array(func() bool {
				s, ok := d.string()
				it.WaitingFor = append(it.WaitingFor, ID(s))
				return ok
			}) {
				return false
			}
		case "message":
			bit = fieldMessage
			var ok bool
			if it.Message, ok = d.string(); !ok {
				return false
			}
		case "time":
			bit = fieldTime
			if !d.time(&it.Time) {
				return false
			}
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	return it, ok && seen&(fieldID|fieldState) == fieldID|fieldState
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
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling field for every key (plain,
// unescaped keys only) with the decoder at the value.
func (d *edgeDecoder) object(field func(key []byte) bool) bool {
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	for {
		d.space()
		key, ok := d.rawString()
		if !ok || !d.next(':') || !field(key) {
			return false
		}
		if d.next(',') {
			continue
		}
		return d.next('}')
	}
}

// array reads [value, ...], calling each with the decoder at every value.
func (d *edgeDecoder) array(each func() bool) bool {
	if !d.next('[') {
		return false
	}
	if d.next(']') {
		return true
	}
	for {
		if !each() {
			return false
		}
		if d.next(',') {
			continue
		}
		return d.next(']')
	}
}

// rawString reads a string with no escapes, no control characters and
// only ASCII, returning its bytes (a part of the input).
func (d *edgeDecoder) rawString() ([]byte, bool) {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			s := d.b[d.i+1 : j]
			d.i = j + 1
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// string reads any string as encoding/json does: plain ones directly,
// valid UTF-8 without escapes directly, and the rest (escapes, invalid
// UTF-8, which encoding/json replaces) through encoding/json.
func (d *edgeDecoder) string() (string, bool) {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return "", false
	}
	simple := true
	for j := d.i + 1; j < len(d.b); j++ {
		c := d.b[j]
		switch {
		case c == '\\':
			simple = false
			j++ // the escaped character, which may be a quote
		case c == '"':
			raw := d.b[d.i : j+1]
			d.i = j + 1
			if simple {
				body := raw[1 : len(raw)-1]
				if utf8.Valid(body) {
					return string(body), true
				}
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return "", false
			}
			return s, true
		case c < 0x20:
			return "", false
		}
	}
	return "", false
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

// time reads a time with time.Time's own JSON decoding, as encoding/json
// does.
func (d *edgeDecoder) time(t *time.Time) bool {
	raw, ok := d.rawString()
	if !ok {
		return false
	}
	quoted := d.b[d.i-len(raw)-2 : d.i]
	return t.UnmarshalJSON(quoted) == nil
}
