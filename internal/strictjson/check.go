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

// frame is one open object or array while walking a document.
type frame struct {
	path  string
	array bool
	index int
	keys  map[string]struct{}
	// key is the key whose value comes next, when pending (objects).
	key     string
	pending bool
}

// Check reads the JSON value raw once and reports the first key repeated
// within one object (a *Error matching ErrDuplicateKey whose Path is the
// repeated key's path) or data after the value (a *Error matching
// ErrTrailingData). Syntax errors are returned as encoding/json reports
// them. Check decodes nothing: a document that passes may still fail to
// decode for other reasons.
func Check(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var stack []*frame
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
		top := (*frame)(nil)
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
				stack = append(stack, &frame{path: next(), keys: map[string]struct{}{}})
				continue
			case '[':
				stack = append(stack, &frame{path: next(), array: true})
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
