package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// AddObject stores a new object of kind under key in store, in state with
// data (nil for none), its history starting with an entry into state:
// what Controller.Add stores, without a Controller, so that a program
// that only feeds objects (an API server, a seeding step, a test) needs no
// handler. It fails with an *ObjectError: ErrObjectExists when key is
// stored already, ErrObjectInvalid for an empty key or state, data that is
// not JSON, a kind that is empty or holds '/', or a nil store.
//
// A Controller of kind on the same store handles the object once it sees
// it: a replica sharing a converge.Queue (Config.Owner set) claims it as
// soon as it is due, which a new record is at once; a controller on its
// own sees it when it lists the store, at Run and at every periodic pass
// (Config.Resync). Object.Since and the history entry are stamped with
// time.Now.
func AddObject(ctx context.Context, store converge.Store, kind, key string, state State, data json.RawMessage) error {
	_, err := addObject(ctx, store, kind, key, state, data, time.Now())
	return err
}

// addObject stores a new object as AddObject does, at now, and returns it
// with its version.
func addObject(ctx context.Context, store converge.Store, kind, key string, state State, data json.RawMessage, now time.Time) (*Object, error) {
	return addPrioritized(ctx, store, NewObject{Key: key, State: state, Data: data}, kind, now)
}

// addPrioritized stores the new object o as AddObject does, with its
// priority, at now, and returns it with its version.
func addPrioritized(ctx context.Context, store converge.Store, o NewObject, kind string, now time.Time) (*Object, error) {
	key, state, data := o.Key, o.State, o.Data
	invalid := func(why string) error {
		return &ObjectError{Kind: kind, Key: key, Err: fmt.Errorf("%w: %s", ErrObjectInvalid, why)}
	}
	switch {
	case kind == "" || strings.Contains(kind, "/"):
		return nil, invalid("the kind must not be empty nor contain '/'")
	case store == nil:
		return nil, invalid("nil store")
	case key == "":
		return nil, invalid("empty key")
	case state == "":
		return nil, invalid("empty state")
	case data != nil && !json.Valid(data):
		return nil, invalid("data is not valid JSON")
	}
	if why := checkPriority(store, o.Priority); why != "" {
		return nil, invalid(why)
	}
	obj := &Object{Key: key, State: state, Since: now, Data: slices.Clone(data), Priority: o.Priority}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, &ObjectError{Kind: kind, Key: key, Err: err}
	}
	rec := converge.StoreRecord{Key: kind + "/" + key, Value: b}
	added := converge.HistoryEntry{At: now, To: string(state), Reason: "added"}
	var v uint64
	if o.Priority != 0 {
		v, err = store.(converge.Prioritizer).PutPriority(ctx, rec, o.Priority, added)
	} else {
		v, err = store.Put(ctx, rec, added)
	}
	if errors.Is(err, converge.ErrStoreStale) {
		return nil, &ObjectError{Kind: kind, Key: key, Err: ErrObjectExists}
	}
	if err != nil {
		return nil, &ObjectError{Kind: kind, Key: key, Err: err}
	}
	obj.Version = v
	return obj, nil
}

// StoredObjects reads the stored objects of the controller's kind, sorted
// by key: what every replica and earlier run left, as it is now (Objects
// returns this controller's own view, without reading the store). A record
// under the kind that does not decode fails the call, naming it.
func (c *Controller) StoredObjects(ctx context.Context) ([]Object, error) {
	recs, err := c.cfg.Store.List(ctx, c.prefix)
	if err != nil {
		return nil, fmt.Errorf("controller: list %s: %w", c.cfg.Kind, err)
	}
	out := make([]Object, 0, len(recs))
	for _, rec := range recs {
		obj, err := c.decode(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, *obj)
	}
	return out, nil
}

// NewObject is one object for AddObjects and Controller.AddMany to add:
// its key, its first state and its data (nil for none).
type NewObject struct {
	Key   string
	State State
	Data  json.RawMessage
	// Priority is the object's priority (Object.Priority): 0, the
	// default, to converge.MaxPriority. A priority other than 0 needs a
	// store that keeps priorities (a converge.Prioritizer).
	Priority int
}

// AddObjects stores new objects of kind in store in one atomic write, as
// AddObject stores one: each in its state with its data, its history
// starting with an entry into the state, all stamped with time.Now. It
// adds all of them or none: when some are stored already it fails with an
// *ObjectsExistError naming them all; an invalid object (as for
// AddObject, or a key given twice) fails with an *ObjectError naming it.
// The store must implement converge.Creator (MemStore, boltstore and
// pgstore do); pgstore writes thousands of objects in one statement.
// Adding no objects does nothing.
func AddObjects(ctx context.Context, store converge.Store, kind string, objs []NewObject) error {
	_, err := addObjects(ctx, store, kind, objs, time.Now())
	return err
}

