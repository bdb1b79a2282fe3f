// Package strictjson checks JSON documents for what encoding/json lets
// through: a key repeated within one object (encoding/json keeps the last
// one silently) and data after the value. The plan decoders of the module
// call Check before decoding, so that a repeated key is an error naming its
// path, never a silent "last one wins".
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

var (
	// ErrDuplicateKey means an object repeats a key; see *Error.
	ErrDuplicateKey = errors.New("duplicate key")
	// ErrTrailingData means something follows the value.
	ErrTrailingData = errors.New("data after the value")
)

// Error names the place in a document that is at fault.
type Error struct {
	// Path is the path of the culprit, such as "spec.commands[0].kind":
	// keys joined by dots, array indexes in brackets; "" for the document.
	Path string
	Err  error
}

// Error describes the problem, naming its path.
func (e *Error) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Check reads the JSON value raw once and reports the first key repeated
// within one object (a *Error matching ErrDuplicateKey whose Path is the
// repeated key's path) or data after the value (a *Error matching
// ErrTrailingData). Syntax errors are returned as encoding/json reports
// them. Check decodes nothing: a document that passes may still fail to
// decode for other reasons.
//
// A valid document is scanned byte by byte without allocating, except for
// keys written with escapes; an invalid one is read again token by token,
// so that the error is the one encoding/json gives.
func Check(raw []byte) error {
	if !json.Valid(raw) {
		if err := checkTokens(raw); err != nil {
			return err
		}
		return errors.New("invalid JSON") // json.Valid and the decoder disagree: never seen
	}
	var sc scanner
	return sc.scan(raw)
}

// frame is one open object or array of a valid document being scanned.
type frame struct {
	array bool
	index int      // arrays: the index of the current element
	key   []byte   // objects: the current key, unescaped
	keys  [][]byte // objects: the keys seen so far
	set   map[string]struct{}
}

// manyKeys is the number of keys of one object beyond which repeats are
// found through a map instead of comparing with every earlier key.
const manyKeys = 16

type scanner struct {
	stack []frame
}

// scan walks a document that json.Valid accepted; on any other it stops
// without panicking.
func (sc *scanner) scan(raw []byte) error {
	expectKey := false
	for i := 0; i < len(raw); {
		switch c := raw[i]; c {
		case '{':
			sc.push(false)
			expectKey = true
			i++
		case '[':
			sc.push(true)
			i++
		case '}', ']':
			if len(sc.stack) == 0 {
				return nil // not valid JSON
			}
			sc.stack = sc.stack[:len(sc.stack)-1]
			i++
		case ',':
			if len(sc.stack) == 0 {
				return nil // not valid JSON
			}
			if f := &sc.stack[len(sc.stack)-1]; f.array {
				f.index++
			} else {
				expectKey = true
			}
			i++
		case '"':
			end, escaped := stringEnd(raw, i)
			if end < 0 {
				return nil // not valid JSON
			}
			if expectKey && len(sc.stack) > 0 {
				expectKey = false
				key := raw[i+1 : end]
				if escaped {
					var s string
					if err := json.Unmarshal(raw[i:end+1], &s); err != nil {
						return err
					}
					key = []byte(s)
				}
				if err := sc.add(key); err != nil {
					return err
				}
			}
			i = end + 1
		default: // whitespace, ':', numbers, true, false, null
			i++
		}
	}
	return nil
}

// push opens an object or an array, reusing the memory of frames that were
// open before at the same depth.
func (sc *scanner) push(array bool) {
	if len(sc.stack) < cap(sc.stack) {
		sc.stack = sc.stack[:len(sc.stack)+1]
	} else {
		sc.stack = append(sc.stack, frame{})
	}
	f := &sc.stack[len(sc.stack)-1]
	f.array, f.index, f.key, f.keys = array, 0, nil, f.keys[:0]
	clear(f.set)
}

// add records key in the innermost object, or reports it repeated.
func (sc *scanner) add(key []byte) error {
	f := &sc.stack[len(sc.stack)-1]
	dup := false
	if len(f.keys) < manyKeys {
		for _, k := range f.keys {
			if bytes.Equal(k, key) {
				dup = true
				break
			}
		}
	} else {
		if f.set == nil {
			f.set = make(map[string]struct{})
		}
		if len(f.set) == 0 {
			for _, k := range f.keys {
				f.set[string(k)] = struct{}{}
			}
		}
		_, dup = f.set[string(key)]
		f.set[string(key)] = struct{}{}
	}
	if dup {
		return &Error{Path: join(sc.path(), string(key)), Err: ErrDuplicateKey}
	}
	f.keys = append(f.keys, key)
	f.key = key
	return nil
}

// path returns the path of the innermost open object or array.
func (sc *scanner) path() string {
	var b strings.Builder
	for _, f := range sc.stack[:len(sc.stack)-1] {
		if f.array {
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(f.key)
	}
	return b.String()
}

// stringEnd returns the index of the closing quote of the string that
// starts at raw[start] (-1 when there is none), and whether the string
// holds escapes.
func stringEnd(raw []byte, start int) (end int, escaped bool) {
	for i := start + 1; i < len(raw); i++ {
		switch raw[i] {
		case '\\':
			escaped = true
			i++ // the escaped character, which may be a quote
		case '"':
			return i, escaped
		}
	}
	return -1, escaped // not valid JSON
}

// tokenFrame is one open object or array while checking a document token
// by token.
type tokenFrame struct {
	path  string
	array bool
	index int
	keys  map[string]struct{}
	// key is the key whose value comes next, when pending (objects).
	key     string
	pending bool
}

// checkTokens is Check for a document json.Valid refused: it walks the
// tokens of encoding/json's decoder, so that a syntax error is reported as
// encoding/json reports it, and data after a valid value as
// ErrTrailingData (with repeated keys before it still found first).
func checkTokens(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var stack []*tokenFrame
	// next returns the path of the value about to be read.
	next := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.array {
			return f.path + "[" + strconv.Itoa(f.index) + "]"
		}
		return join(f.path, f.key)
	}
	// done records that a value was read in the enclosing frame.
	done := func() {
		if len(stack) > 0 {
			if f := stack[len(stack)-1]; f.array {
				f.index++
			} else {
				f.key, f.pending = "", false
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // a document holds one value
		}
		if err != nil {
			return err
		}
		top := (*tokenFrame)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		// A string in an object where no key is pending is a key.
		if s, ok := tok.(string); ok && top != nil && !top.array && !top.pending {
			if _, dup := top.keys[s]; dup {
				return &Error{Path: join(top.path, s), Err: ErrDuplicateKey}
			}
			top.keys[s] = struct{}{}
			top.key = s
			top.pending = true
			continue
		}
		switch d := tok.(type) {
		case json.Delim:
			switch d {
			case '{':
				stack = append(stack, &tokenFrame{path: next(), keys: map[string]struct{}{}})
				continue
			case '[':
				stack = append(stack, &tokenFrame{path: next(), array: true})
				continue
			default: // '}' or ']'
				stack = stack[:len(stack)-1]
			}
		}
		done()
		if len(stack) == 0 {
			if _, err := dec.Token(); err != io.EOF {
				return &Error{Err: ErrTrailingData}
			}
			return nil
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
