package converge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/convergekit/converge/internal/wire"
)

// The JSON wire format of the three status documents is described on the
// UnmarshalJSON methods of Desired, EdgeReport and StatusReport. The
// rules common to all three: enums are the stable lower-case names of their
// String methods; decoding is strict, so unknown or repeated fields, unknown
// enum values, null or wrongly typed values, missing required fields,
// trailing data and documents that fail Validate are rejected with a
// *StatusFieldError naming the field path (such as "items[3].state") and
// the value, and the target is left unchanged; empty lists are written as []
// and read from [] or null; optional fields (time, waitingFor, message) are
// left out when empty; times are RFC 3339. Invalid UTF-8 is refused.
// UnmarshalJSON reads a document of at most DefaultMaxDocumentBytes (a
// larger one is a *LimitError, before anything is decoded); DecodeDesired,
// DecodeEdgeReport and DecodeStatusReport take DecodeLimits of their own.

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
func (c Desired) MarshalJSON() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	w := desiredWire{Revision: c.Revision, Items: make([]desiredItemWire, len(c.Items))}
	for i, it := range c.Items {
		w.Items[i] = desiredItemWire{ID: it.ID, Presence: it.Presence.String()}
	}
	return json.Marshal(w)
}

type desiredIn struct {
	Revision wire.Field[uint64]       `json:"revision"`
	Items    wire.List[desiredItemIn] `json:"items"`
}

type desiredItemIn struct {
	ID       wire.Field[ID]       `json:"id"`
	Presence wire.Field[Presence] `json:"presence"`
}

// UnmarshalJSON decodes a desired configuration strictly and validates it;
// on error c is left unchanged. The document is
//
//	{"revision": 7, "items": [{"id": "a", "presence": "present"}]}
//
// where presence is "present" or "absent" and both fields are required.
func (c *Desired) UnmarshalJSON(b []byte) error {
	return c.decode(b, DecodeLimits{})
}

func (c *Desired) decode(b []byte, lim DecodeLimits) error {
	var in desiredIn
	if err := statusDecode(docDesired, b, &in, lim); err != nil {
		return err
	}
	out := Desired{Revision: in.Revision.V}
	for i, it := range in.Items.V {
		if err := statusMissing(docDesired, entryPath{"items", i}.field(""), req{"id", it.ID.Set}, req{"presence", it.Presence.Set}); err != nil {
			return err
		}
		out.Items = append(out.Items, DesiredItem{ID: it.ID.V, Presence: it.Presence.V})
	}
	if err := statusMissing(docDesired, "", req{"revision", in.Revision.Set}, req{"items", in.Items.Set}); err != nil {
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

type edgeIn struct {
	Revision wire.Field[uint64]    `json:"revision"`
	Time     wire.Field[time.Time] `json:"time"`
	Items    wire.List[edgeItemIn] `json:"items"`
}

type edgeItemIn struct {
	ID         wire.Field[ID]        `json:"id"`
	State      wire.Field[EdgeState] `json:"state"`
	WaitingFor wire.Field[[]ID]      `json:"waitingFor"`
	Message    wire.Field[string]    `json:"message"`
	Time       wire.Field[time.Time] `json:"time"`
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
	return e.decode(b, DecodeLimits{})
}

func (e *EdgeReport) decode(b []byte, lim DecodeLimits) error {
	var in edgeIn
	if err := statusDecode(docEdge, b, &in, lim); err != nil {
		return err
	}
	out := EdgeReport{Revision: in.Revision.V, Time: in.Time.V}
	for i, it := range in.Items.V {
		if err := statusMissing(docEdge, entryPath{"items", i}.field(""), req{"id", it.ID.Set}, req{"state", it.State.Set}); err != nil {
			return err
		}
		out.Items = append(out.Items, EdgeItem{ID: it.ID.V, State: it.State.V, WaitingFor: nonEmpty(it.WaitingFor.V), Message: it.Message.V, Time: it.Time.V})
	}
	if err := statusMissing(docEdge, "", req{"revision", in.Revision.Set}, req{"items", in.Items.Set}); err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*e = out
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
	Attention  Attention `json:"review"`
	WaitingFor []ID      `json:"waitingFor,omitempty"`
	Message    string    `json:"message,omitempty"`
	Time       time.Time `json:"time,omitzero"`
}

type statusDroppedWire struct {
	ID        ID        `json:"id"`
	Edge      EdgeState `json:"edge"`
	Attention Attention `json:"review"`
	Message   string    `json:"message,omitempty"`
	Time      time.Time `json:"time,omitzero"`
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
		case int(it.Attention) >= len(reviewNames):
			return &StatusFieldError{Doc: doc, Field: p.field("review"), Value: it.Attention.String(), Err: ErrStatusUnknownValue}
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
		case int(d.Attention) >= len(reviewNames):
			return &StatusFieldError{Doc: doc, Field: p.field("review"), Value: d.Attention.String(), Err: ErrStatusUnknownValue}
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
			ID: it.ID, Desired: it.Desired.String(), Edge: it.Edge, Status: it.Status, Attention: it.Attention,
			WaitingFor: it.WaitingFor, Message: it.Message, Time: it.Time,
		}
	}
	for i, d := range s.Dropped {
		w.Dropped[i] = statusDroppedWire(d)
	}
	return json.Marshal(w)
}

