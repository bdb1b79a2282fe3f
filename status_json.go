package converge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// The JSON wire format of the three status documents is described on the
// UnmarshalJSON methods of DesiredConfig, EdgeReport and StatusReport. The
// rules common to all three: enums are the stable lower-case names of their
// String methods; decoding is strict, so unknown or repeated fields, unknown
// enum values, null or wrongly typed values, missing required fields,
// trailing data and documents that fail Validate are rejected with a
// *StatusFieldError naming the field path (such as "items[3].state") and
// the value, and the target is left unchanged; empty lists are written as []
// and read from [] or null; optional fields (time, waitingFor, message) are
// left out when empty; times are RFC 3339.

const (
	docDesired = "desired config"
	docEdge    = "edge report"
	docStatus  = "status report"
)

type desiredWire struct {
	Revision uint64            `json:"revision"`
	Items    []desiredItemWire `json:"items"`
}

type desiredItemWire struct {
	ID       ID     `json:"id"`
	Presence string `json:"presence"`
}

// MarshalJSON encodes the configuration; an invalid one is an error.
func (c DesiredConfig) MarshalJSON() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	w := desiredWire{Revision: c.Revision, Items: make([]desiredItemWire, len(c.Items))}
	for i, it := range c.Items {
		w.Items[i] = desiredItemWire{ID: it.ID, Presence: it.Presence.String()}
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes a desired configuration strictly and validates it;
// on error c is left unchanged. The document is
//
//	{"revision": 7, "items": [{"id": "a", "presence": "present"}]}
//
// where presence is "present" or "absent" and both fields are required.
func (c *DesiredConfig) UnmarshalJSON(b []byte) error {
	var out DesiredConfig
	r := newJSONReader(docDesired, b)
	err := r.document([]string{"revision", "items"}, func(key, p string) error {
		switch key {
		case "revision":
			return readValue(r, p, &out.Revision)
		case "items":
			return r.array(p, func(p string) error {
				var it DesiredItem
				err := r.object(p, []string{"id", "presence"}, func(key, p string) error {
					switch key {
					case "id":
						return readValue(r, p, &it.ID)
					case "presence":
						v, err := r.enum(p, presenceNames[:])
						it.Presence = Presence(v)
						return err
					}
					return errNoField
				})
				out.Items = append(out.Items, it)
				return err
			})
		}
		return errNoField
	})
	if err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*c = out
	return nil
}

type edgeWire struct {
	Revision uint64         `json:"revision"`
	Time     time.Time      `json:"time,omitzero"`
	Items    []edgeItemWire `json:"items"`
}

type edgeItemWire struct {
	ID         ID        `json:"id"`
	State      EdgeState `json:"state"`
	WaitingFor []ID      `json:"waitingFor,omitempty"`
	Message    string    `json:"message,omitempty"`
	Time       time.Time `json:"time,omitzero"`
}

// MarshalJSON encodes the report; an invalid one is an error.
func (r EdgeReport) MarshalJSON() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r.appendJSON(make([]byte, 0, r.jsonSize()))
}

// jsonSize is the length of the report's document when its strings need
// no escapes: the capacity appendJSON starts with.
func (r EdgeReport) jsonSize() int {
	const (
		timeField = len(`,"time":"2006-01-02T15:04:05.999999999+07:00"`)
		itemFixed = len(`{"id":"","state":"waiting-for-dependencies"},`)
	)
	n := len(`{"revision":18446744073709551615,"items":[]}`) + timeField + len(r.Items)*itemFixed
	for _, it := range r.Items {
		n += len(it.ID)
		if !it.Time.IsZero() {
			n += timeField
		}
		if it.Message != "" {
			n += len(`,"message":""`) + len(it.Message)
		}
		if len(it.WaitingFor) > 0 {
			n += len(`,"waitingFor":[]`)
			for _, id := range it.WaitingFor {
				n += len(id) + 3
			}
		}
	}
	return n
}

// edgeStateJSON holds the quoted wire names of the edge states.
var edgeStateJSON = func() (q [len(edgeStateNames)]string) {
	for i, n := range edgeStateNames {
		q[i] = `"` + n + `"`
	}
	return q
}()

