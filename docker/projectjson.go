package docker

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/convergekit/converge/internal/wire"
)

// ProjectFormat is the version of the JSON form of a Project that
// Project.MarshalJSON writes, in its "format" member. A document without
// that member is v0.1.0's form (Go field names, enums as numbers,
// durations in nanoseconds), which UnmarshalJSON still reads.
const ProjectFormat = 2

// ErrUnknownFormat means a stored Project names a format version this
// package does not know (written by a newer version).
var ErrUnknownFormat = errors.New("unknown format version")

// DecodeError is the error of a stored Project (its JSON form) that
// cannot be read: a syntax error, an unknown or repeated field, a value of
// the wrong kind, an unknown enum name, or an unknown format version.
// Nothing is decoded when it is returned.
type DecodeError struct {
	// Format is the format version of the document: ProjectFormat, or 0
	// for v0.1.0's form.
	Format int
	// Path is the field path of the culprit ("services[0].run"), in the
	// names of the document's format; "" when the culprit is the document.
	Path string
	Err  error
}

// Error describes the problem, naming its culprit.
func (e *DecodeError) Error() string {
	at := ""
	if e.Path != "" {
		at = e.Path + ": "
	}
	return fmt.Sprintf("docker: stored project (format %d): %s%s", e.Format, at, reason(e.Err))
}

// Unwrap returns the cause.
func (e *DecodeError) Unwrap() error { return e.Err }

// projectPlain is a Project without its JSON methods.
type projectPlain Project

// projectDoc is the JSON form of a Project.
type projectDoc struct {
	Format        int `json:"format"`
	*projectPlain `json:",inline"`
}

// MarshalJSON writes the project's JSON form: the format version
// (ProjectFormat) and the fields in Compose's vocabulary ("services",
// "image", "environment", "depends_on", "stop_grace_period"), enums by
// name, durations as text ("1m30s"), zero values left out. The runtime
// fields (Metrics, Logger, HashKey) are never written: a stored target
// carries no key. An enum value out of range is an error.
func (p Project) MarshalJSON() ([]byte, error) {
	b, err := jsonv2.Marshal(projectDoc{Format: ProjectFormat, projectPlain: (*projectPlain)(&p)}, jsonv2.Deterministic(true))
	var se *jsonv2.SemanticError
	if errors.As(err, &se) && se.Err != nil {
		return nil, fmt.Errorf("docker: project %s: %s: %w", p.Name, wire.Path(se.JSONPointer, false), se.Err)
	}
	if err != nil {
		return nil, fmt.Errorf("docker: project %s: encode: %w", p.Name, err)
	}
	return b, nil
}

// UnmarshalJSON reads a stored project strictly: unknown and repeated
// fields, trailing data, invalid UTF-8 and unknown enum names are refused
// with a *DecodeError naming the culprit, and p is left as it was. A
// document without a "format" member is read as v0.1.0 wrote it; its
// HashKey, which v0.1.0 stored in clear, is dropped (give the key at run
// time: Runtime, LoadHashKey).
func (p *Project) UnmarshalJSON(b []byte) error {
	format := 0
	if v, ok := peekFormat(b); ok {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 {
			return &DecodeError{Path: "format", Err: &causeError{msg: fmt.Sprintf("%s is not a format version", v), err: ErrUnknownFormat}}
		}
		format = n
	}
	var out Project
	switch format {
	case ProjectFormat:
		doc := projectDoc{projectPlain: (*projectPlain)(&out)}
		if err := decodeStrict(format, b, &doc); err != nil {
			return err
		}
	case 0:
		nb, err := fromV010(b)
		if err != nil {
			return err
		}
		if err := decodeStrict(format, nb, (*projectPlain)(&out)); err != nil {
			return err
		}
	default:
		return &DecodeError{Format: format, Path: "format", Err: &causeError{
			msg: fmt.Sprintf("%v %d (this version reads %d and v0.1.0's form)", ErrUnknownFormat, format, ProjectFormat), err: ErrUnknownFormat}}
	}
	*p = out
	return nil
}