type statusIn struct {
	Revision     wire.Field[uint64]      `json:"revision"`
	EdgeRevision wire.Field[uint64]      `json:"edgeRevision"`
	Reported     wire.Field[bool]        `json:"reported"`
	EdgeTime     wire.Field[time.Time]   `json:"edgeTime"`
	Ready        wire.Field[bool]        `json:"ready"`
	Items        wire.List[statusItemIn] `json:"items"`
	Dropped      wire.List[statusDropIn] `json:"dropped"`
}

type statusItemIn struct {
	ID         wire.Field[ID]        `json:"id"`
	Desired    wire.Field[Presence]  `json:"desired"`
	Edge       wire.Field[EdgeState] `json:"edge"`
	Status     wire.Field[Status]    `json:"status"`
	Attention  wire.Field[Attention] `json:"review"`
	WaitingFor wire.Field[[]ID]      `json:"waitingFor"`
	Message    wire.Field[string]    `json:"message"`
	Time       wire.Field[time.Time] `json:"time"`
}

type statusDropIn struct {
	ID        wire.Field[ID]        `json:"id"`
	Edge      wire.Field[EdgeState] `json:"edge"`
	Attention wire.Field[Attention] `json:"review"`
	Message   wire.Field[string]    `json:"message"`
	Time      wire.Field[time.Time] `json:"time"`
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
	return s.decode(b, DecodeLimits{})
}

func (s *StatusReport) decode(b []byte, lim DecodeLimits) error {
	var in statusIn
	if err := statusDecode(docStatus, b, &in, lim); err != nil {
		return err
	}
	out := StatusReport{Revision: in.Revision.V, EdgeRevision: in.EdgeRevision.V, Reported: in.Reported.V, EdgeTime: in.EdgeTime.V}
	for i, it := range in.Items.V {
		err := statusMissing(docStatus, entryPath{"items", i}.field(""), req{"id", it.ID.Set}, req{"desired", it.Desired.Set},
			req{"edge", it.Edge.Set}, req{"status", it.Status.Set}, req{"review", it.Attention.Set})
		if err != nil {
			return err
		}
		out.Items = append(out.Items, StatusItem{ID: it.ID.V, Desired: it.Desired.V, Edge: it.Edge.V, Status: it.Status.V,
			Attention: it.Attention.V, WaitingFor: nonEmpty(it.WaitingFor.V), Message: it.Message.V, Time: it.Time.V})
	}
	for i, d := range in.Dropped.V {
		if err := statusMissing(docStatus, entryPath{"dropped", i}.field(""), req{"id", d.ID.Set}, req{"edge", d.Edge.Set}, req{"review", d.Attention.Set}); err != nil {
			return err
		}
		out.Dropped = append(out.Dropped, StatusDropped{ID: d.ID.V, Edge: d.Edge.V, Attention: d.Attention.V, Message: d.Message.V, Time: d.Time.V})
	}
	if err := statusMissing(docStatus, "", req{"revision", in.Revision.Set}, req{"items", in.Items.Set}); err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	if in.Ready.Set && in.Ready.V != out.Ready() {
		return &StatusFieldError{Doc: docStatus, Field: "ready", Value: fmt.Sprint(in.Ready.V), Err: ErrStatusInconsistent}
	}
	*s = out
	return nil
}

