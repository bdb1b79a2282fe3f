package converge

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// The documents of this package (plan, desired configuration, edge and
// status report) are read by one strict JSON decoder,
// github.com/go-json-experiment/json (the reference implementation of
// encoding/json/v2): it refuses repeated member names, unknown members
// (with wireStrict), and data after the value, and its errors carry the
// JSON pointer of the culprit, which wirePath turns into the field paths
// the errors of this package name ("spec.commands[0].kind").

// wireStrict are the options every document is read with. Invalid UTF-8 is
// read as encoding/json reads it (replaced by U+FFFD), as it was before
// the library change.
var wireStrict = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true), jsontext.AllowInvalidUTF8(true))

// errWireNull is the cause of a null where a value is expected.
var errWireNull = errors.New("null is not a value")

// wireField is a field of a document as read: null is refused (it would
// silently mean "zero"), and Set records that the field was there, so that
// a missing required field can be named.
type wireField[T any] struct {
	V   T
	Set bool
}

// UnmarshalJSONFrom reads the field's value; null is an error.
func (f *wireField[T]) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() == 'n' {
		return errWireNull
	}
	if err := jsonv2.UnmarshalDecode(dec, &f.V); err != nil {
		return err
	}
	f.Set = true
	return nil
}

// wireError is what a failed read of a document says: the path of the
// culprit, the cause, and the culprit as the token that is at fault when
// the value read has the wrong kind for a list or an object (such as "["
// for a list where an object belongs); it is "" otherwise.
type wireError struct {
	path  string
	err   error
	token string
	// dup and unknown say that the culprit is a member name, repeated or
	// unknown.
	dup, unknown bool
}

// wireDecode reads the JSON document b strictly into v and describes the
// first problem.
func wireDecode(b []byte, v any) *wireError {
	err := jsonv2.Unmarshal(b, v, wireStrict)
	if err == nil {
		return nil
	}
	var se *jsonv2.SemanticError
	var sy *jsontext.SyntacticError
	switch {
	case errors.As(err, &sy):
		dup := errors.Is(sy.Err, jsontext.ErrDuplicateName)
		return &wireError{path: wirePath(sy.JSONPointer, dup), err: sy.Err, dup: dup}
	case errors.As(err, &se):
		unknown := errors.Is(se.Err, jsonv2.ErrUnknownName)
		we := &wireError{path: wirePath(se.JSONPointer, unknown), err: se.Err, unknown: unknown}
		if se.Err == nil && se.GoType != nil {
			// The value has the wrong kind: name what is there instead.
			we.err = errors.New("want " + wireKind(se.GoType.Kind().String()) + ", got " + se.JSONKind.String())
			if k := se.GoType.Kind().String(); k == "struct" || k == "slice" || k == "map" {
				we.token = wireToken(b, se.ByteOffset)
			}
		}
		return we
	}
	return &wireError{err: err}
}

// wireKind names the JSON kind a Go kind is read from.
func wireKind(goKind string) string {
	switch goKind {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "a list"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	}
	return "a number"
}

// wireToken returns the token at offset off of b: a string unquoted, any
// other token as written.
func wireToken(b []byte, off int64) string {
	if off < 0 || off > int64(len(b)) {
		return ""
	}
	tok, err := jsontext.NewDecoder(bytes.NewReader(b[off:])).ReadToken()
	if err != nil {
		return ""
	}
	return tok.String()
}

// wirePath turns a JSON pointer into a field path: names joined by dots,
// array indexes in brackets ("items[3].state"). A token of digits is an
// index, except the last one when name says that the culprit is a member
// name.
func wirePath(p jsontext.Pointer, name bool) string {
	var b strings.Builder
	n := strings.Count(string(p), "/") // the number of tokens
	i := 0
	for tok := range p.Tokens() {
		i++
		if _, err := strconv.ParseUint(tok, 10, 64); err == nil && !(name && i == n) {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// wireList is a list of a document as read: null reads as an empty list,
// and Set records that the list was there.
type wireList[T any] struct {
	V   []T
	Set bool
}

// UnmarshalJSONFrom reads the list; null is an empty list.
func (l *wireList[T]) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	l.Set = true
	if dec.PeekKind() == 'n' {
		_, err := dec.ReadToken()
		return err
	}
	return jsonv2.UnmarshalDecode(dec, &l.V)
}