// peekFormat returns the value of the "format" member of the object b,
// when b is an object that has one before anything wrong with it; the
// decoder of the format then reads the whole document strictly.
func peekFormat(b []byte) (jsontext.Value, bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, false
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, false
		}
		name := tok.String()
		v, err := dec.ReadValue()
		if err != nil {
			return nil, false
		}
		if name == "format" {
			return v, true
		}
	}
	return nil, false
}

// decodeStrict reads b into v with the core's strict decoder; a problem
// is a *DecodeError naming the culprit's path.
func decodeStrict(format int, b []byte, v any) error {
	pr := wire.Decode(b, v)
	if pr == nil {
		return nil
	}
	var se *jsonv2.SemanticError
	if err := jsonv2.Unmarshal(b, v, jsonv2.RejectUnknownMembers(true)); errors.As(err, &se) && se.GoType != nil && se.JSONKind != '"' {
		// A value of the wrong kind for a duration or an enum: say what
		// the form wants.
		switch {
		case se.GoType == durationType:
			pr.Err = fmt.Errorf("want a duration as text (\"10s\"), got %s", se.JSONKind)
		case se.GoType.Kind() == reflect.Uint8 && se.GoType.Implements(textMarshalerType):
			pr.Err = fmt.Errorf("want a name, got %s", se.JSONKind)
		}
	}
	return problemError(format, pr)
}

// problemError turns a problem of the strict decoder into a *DecodeError.
func problemError(format int, pr *wire.Problem) error {
	switch {
	case pr.Dup:
		return &DecodeError{Format: format, Path: pr.Path, Err: errors.New("repeated field")}
	case pr.Unknown:
		return &DecodeError{Format: format, Path: pr.Path, Err: errors.New("unknown field")}
	}
	return &DecodeError{Format: format, Path: pr.Path, Err: pr.Err}
}

// fromV010 rewrites a project as v0.1.0 stored it (encoding/json of the
// untagged structs) into the current form, guided by the Go types: Go
// field names become the JSON names of the tags, enum numbers their names,
// durations in nanoseconds text; fields that are no longer stored
// (HashKey) are dropped, and a field no type has is refused.
func fromV010(b []byte) ([]byte, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	var out bytes.Buffer
	enc := jsontext.NewEncoder(&out)
	fail := func(err error) error {
		var se *jsontext.SyntacticError
		if errors.As(err, &se) {
			return &DecodeError{Path: wire.Path(se.JSONPointer, false), Err: se.Err}
		}
		var de *DecodeError
		if errors.As(err, &de) {
			return de
		}
		return &DecodeError{Path: wire.Path(dec.StackPointer(), false), Err: err}
	}
	if err := translateV010(dec, enc, reflect.TypeFor[Project]()); err != nil {
		return nil, fail(err)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the project")
		}
		return nil, fail(err)
	}
	return out.Bytes(), nil
}

var (
	durationType      = reflect.TypeFor[time.Duration]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// translateV010 copies one value of Go type t from dec to enc, rewritten
// as fromV010 says. A value of another kind than t's is copied as it is,
// for the strict decoder to refuse with its path.
func translateV010(dec *jsontext.Decoder, enc *jsontext.Encoder, t reflect.Type) error {
	kind := dec.PeekKind()
	switch {
	case kind == 'n':
	case t == durationType && kind == '0':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(tok.String(), 10, 64)
		if err != nil {
			return fmt.Errorf("%s is not a duration in nanoseconds", tok.String())
		}
		return enc.WriteToken(jsontext.String(time.Duration(n).String()))
	case t.Kind() == reflect.Uint8 && t.Implements(textMarshalerType) && kind == '0':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		n, err := strconv.ParseUint(tok.String(), 10, 8)
		if err != nil {
			return fmt.Errorf("%s is not a %s", tok.String(), t.Name())
		}
		v := reflect.New(t).Elem()
		v.SetUint(n)
		name, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return err
		}
		return enc.WriteToken(jsontext.String(string(name)))
	case t.Kind() == reflect.Pointer:
		return translateV010(dec, enc, t.Elem())
	case t.Kind() == reflect.Struct && kind == '{':
		return translateObject(dec, enc, func(name string) (string, reflect.Type, error) {
			f, ok := t.FieldByName(name)
			if !ok || !f.IsExported() || f.Anonymous {
				return "", nil, errors.New("unknown field")
			}
			json, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if json == "-" {
				return "", nil, nil
			}
			return json, f.Type, nil
		})
	case t.Kind() == reflect.Map && kind == '{':
		return translateObject(dec, enc, func(name string) (string, reflect.Type, error) { return name, t.Elem(), nil })
	case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 && kind == '[':
		if err := copyToken(dec, enc); err != nil {
			return err
		}
		for dec.PeekKind() != ']' {
			if err := translateV010(dec, enc, t.Elem()); err != nil {
				return err
			}
		}
		return copyToken(dec, enc)
	}
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	return enc.WriteValue(v)
}

