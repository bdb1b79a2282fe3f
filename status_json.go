package converge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

var presenceNames = []string{"present", "absent"}

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
	err := decodeObject(docDesired, b, "", []string{"revision", "items"}, map[string]fieldFunc{
		"revision": func(raw []byte, p string) error { return decodeValue(docDesired, raw, p, &out.Revision) },
		"items": func(raw []byte, p string) error {
			return decodeArray(docDesired, raw, p, func(raw []byte, p string) error {
				var it DesiredItem
				err := decodeObject(docDesired, raw, p, []string{"id", "presence"}, map[string]fieldFunc{
					"id": func(raw []byte, p string) error { return decodeValue(docDesired, raw, p, &it.ID) },
					"presence": func(raw []byte, p string) error {
						v, err := decodeEnum(docDesired, raw, p, presenceNames)
						it.Presence = Presence(v)
						return err
					},
				})
				out.Items = append(out.Items, it)
				return err
			})
		},
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
	w := edgeWire{Revision: r.Revision, Time: r.Time, Items: make([]edgeItemWire, len(r.Items))}
	for i, it := range r.Items {
		w.Items[i] = edgeItemWire(it)
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes an edge report strictly and validates it; on error r
// is left unchanged. The document is
//
//	{"revision": 7, "time": "2026-11-22T10:00:00Z", "items": [
//	  {"id": "a", "state": "creating-failed", "message": "disk full", "time": "..."},
//	  {"id": "b", "state": "waiting-for-dependencies", "waitingFor": ["a"]}]}
//
// where state is an EdgeState name other than "not-reported"; revision,
// items, and id and state of every item are required.
func (r *EdgeReport) UnmarshalJSON(b []byte) error {
	var out EdgeReport
	err := decodeObject(docEdge, b, "", []string{"revision", "items"}, map[string]fieldFunc{
		"revision": func(raw []byte, p string) error { return decodeValue(docEdge, raw, p, &out.Revision) },
		"time":     func(raw []byte, p string) error { return decodeValue(docEdge, raw, p, &out.Time) },
		"items": func(raw []byte, p string) error {
			return decodeArray(docEdge, raw, p, func(raw []byte, p string) error {
				var it EdgeItem
				err := decodeObject(docEdge, raw, p, []string{"id", "state"}, map[string]fieldFunc{
					"id": func(raw []byte, p string) error { return decodeValue(docEdge, raw, p, &it.ID) },
					"state": func(raw []byte, p string) error {
						v, err := decodeEnum(docEdge, raw, p, edgeStateNames[:])
						it.State = EdgeState(v)
						return err
					},
					"waitingFor": func(raw []byte, p string) error { return decodeIDs(docEdge, raw, p, &it.WaitingFor) },
					"message":    func(raw []byte, p string) error { return decodeValue(docEdge, raw, p, &it.Message) },
					"time":       func(raw []byte, p string) error { return decodeValue(docEdge, raw, p, &it.Time) },
				})
				out.Items = append(out.Items, it)
				return err
			})
		},
	})
	if err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*r = out
	return nil
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
	seen := make(map[ID]struct{}, len(s.Items)+len(s.Dropped))
	for i, it := range s.Items {
		p := entryPath{"items", i}
		if err := checkID(doc, p, it.ID, seen); err != nil {
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
		if err := checkID(doc, p, d.ID, seen); err != nil {
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
	const doc = docStatus
	var out StatusReport
	var ready, hasReady bool
	err := decodeObject(doc, b, "", []string{"revision", "items"}, map[string]fieldFunc{
		"revision":     func(raw []byte, p string) error { return decodeValue(doc, raw, p, &out.Revision) },
		"edgeRevision": func(raw []byte, p string) error { return decodeValue(doc, raw, p, &out.EdgeRevision) },
		"reported":     func(raw []byte, p string) error { return decodeValue(doc, raw, p, &out.Reported) },
		"edgeTime":     func(raw []byte, p string) error { return decodeValue(doc, raw, p, &out.EdgeTime) },
		"ready": func(raw []byte, p string) error {
			hasReady = true
			return decodeValue(doc, raw, p, &ready)
		},
		"items": func(raw []byte, p string) error {
			return decodeArray(doc, raw, p, func(raw []byte, p string) error {
				var it StatusItem
				err := decodeObject(doc, raw, p, []string{"id", "desired", "edge", "status", "review"}, map[string]fieldFunc{
					"id": func(raw []byte, p string) error { return decodeValue(doc, raw, p, &it.ID) },
					"desired": func(raw []byte, p string) error {
						v, err := decodeEnum(doc, raw, p, presenceNames)
						it.Desired = Presence(v)
						return err
					},
					"edge": func(raw []byte, p string) error {
						v, err := decodeEnum(doc, raw, p, edgeStateNames[:])
						it.Edge = EdgeState(v)
						return err
					},
					"status": func(raw []byte, p string) error {
						v, err := decodeEnum(doc, raw, p, statusNames[1:])
						it.Status = Status(v + 1)
						return err
					},
					"review": func(raw []byte, p string) error {
						v, err := decodeEnum(doc, raw, p, reviewNames[:])
						it.Review = Review(v)
						return err
					},
					"waitingFor": func(raw []byte, p string) error { return decodeIDs(doc, raw, p, &it.WaitingFor) },
					"message":    func(raw []byte, p string) error { return decodeValue(doc, raw, p, &it.Message) },
					"time":       func(raw []byte, p string) error { return decodeValue(doc, raw, p, &it.Time) },
				})
				out.Items = append(out.Items, it)
				return err
			})
		},
		"dropped": func(raw []byte, p string) error {
			return decodeArray(doc, raw, p, func(raw []byte, p string) error {
				var d StatusDropped
				err := decodeObject(doc, raw, p, []string{"id", "edge", "review"}, map[string]fieldFunc{
					"id": func(raw []byte, p string) error { return decodeValue(doc, raw, p, &d.ID) },
					"edge": func(raw []byte, p string) error {
						v, err := decodeEnum(doc, raw, p, edgeStateNames[:])
						d.Edge = EdgeState(v)
						return err
					},
					"review": func(raw []byte, p string) error {
						v, err := decodeEnum(doc, raw, p, reviewNames[:])
						d.Review = Review(v)
						return err
					},
					"message": func(raw []byte, p string) error { return decodeValue(doc, raw, p, &d.Message) },
					"time":    func(raw []byte, p string) error { return decodeValue(doc, raw, p, &d.Time) },
				})
				out.Dropped = append(out.Dropped, d)
				return err
			})
		},
	})
	if err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	if hasReady && ready != out.Ready() {
		return &StatusFieldError{Doc: doc, Field: "ready", Value: fmt.Sprint(ready), Err: ErrStatusInconsistent}
	}
	*s = out
	return nil
}

// fieldFunc decodes the raw value of one field at path p.
type fieldFunc func(raw []byte, p string) error

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// decodeObject reads one JSON object from raw, calling fields[key] for every
// key in document order; unknown, repeated and missing required keys,
// non-objects and trailing data are errors naming the path.
func decodeObject(doc string, raw []byte, path string, required []string, fields map[string]fieldFunc) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return malformed(doc, path, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &StatusFieldError{Doc: doc, Field: path, Value: fmt.Sprint(tok), Err: fmt.Errorf("%w: want an object", ErrStatusMalformed)}
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return malformed(doc, path, err)
		}
		key, _ := tok.(string) // object keys are always strings
		fp := joinPath(path, key)
		if seen[key] {
			return &StatusFieldError{Doc: doc, Field: fp, Err: ErrStatusDuplicateField}
		}
		seen[key] = true
		f, ok := fields[key]
		if !ok {
			return &StatusFieldError{Doc: doc, Field: fp, Err: ErrStatusUnknownField}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return malformed(doc, fp, err)
		}
		if err := f(v, fp); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return malformed(doc, path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &StatusFieldError{Doc: doc, Field: path, Err: fmt.Errorf("%w: data after the object", ErrStatusMalformed)}
	}
	for _, r := range required {
		if !seen[r] {
			return &StatusFieldError{Doc: doc, Field: joinPath(path, r), Err: ErrStatusMissingField}
		}
	}
	return nil
}

// decodeArray calls each for every element of a JSON array (null is empty).
func decodeArray(doc string, raw []byte, path string, each fieldFunc) error {
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return malformed(doc, path, err)
	}
	for i, e := range elems {
		if err := each(e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	return nil
}

// decodeIDs reads a list of IDs; an empty list becomes nil.
func decodeIDs(doc string, raw []byte, path string, dst *[]ID) error {
	var ids []ID
	if err := decodeValue(doc, raw, path, &ids); err != nil {
		return err
	}
	if len(ids) == 0 {
		ids = nil
	}
	*dst = ids
	return nil
}

// decodeValue reads a scalar (or list of scalars) into dst. null is
// rejected: it would silently mean "zero".
func decodeValue(doc string, raw []byte, path string, dst any) error {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return &StatusFieldError{Doc: doc, Field: path, Value: "null", Err: ErrStatusMalformed}
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return malformed(doc, path, err)
	}
	return nil
}

// decodeEnum reads a string and returns its index in names.
func decodeEnum(doc string, raw []byte, path string, names []string) (int, error) {
	var s string
	if err := decodeValue(doc, raw, path, &s); err != nil {
		return 0, err
	}
	v, err := parseEnum(names, s)
	if err != nil {
		return 0, &StatusFieldError{Doc: doc, Field: path, Value: s, Err: err}
	}
	return v, nil
}

func malformed(doc, path string, err error) error {
	var fe *StatusFieldError
	if errors.As(err, &fe) {
		return err
	}
	return &StatusFieldError{Doc: doc, Field: path, Err: fmt.Errorf("%w: %w", ErrStatusMalformed, err)}
}