// DecodeDesired decodes a desired configuration as Desired.UnmarshalJSON
// does, with the caps of lim instead of the defaults.
func DecodeDesired(b []byte, lim DecodeLimits) (*Desired, error) {
	var c Desired
	if err := c.decode(b, lim); err != nil {
		return nil, err
	}
	return &c, nil
}

// DecodeEdgeReport decodes an edge report as EdgeReport.UnmarshalJSON
// does, with the caps of lim instead of the defaults. It is the decoder
// for reports from devices a program does not control: the cap is checked
// before anything is decoded, so an oversized report costs only its bytes.
func DecodeEdgeReport(b []byte, lim DecodeLimits) (*EdgeReport, error) {
	var e EdgeReport
	if err := e.decode(b, lim); err != nil {
		return nil, err
	}
	return &e, nil
}

// DecodeStatusReport decodes a status report as StatusReport.UnmarshalJSON
// does, with the caps of lim instead of the defaults.
func DecodeStatusReport(b []byte, lim DecodeLimits) (*StatusReport, error) {
	var s StatusReport
	if err := s.decode(b, lim); err != nil {
		return nil, err
	}
	return &s, nil
}

// statusDecode reads the status document b of kind doc into in, after
// checking its size against lim, naming the culprit of a problem in a
// *StatusFieldError.
func statusDecode(doc string, b []byte, in any, lim DecodeLimits) error {
	if err := lim.Check(doc, len(b)); err != nil {
		return err
	}
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return &StatusFieldError{Doc: doc, Value: "<nil>", Err: fmt.Errorf("%w: want an object", ErrStatusMalformed)}
	}
	we := wire.Decode(b, in)
	if we == nil {
		return nil
	}
	fail := func(value string, err error) error {
		return &StatusFieldError{Doc: doc, Field: we.Path, Value: value, Err: err}
	}
	var fe *StatusFieldError
	var ne *NameError
	switch {
	case we.Dup:
		return fail("", ErrStatusDuplicateField)
	case we.Unknown:
		return fail("", ErrStatusUnknownField)
	case errors.As(we.Err, &fe):
		return fail(fe.Value, fe.Err)
	case errors.As(we.Err, &ne):
		return fail(ne.Name, ErrStatusUnknownValue)
	case errors.Is(we.Err, wire.ErrNull):
		return fail("null", ErrStatusMalformed)
	}
	return fail(we.Token, fmt.Errorf("%w: %w", ErrStatusMalformed, we.Err))
}

// req is a required field of a document and whether it was there.
type req struct {
	name string
	set  bool
}

// statusMissing names the first field of fs (of the object at path) that
// is missing.
func statusMissing(doc, path string, fs ...req) error {
	for _, f := range fs {
		if !f.set {
			field := f.name
			if path != "" {
				field = path + "." + f.name
			}
			return &StatusFieldError{Doc: doc, Field: field, Err: ErrStatusMissingField}
		}
	}
	return nil
}

// nonEmpty returns ids, or nil when it is empty.
func nonEmpty(ids []ID) []ID {
	if len(ids) == 0 {
		return nil
	}
	return ids
}
