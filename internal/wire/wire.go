// Package wire reads the JSON documents of converge's packages (plans,
// desired configurations, edge and status reports) with one strict
// decoder and names the culprit of a failed read by its field path.
package wire

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// The documents (plan, desired configuration, edge and status report) are
// read by one strict JSON decoder,
// github.com/go-json-experiment/json (the reference implementation of
// encoding/json/v2): it refuses repeated member names, unknown members
// and data after the value, and its errors carry the JSON pointer of the
// culprit, which Path turns into the field paths that the packages' errors
// name ("spec.commands[0].kind").

// strict are the options every document is read with: unknown members
// are refused, and so is invalid UTF-8 (jsontext refuses it by default),
// where encoding/json would replace it by U+FFFD and read wrong data as
// good.
var strict = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true))

// ErrNull is the cause of a null where a value is expected.
var ErrNull = errors.New("null is not a value")

// Field is a field of a document as read: null is refused (it would
// silently mean "zero"), and Set records that the field was there, so that
// a missing required field can be named.
type Field[T any] struct {
	V   T
	Set bool
}

// UnmarshalJSONFrom reads the field's value; null is an error.
func (f *Field[T]) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() == 'n' {
		return ErrNull
	}
	if err := jsonv2.UnmarshalDecode(dec, &f.V); err != nil {
		return err
	}
	f.Set = true
	return nil
}

// Problem is what a failed read of a document says: the path of the
// culprit (Path), the cause (Err), and the culprit as the token that is at
// fault (Token) when the value read has the wrong kind for a list or an
// object (such as "[" for a list where an object belongs); Token is ""
// otherwise.
type Problem struct {
	Path  string
	Err   error
	Token string
	// Dup and Unknown say that the culprit is a member name, repeated or
	// unknown.
	Dup, Unknown bool
}

// Decode reads the JSON document b strictly into v and describes the
// first problem.
func Decode(b []byte, v any) *Problem {
	err := jsonv2.Unmarshal(b, v, strict)
	if err == nil {
		return nil
	}
	var se *jsonv2.SemanticError
	var sy *jsontext.SyntacticError
	switch {
	case errors.As(err, &sy):
		dup := errors.Is(sy.Err, jsontext.ErrDuplicateName)
		return &Problem{Path: Path(sy.JSONPointer, dup), Err: sy.Err, Dup: dup}
	case errors.As(err, &se):
		unknown := errors.Is(se.Err, jsonv2.ErrUnknownName)
		we := &Problem{Path: Path(se.JSONPointer, unknown), Err: se.Err, Unknown: unknown}
		if se.Err == nil && se.GoType != nil {
			// The value has the wrong kind: name what is there instead.
			we.Err = errors.New("want " + kind(se.GoType.Kind().String()) + ", got " + se.JSONKind.String())
			if k := se.GoType.Kind().String(); k == "struct" || k == "slice" || k == "map" {
				we.Token = token(b, se.ByteOffset)
			}
		}
		return we
	}
	return &Problem{Err: err}
}

// kind names the JSON kind a Go kind is read from.
func kind(goKind string) string {
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

// token returns the token at offset off of b: a string unquoted, any
// other token as written.
func token(b []byte, off int64) string {
	if off < 0 || off > int64(len(b)) {
		return ""
	}
	tok, err := jsontext.NewDecoder(bytes.NewReader(b[off:])).ReadToken()
	if err != nil {
		return ""
	}
	return tok.String()
}

// Path turns a JSON pointer into a field path: names joined by dots,
// array indexes in brackets ("items[3].state"). A token of digits is an
// index, except the last one when name says that the culprit is a member
// name.
func Path(p jsontext.Pointer, name bool) string {
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

// List is a list of a document as read: null reads as an empty list,
// and Set records that the list was there.
type List[T any] struct {
	V   []T
	Set bool
}

// UnmarshalJSONFrom reads the list; null is an empty list.
func (l *List[T]) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	l.Set = true
	if dec.PeekKind() == 'n' {
		_, err := dec.ReadToken()
		return err
	}
	return jsonv2.UnmarshalDecode(dec, &l.V)
}