// AddMany stores new objects as AddObjects does, all or none, and, when
// the controller runs, queues them (a replica's are due at once in the
// store).
func (c *Controller) AddMany(ctx context.Context, objs []NewObject) error {
	added, err := addObjects(ctx, c.cfg.Store, c.cfg.Kind, objs, c.now())
	for _, obj := range added {
		c.adopt(obj, true)
	}
	return err
}

// addObjects stores new objects as AddObjects does, at now, and returns
// them with their versions.
func addObjects(ctx context.Context, store converge.Store, kind string, objs []NewObject, now time.Time) ([]*Object, error) {
	invalid := func(key, why string) error {
		return &ObjectError{Kind: kind, Key: key, Err: fmt.Errorf("%w: %s", ErrObjectInvalid, why)}
	}
	switch {
	case kind == "" || strings.Contains(kind, "/"):
		return nil, invalid("", "the kind must not be empty nor contain '/'")
	case store == nil:
		return nil, invalid("", "nil store")
	case len(objs) == 0:
		return nil, nil
	}
	cr, ok := store.(converge.Creator)
	if !ok {
		return nil, invalid("", fmt.Sprintf("store %T cannot add objects in one write (it does not implement converge.Creator)", store))
	}
	prefix := kind + "/"
	enc, err := newAddedEncoder(now)
	if err != nil {
		return nil, &ObjectError{Kind: kind, Err: err}
	}
	out := make([]*Object, len(objs))
	recs := make([]converge.NewRecord, len(objs))
	seen := make(map[string]struct{}, len(objs))
	for i, o := range objs {
		_, dup := seen[o.Key]
		switch {
		case o.Key == "":
			return nil, invalid(o.Key, fmt.Sprintf("objs[%d]: empty key", i))
		case dup:
			return nil, invalid(o.Key, fmt.Sprintf("objs[%d]: key given twice", i))
		case o.State == "":
			return nil, invalid(o.Key, "empty state")
		case o.Data != nil && !json.Valid(o.Data):
			return nil, invalid(o.Key, "data is not valid JSON")
		}
		if why := checkPriority(store, o.Priority); why != "" {
			return nil, invalid(o.Key, why)
		}
		seen[o.Key] = struct{}{}
		obj := &Object{Key: o.Key, State: o.State, Since: now, Data: slices.Clone(o.Data), Priority: o.Priority}
		b, err := enc.encode(obj)
		if err != nil {
			return nil, &ObjectError{Kind: kind, Key: o.Key, Err: err}
		}
		out[i] = obj
		recs[i] = converge.NewRecord{Key: prefix + o.Key, Value: b, Priority: o.Priority,
			History: []converge.HistoryEntry{{At: now, To: string(o.State), Reason: "added"}}}
	}
	versions, err := cr.CreateMany(ctx, recs)
	var ee *converge.StoreExistsError
	if errors.As(err, &ee) {
		keys := make([]string, len(ee.Keys))
		for i, k := range ee.Keys {
			keys[i] = strings.TrimPrefix(k, prefix)
		}
		return nil, &ObjectsExistError{Kind: kind, Keys: keys}
	}
	if err != nil {
		return nil, fmt.Errorf("controller: add %d %s objects: %w", len(objs), kind, err)
	}
	for i, v := range versions {
		out[i].Version = v
	}
	return out, nil
}

// addedEncoder writes the stored documents of new objects, all stamped
// with one time, as json.Marshal writes an Object that has only a state,
// a time and data, without its reflection: the time is encoded once, and
// each state once.
type addedEncoder struct {
	since  []byte           // the time, as JSON
	states map[State][]byte // each state, as JSON
	buf    []byte           // the documents, one after the other
}

// addedChunk is how many bytes of documents an addedEncoder allocates at
// once.
const addedChunk = 64 << 10

func newAddedEncoder(since time.Time) (*addedEncoder, error) {
	b, err := json.Marshal(since)
	if err != nil {
		return nil, err
	}
	return &addedEncoder{since: b, states: map[State][]byte{}}, nil
}

// encode returns the document of obj, which must have nothing but a
// State, the encoder's Since, Data (valid JSON) and a Priority, as json.Marshal
// writes it: Data compacted, and, when it holds a character that
// json.Marshal escapes for HTML, by json.Marshal itself.
func (e *addedEncoder) encode(obj *Object) ([]byte, error) {
	if bytes.ContainsAny(obj.Data, "<>&\u2028\u2029") {
		return json.Marshal(obj)
	}
	state, ok := e.states[obj.State]
	if !ok {
		b, err := json.Marshal(obj.State)
		if err != nil {
			return nil, err
		}
		state, e.states[obj.State] = b, b
	}
	if cap(e.buf)-len(e.buf) < len(state)+len(e.since)+len(obj.Data)+32 {
		e.buf = make([]byte, 0, max(addedChunk, len(state)+len(e.since)+len(obj.Data)+32))
	}
	start := len(e.buf)
	e.buf = append(append(append(append(e.buf, `{"state":`...), state...), `,"since":`...), e.since...)
	if obj.Data != nil {
		e.buf = append(e.buf, `,"data":`...)
		w := bytes.NewBuffer(e.buf)
		if err := json.Compact(w, obj.Data); err != nil {
			return nil, err
		}
		e.buf = w.Bytes()
	}
	if obj.Priority != 0 {
		e.buf = strconv.AppendInt(append(e.buf, `,"priority":`...), int64(obj.Priority), 10)
	}
	e.buf = append(e.buf, '}')
	return e.buf[start:len(e.buf):len(e.buf)], nil
}