// translateObject copies an object member by member: field names a
// member's new name and Go type, or "" to drop it.
func translateObject(dec *jsontext.Decoder, enc *jsontext.Encoder, field func(string) (string, reflect.Type, error)) error {
	if err := copyToken(dec, enc); err != nil {
		return err
	}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		name, t, err := field(tok.String())
		if err != nil {
			return err
		}
		if name == "" {
			if err := dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		if err := enc.WriteToken(jsontext.String(name)); err != nil {
			return err
		}
		if err := translateV010(dec, enc, t); err != nil {
			return err
		}
	}
	return copyToken(dec, enc)
}

func copyToken(dec *jsontext.Decoder, enc *jsontext.Encoder) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	return enc.WriteToken(tok)
}

// parseName returns the index of s in names, or an error naming what kind
// of value s is not.
func parseName(kind, s string, names []string) (int, error) {
	for i, n := range names {
		if n == s {
			return i, nil
		}
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	return 0, &causeError{msg: fmt.Sprintf("unknown %s %q (want %s)", kind, s, want), err: ErrInvalidSpec}
}

// nameOf returns names[v], or an error for a value out of range.
func nameOf(kind string, v uint8, names []string) ([]byte, error) {
	if int(v) < len(names) {
		return []byte(names[v]), nil
	}
	return nil, &causeError{msg: fmt.Sprintf("unknown %s %d", kind, v), err: ErrInvalidSpec}
}

var (
	runModeNames  = []string{"running", "stopped", "once"}
	updateNames   = []string{"download-then-kill", "kill-then-download", "delete-then-download", "hand-over", "auto"}
	pullNames     = []string{"missing", "never", "always", "refresh"}
	conditionKind = "depends_on condition"
)

// MarshalText returns the name of the run mode: "running", "stopped" or
// "once".
func (m RunMode) MarshalText() ([]byte, error) { return nameOf("run mode", uint8(m), runModeNames) }

// UnmarshalText reads a run mode by name, refusing any other.
func (m *RunMode) UnmarshalText(b []byte) error {
	i, err := parseName("run mode", string(b), runModeNames)
	*m = RunMode(i)
	return err
}

// MarshalText returns the Compose name of the condition.
func (c Condition) MarshalText() ([]byte, error) {
	return nameOf(conditionKind, uint8(c), conditionNames[:])
}

// UnmarshalText reads a condition by its Compose name, refusing any other.
func (c *Condition) UnmarshalText(b []byte) error {
	i, err := parseName(conditionKind, string(b), conditionNames[:])
	*c = Condition(i)
	return err
}

// MarshalText returns the strategy's name (see String).
func (u UpdateStrategy) MarshalText() ([]byte, error) {
	return nameOf("update strategy", uint8(u), updateNames)
}

// UnmarshalText reads an update strategy by name, refusing any other.
func (u *UpdateStrategy) UnmarshalText(b []byte) error {
	i, err := parseName("update strategy", string(b), updateNames)
	*u = UpdateStrategy(i)
	return err
}

// String returns the name of the policy: "missing", "never", "always" or
// "refresh".
func (p PullPolicy) String() string {
	if int(p) < len(pullNames) {
		return pullNames[p]
	}
	return fmt.Sprintf("pullpolicy(%d)", uint8(p))
}

// MarshalText returns the Compose name of the policy.
func (p PullPolicy) MarshalText() ([]byte, error) { return nameOf("pull policy", uint8(p), pullNames) }

// UnmarshalText reads a pull policy by its Compose name, refusing any
// other.
func (p *PullPolicy) UnmarshalText(b []byte) error {
	i, err := parseName("pull policy", string(b), pullNames)
	*p = PullPolicy(i)
	return err
}