// appendJSON appends the report's document to dst: the bytes
// encoding/json writes for edgeWire, without reflection.
func (r EdgeReport) appendJSON(dst []byte) ([]byte, error) {
	var err error
	dst = append(dst, `{"revision":`...)
	dst = strconv.AppendUint(dst, r.Revision, 10)
	if !r.Time.IsZero() {
		dst = append(dst, `,"time":`...)
		if dst, err = appendJSONTime(dst, r.Time); err != nil {
			return nil, err
		}
	}
	dst = append(dst, `,"items":[`...)
	for i, it := range r.Items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = appendJSONString(dst, string(it.ID))
		dst = append(dst, `,"state":`...)
		dst = append(dst, edgeStateJSON[it.State]...) // Validate ruled out undeclared states
		if len(it.WaitingFor) > 0 {
			dst = append(dst, `,"waitingFor":[`...)
			for k, id := range it.WaitingFor {
				if k > 0 {
					dst = append(dst, ',')
				}
				dst = appendJSONString(dst, string(id))
			}
			dst = append(dst, ']')
		}
		if it.Message != "" {
			dst = append(dst, `,"message":`...)
			dst = appendJSONString(dst, it.Message)
		}
		if !it.Time.IsZero() {
			dst = append(dst, `,"time":`...)
			if dst, err = appendJSONTime(dst, it.Time); err != nil {
				return nil, err
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...), nil
}

// UnmarshalJSON decodes an edge report strictly and validates it; on error e
// is left unchanged. The document is
//
//	{"revision": 7, "time": "2026-11-22T10:00:00Z", "items": [
//	  {"id": "a", "state": "creating-failed", "message": "disk full", "time": "..."},
//	  {"id": "b", "state": "waiting-for-dependencies", "waitingFor": ["a"]}]}
//
// where state is an EdgeState name other than "not-reported"; revision,
// items, and id and state of every item are required.
func (e *EdgeReport) UnmarshalJSON(b []byte) error {
	out, ok := decodeEdgeFast(b)
	if !ok {
		var err error
		if out, err = decodeEdgeExact(b); err != nil {
			return err
		}
	}
	*e = out
	return nil
}

// decodeEdgeExact reads an edge report token by token, naming the field
// path of the first problem.
func decodeEdgeExact(b []byte) (EdgeReport, error) {
	var out EdgeReport
	r := newJSONReader(docEdge, b)
	err := r.document([]string{"revision", "items"}, func(key, p string) error {
		switch key {
		case "revision":
			return readValue(r, p, &out.Revision)
		case "time":
			return readValue(r, p, &out.Time)
		case "items":
			return r.array(p, func(p string) error {
				var it EdgeItem
				err := r.object(p, []string{"id", "state"}, func(key, p string) error {
					switch key {
					case "id":
						return readValue(r, p, &it.ID)
					case "state":
						v, err := r.enum(p, edgeStateNames[:])
						it.State = EdgeState(v)
						return err
					case "waitingFor":
						return r.ids(p, &it.WaitingFor)
					case "message":
						return readValue(r, p, &it.Message)
					case "time":
						return readValue(r, p, &it.Time)
					}
					return errNoField
				})
				out.Items = append(out.Items, it)
				return err
			})
		}
		return errNoField
	})
	if err != nil {
		return EdgeReport{}, err
	}
	if err := out.Validate(); err != nil {
		return EdgeReport{}, err
	}
	return out, nil
}

// strQuoteFree marks the bytes encoding/json copies into a quoted string
// as they are: printable ASCII other than the quote, the backslash and the
// HTML characters it escapes.
var strQuoteFree = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendJSONString appends s quoted as encoding/json quotes it. Plain
// ASCII, the common case, is copied; anything encoding/json escapes
// (quotes, control characters, HTML characters, non-ASCII) goes through
// encoding/json itself.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !strQuoteFree[s[i]] {
			q, _ := json.Marshal(s) // a string always encodes
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendJSONTime appends t as encoding/json writes a time.Time: UTC times
// directly, others through package time.
func appendJSONTime(dst []byte, t time.Time) ([]byte, error) {
	if t.Location() == time.UTC {
		if sec := t.Unix(); sec >= minWireUnix && sec < maxWireUnix {
			dst = append(dst, '"')
			dst = appendUTCTime(dst, sec, t.Nanosecond())
			return append(dst, '"'), nil
		}
	}
	if y := t.Year(); y < 0 || y > 9999 {
		q, err := t.MarshalJSON() // the same error encoding/json gives
		return append(dst, q...), err
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), nil
}

// The Unix seconds of 0000-01-01T00:00:00Z and 10000-01-01T00:00:00Z: the
// UTC times of the years the wire format holds are from the first up to
// the second.
const (
	minWireUnix = -62167219200
	maxWireUnix = 253402300800
)

// Days from 0000-03-01 (the start of a 400-year cycle, counting years
// from March) to 1970-01-01, and the days of one 400-year cycle.
const (
	daysToUnixEpoch = 719468
	daysPer400Years = 146097
)

// appendUTCTime appends the UTC time sec.nsec after the Unix epoch, of a
// year from 0 to 9999, as time.RFC3339Nano formats it: fraction without
// trailing zeros, "Z" for the zone.
func appendUTCTime(dst []byte, sec int64, nsec int) []byte {
	days := sec / 86400
	rem := int(sec % 86400)
	if rem < 0 {
		rem += 86400
		days--
	}
	// The civil date of days, in cycles of 400 years from March, shifted by
	// one cycle so that year 0 stays non-negative.
	z := int(days) + daysToUnixEpoch + daysPer400Years
	era := z / daysPer400Years
	doe := z - era*daysPer400Years                         // day of the cycle
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // year of the cycle
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // day of the year from March
	mp := (5*doy + 2) / 153                                // month from March
	year, month, day := yoe+(era-1)*400, mp+3, doy-(153*mp+2)/5+1
	if month > 12 {
		month -= 12
		year++
	}
	hour, minute, second := rem/3600, rem/60%60, rem%60
	b := [...]byte{
		byte('0' + year/1000), byte('0' + year/100%10), byte('0' + year/10%10), byte('0' + year%10), '-',
		byte('0' + month/10), byte('0' + month%10), '-', byte('0' + day/10), byte('0' + day%10), 'T',
		byte('0' + hour/10), byte('0' + hour%10), ':', byte('0' + minute/10), byte('0' + minute%10), ':',
		byte('0' + second/10), byte('0' + second%10),
	}
	dst = append(dst, b[:]...)
	if nsec != 0 {
		var frac [10]byte
		frac[0] = '.'
		for i := 9; i > 0; i-- {
			frac[i] = byte('0' + nsec%10)
			nsec /= 10
		}
		n := 10
		for frac[n-1] == '0' {
			n--
		}
		dst = append(dst, frac[:n]...)
	}
	return append(dst, 'Z')
}

// parseUTCTime parses s when it is a UTC time in exactly the form
// appendUTCTime writes, with a fraction of 1 to 9 digits or none, and
// returns its Unix seconds and nanoseconds: the instant
// time.Time.UnmarshalJSON reads, which it gives in UTC. Any other form,
// and any field out of range, reports false.
func parseUTCTime(s []byte) (sec int64, nsec int32, ok bool) {
	const n = len("2006-01-02T15:04:05")
	if len(s) < n+1 || s[len(s)-1] != 'Z' ||
		s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return 0, 0, false
	}
	for _, i := range [...]int{0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18} {
		if s[i]-'0' > 9 {
			return 0, 0, false
		}
	}
	d2 := func(i int) int { return int(s[i]-'0')*10 + int(s[i+1]-'0') }
	year := d2(0)*100 + d2(2)
	month, day, hour, minute, second := d2(5), d2(8), d2(11), d2(14), d2(17)
	if month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month) || hour > 23 || minute > 59 || second > 59 {
		return 0, 0, false
	}
	if frac := s[n : len(s)-1]; len(frac) > 0 {
		if len(frac) < 2 || len(frac) > 10 || frac[0] != '.' {
			return 0, 0, false
		}
		v := 0
		for _, c := range frac[1:] {
			if c-'0' > 9 {
				return 0, 0, false
			}
			v = v*10 + int(c-'0')
		}
		for range 10 - len(frac) {
			v *= 10
		}
		nsec = int32(v)
	}
	// Days since the epoch of the civil date, counting years from March in
	// cycles of 400, shifted by one cycle so that year 0 stays non-negative.
	y := year + 400
	if month <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := (month + 9) % 12
	doy := (153*mp+2)/5 + day - 1
	days := era*daysPer400Years + yoe*365 + yoe/4 - yoe/100 + doy - daysToUnixEpoch - daysPer400Years
	return int64(days)*86400 + int64(hour*3600+minute*60+second), nsec, true
}