// encodeObject returns the stored document of obj, as json.Marshal
// writes it. An object that has only a state, a time, a reason and a
// priority (what most writes of a handled object store) is written
// without json.Marshal's reflection, when its strings need no escaping
// and its time is one json.Marshal accepts; any other by json.Marshal.
func encodeObject(obj *Object) ([]byte, error) {
	if !plainObject(obj) {
		return json.Marshal(obj)
	}
	b := make([]byte, 0, 64+len(obj.State)+len(obj.Reason))
	b = append(append(append(b, `{"state":"`...), obj.State...), `","since":"`...)
	b = append(obj.Since.AppendFormat(b, time.RFC3339Nano), '"')
	if obj.Reason != "" {
		b = append(append(append(b, `,"reason":"`...), obj.Reason...), '"')
	}
	if obj.Priority != 0 {
		b = strconv.AppendInt(append(b, `,"priority":`...), int64(obj.Priority), 10)
	}
	return append(b, '}'), nil
}

// plainObject tells whether encodeObject may write obj itself: it has
// nothing but a state, a time, a reason and a priority, its strings are
// printable ASCII that JSON writes as they are (json.Marshal escapes
// '<', '>' and '&' too), and its time is in the years json.Marshal
// writes, in a zone whose offset is whole minutes.
func plainObject(obj *Object) bool {
	if len(obj.Data) != 0 || len(obj.Intents) != 0 || obj.Failures != 0 || obj.Retries != 0 || obj.LastError != nil ||
		!obj.FailingSince.IsZero() || len(obj.RecentFailures) != 0 || obj.Halted != "" || obj.SLABreached || len(obj.Watches) != 0 {
		return false
	}
	if y := obj.Since.Year(); y < 0 || y > 9999 {
		return false
	}
	if _, off := obj.Since.Zone(); off%60 != 0 {
		return false
	}
	return plainString(string(obj.State)) && plainString(obj.Reason)
}

// plainString tells whether JSON writes s, quoted, as it is, and reads
// it back so: printable ASCII without '"', '\\', '<', '>' and '&'.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// unmarshalObject decodes the stored document b into obj, a zero
// Object, as json.Unmarshal does. A document that has only a state, a
// time, a reason and a priority, in the order encodeObject writes them,
// with no space and strings of printable ASCII without escapes, is read
// without json.Unmarshal's reflection; any other by json.Unmarshal.
func unmarshalObject(b []byte, obj *Object) error {
	if plainDecode(b, obj) {
		return nil
	}
	*obj = Object{}
	return json.Unmarshal(b, obj)
}

// plainDecode reads b into obj when b is a document that encodeObject
// writes itself, and tells whether it did; obj may be partly written
// when it did not.
func plainDecode(b []byte, obj *Object) bool {
	rest, ok := bytes.CutPrefix(b, []byte(`{"state":"`))
	if !ok {
		return false
	}
	var state, since []byte
	if state, rest, ok = plainPrefix(rest); !ok {
		return false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"since":"`)); !ok {
		return false
	}
	if since, rest, ok = plainPrefix(rest); !ok {
		return false
	}
	// The time as JSON: the quotes are around it in b.
	quoted := b[len(b)-len(rest)-len(since)-2 : len(b)-len(rest)]
	if obj.Since.UnmarshalJSON(quoted) != nil {
		return false
	}
	if r, found := bytes.CutPrefix(rest, []byte(`,"reason":"`)); found {
		var reason []byte
		if reason, rest, ok = plainPrefix(r); !ok {
			return false
		}
		obj.Reason = string(reason)
	}
	if r, found := bytes.CutPrefix(rest, []byte(`,"priority":`)); found {
		end := 0
		for end < len(r) && (r[end] >= '0' && r[end] <= '9' || end == 0 && r[end] == '-') {
			end++
		}
		digits := r[:end]
		if d, _ := bytes.CutPrefix(digits, []byte("-")); len(d) == 0 || len(d) > 1 && d[0] == '0' {
			return false
		}
		p, err := strconv.Atoi(string(digits))
		if err != nil {
			return false
		}
		obj.Priority, rest = p, r[end:]
	}
	if len(rest) != 1 || rest[0] != '}' {
		return false
	}
	obj.State = State(state)
	return true
}

// plainPrefix splits b, which follows an opening quote, at its closing
// quote: the string before it, when it is printable ASCII without
// escapes, and what follows the quote.
func plainPrefix(b []byte) (s, rest []byte, ok bool) {
	for i, c := range b {
		switch {
		case c == '"':
			return b[:i], b[i+1:], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, nil, false
		}
	}
	return nil, nil, false
}