// daysInMonth returns the number of days of month (1 to 12) of year.
func daysInMonth(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

type statusWire struct {
	Revision     uint64              `json:"revision"`
	EdgeRevision uint64              `json:"edgeRevision"`
	Reported     bool                `json:"reported"`
	EdgeTime     time.Time           `json:"edgeTime,omitzero"`
	Ready        bool                `json:"ready"`
	Items        []statusItemWire    `json:"items"`
	Dropped      []statusDroppedWire `json:"dropped"`
}

type statusItemWire struct {
	ID         ID        `json:"id"`
	Desired    string    `json:"desired"`
	Edge       EdgeState `json:"edge"`
	Status     Status    `json:"status"`
	Review     Review    `json:"review"`
	WaitingFor []ID      `json:"waitingFor,omitempty"`
	Message    string    `json:"message,omitempty"`
	Time       time.Time `json:"time,omitzero"`
}

type statusDroppedWire struct {
	ID      ID        `json:"id"`
	Edge    EdgeState `json:"edge"`
	Review  Review    `json:"review"`
	Message string    `json:"message,omitempty"`
	Time    time.Time `json:"time,omitzero"`
}

// Validate reports the first problem as a *StatusFieldError: revision 0,
// Reported without a matching EdgeRevision, an empty or duplicate ID (a
// dropped entry may not repeat an item either), an undeclared enum value,
// EdgeNotReported in a dropped entry, or WaitingFor on an entry that does not
// wait. It does not re-derive statuses: a report from another version of the
// table stays readable.
func (s *StatusReport) Validate() error {
	const doc = docStatus
	if s == nil {
		return &StatusFieldError{Doc: doc, Err: ErrStatusMissingField}
	}
	if s.Revision == 0 {
		return &StatusFieldError{Doc: doc, Field: "revision", Value: "0", Err: ErrStatusNoRevision}
	}
	if s.Reported && s.EdgeRevision != s.Revision {
		return &StatusFieldError{Doc: doc, Field: "reported", Value: fmt.Sprint(s.EdgeRevision), Err: ErrStatusInconsistent}
	}
	repeat := firstRepeatedID(len(s.Items)+len(s.Dropped), func(i int) ID {
		if i < len(s.Items) {
			return s.Items[i].ID
		}
		return s.Dropped[i-len(s.Items)].ID
	})
	for i, it := range s.Items {
		p := entryPath{"items", i}
		if err := checkID(doc, p, it.ID, repeat); err != nil {
			return err
		}
		switch {
		case it.Desired != Present && it.Desired != Absent:
			return &StatusFieldError{Doc: doc, Field: p.field("desired"), Value: it.Desired.String(), Err: ErrStatusUnknownValue}
		case !it.Edge.Valid():
			return &StatusFieldError{Doc: doc, Field: p.field("edge"), Value: it.Edge.String(), Err: ErrStatusUnknownValue}
		case !it.Status.Valid():
			return &StatusFieldError{Doc: doc, Field: p.field("status"), Value: it.Status.String(), Err: ErrStatusUnknownValue}
		case int(it.Review) >= len(reviewNames):
			return &StatusFieldError{Doc: doc, Field: p.field("review"), Value: it.Review.String(), Err: ErrStatusUnknownValue}
		}
		if err := checkWaiting(doc, p, it.Edge, it.WaitingFor); err != nil {
			return err
		}
	}
	for i, d := range s.Dropped {
		p := entryPath{"dropped", i}
		if err := checkID(doc, p, d.ID, repeat-len(s.Items)); err != nil {
			return err
		}
		switch {
		case !d.Edge.Valid() || d.Edge == EdgeNotReported:
			return &StatusFieldError{Doc: doc, Field: p.field("edge"), Value: d.Edge.String(), Err: ErrStatusUnknownValue}
		case int(d.Review) >= len(reviewNames):
			return &StatusFieldError{Doc: doc, Field: p.field("review"), Value: d.Review.String(), Err: ErrStatusUnknownValue}
		}
	}
	return nil
}

// MarshalJSON encodes the report with its derived "ready" flag; an invalid
// report is an error.
func (s StatusReport) MarshalJSON() ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	w := statusWire{
		Revision: s.Revision, EdgeRevision: s.EdgeRevision, Reported: s.Reported, EdgeTime: s.EdgeTime,
		Ready: s.Ready(), Items: make([]statusItemWire, len(s.Items)), Dropped: make([]statusDroppedWire, len(s.Dropped)),
	}
	for i, it := range s.Items {
		w.Items[i] = statusItemWire{
			ID: it.ID, Desired: it.Desired.String(), Edge: it.Edge, Status: it.Status, Review: it.Review,
			WaitingFor: it.WaitingFor, Message: it.Message, Time: it.Time,
		}
	}
	for i, d := range s.Dropped {
		w.Dropped[i] = statusDroppedWire(d)
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes a status report strictly, validates it, and checks
// that "ready" agrees with the items; on error s is left unchanged. The
// document is
//
//	{"revision": 7, "edgeRevision": 7, "reported": true, "edgeTime": "...", "ready": false,
//	 "items": [{"id": "a", "desired": "present", "edge": "creating-failed",
//	            "status": "creating-failed", "review": "yes", "message": "disk full"}],
//	 "dropped": [{"id": "x", "edge": "present", "review": "maybe"}]}
//
// revision and items are required, and id, desired, edge, status and review
// of every item, and id, edge and review of every dropped entry.
func (s *StatusReport) UnmarshalJSON(b []byte) error {
	var out StatusReport
	var ready, hasReady bool
	r := newJSONReader(docStatus, b)
	err := r.document([]string{"revision", "items"}, func(key, p string) error {
		switch key {
		case "revision":
			return readValue(r, p, &out.Revision)
		case "edgeRevision":
			return readValue(r, p, &out.EdgeRevision)
		case "reported":
			return readValue(r, p, &out.Reported)
		case "edgeTime":
			return readValue(r, p, &out.EdgeTime)
		case "ready":
			hasReady = true
			return readValue(r, p, &ready)
		case "items":
			return r.array(p, func(p string) error {
				var it StatusItem
				err := r.object(p, []string{"id", "desired", "edge", "status", "review"}, func(key, p string) error {
					var v int
					var err error
					switch key {
					case "id":
						return readValue(r, p, &it.ID)
					case "desired":
						v, err = r.enum(p, presenceNames[:])
						it.Desired = Presence(v)
					case "edge":
						v, err = r.enum(p, edgeStateNames[:])
						it.Edge = EdgeState(v)
					case "status":
						v, err = r.enum(p, statusNames[1:])
						it.Status = Status(v + 1)
					case "review":
						v, err = r.enum(p, reviewNames[:])
						it.Review = Review(v)
					case "waitingFor":
						return r.ids(p, &it.WaitingFor)
					case "message":
						return readValue(r, p, &it.Message)
					case "time":
						return readValue(r, p, &it.Time)
					default:
						return errNoField
					}
					return err
				})
				out.Items = append(out.Items, it)
				return err
			})
		case "dropped":
			return r.array(p, func(p string) error {
				var d StatusDropped
				err := r.object(p, []string{"id", "edge", "review"}, func(key, p string) error {
					var v int
					var err error
					switch key {
					case "id":
						return readValue(r, p, &d.ID)
					case "edge":
						v, err = r.enum(p, edgeStateNames[:])
						d.Edge = EdgeState(v)
					case "review":
						v, err = r.enum(p, reviewNames[:])
						d.Review = Review(v)
					case "message":
						return readValue(r, p, &d.Message)
					case "time":
						return readValue(r, p, &d.Time)
					default:
						return errNoField
					}
					return err
				})
				out.Dropped = append(out.Dropped, d)
				return err
			})
		}
		return errNoField
	})
	if err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	if hasReady && ready != out.Ready() {
		return &StatusFieldError{Doc: docStatus, Field: "ready", Value: fmt.Sprint(ready), Err: ErrStatusInconsistent}
	}
	*s = out
	return nil
}

// errNoField is what a field handler returns for a key it does not know.
var errNoField = errors.New("no such field")

// jsonReader reads one status document in a single pass over its tokens,
// so that every error can name the field path.
type jsonReader struct {
	doc string
	dec *json.Decoder
}

func newJSONReader(doc string, b []byte) *jsonReader {
	return &jsonReader{doc: doc, dec: json.NewDecoder(bytes.NewReader(b))}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (r *jsonReader) fail(path, value string, err error) error {
	return &StatusFieldError{Doc: r.doc, Field: path, Value: value, Err: err}
}

func (r *jsonReader) malformed(path string, err error) error {
	return r.fail(path, "", fmt.Errorf("%w: %w", ErrStatusMalformed, err))
}

// document reads the top-level object and makes sure nothing follows it.
func (r *jsonReader) document(required []string, field func(key, p string) error) error {
	if err := r.object("", required, field); err != nil {
		return err
	}
	if _, err := r.dec.Token(); err != io.EOF {
		return r.fail("", "", fmt.Errorf("%w: data after the object", ErrStatusMalformed))
	}
	return nil
}

// object reads one JSON object at path, calling field(key, path.key) for
// every key in document order; field must read exactly one value, or return
// errNoField. Unknown, repeated and missing required keys are errors.
func (r *jsonReader) object(path string, required []string, field func(key, p string) error) error {
	tok, err := r.dec.Token()
	if err != nil {
		return r.malformed(path, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return r.fail(path, fmt.Sprint(tok), fmt.Errorf("%w: want an object", ErrStatusMalformed))
	}
	var buf [8]string
	seen := buf[:0]
	for r.dec.More() {
		tok, err := r.dec.Token()
		if err != nil {
			return r.malformed(path, err)
		}
		key, _ := tok.(string) // inside an object, Token returns keys as strings
		fp := joinPath(path, key)
		if slices.Contains(seen, key) {
			return r.fail(fp, "", ErrStatusDuplicateField)
		}
		seen = append(seen, key)
		if err := field(key, fp); err != nil {
			if err == errNoField {
				return r.fail(fp, "", ErrStatusUnknownField)
			}
			return err
		}
	}
	if _, err := r.dec.Token(); err != nil { // the closing brace
		return r.malformed(path, err)
	}
	for _, k := range required {
		if !slices.Contains(seen, k) {
			return r.fail(joinPath(path, k), "", ErrStatusMissingField)
		}
	}
	return nil
}

// array reads a JSON array (null is empty) at path, calling each with the
// path of every element; each must read exactly one value.
func (r *jsonReader) array(path string, each func(p string) error) error {
	tok, err := r.dec.Token()
	if err != nil {
		return r.malformed(path, err)
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return r.fail(path, fmt.Sprint(tok), fmt.Errorf("%w: want a list", ErrStatusMalformed))
	}
	for i := 0; r.dec.More(); i++ {
		if err := each(path + "[" + strconv.Itoa(i) + "]"); err != nil {
			return err
		}
	}
	if _, err := r.dec.Token(); err != nil { // the closing bracket
		return r.malformed(path, err)
	}
	return nil
}

// readValue reads one value into dst. null is rejected: it would silently
// mean "zero".
func readValue[T any](r *jsonReader, path string, dst *T) error {
	var v *T
	if err := r.dec.Decode(&v); err != nil {
		return r.malformed(path, err)
	}
	if v == nil {
		return r.fail(path, "null", ErrStatusMalformed)
	}
	*dst = *v
	return nil
}

// ids reads a list of IDs; an empty list becomes nil.
func (r *jsonReader) ids(path string, dst *[]ID) error {
	var ids []ID
	if err := readValue(r, path, &ids); err != nil {
		return err
	}
	if len(ids) == 0 {
		ids = nil
	}
	*dst = ids
	return nil
}

// enum reads a string and returns its index in names.
func (r *jsonReader) enum(path string, names []string) (int, error) {
	var s string
	if err := readValue(r, path, &s); err != nil {
		return 0, err
	}
	v, err := parseEnum(names, s)
	if err != nil {
		return 0, r.fail(path, s, err)
	}
	return v, nil
}
