package controller

import (
	"errors"
	"fmt"
	"strings"

	"github.com/convergekit/converge/internal/errtext"
)

// Controller errors.
var (
	// ErrRunning means Run was called on a controller that is
	// running or has run.
	ErrRunning = errors.New("controller: Run was already called")
	// ErrShutdownTimeout means running handlers did not finish
	// within ShutdownTimeout and their context was cancelled.
	ErrShutdownTimeout = errors.New("controller: handlers did not finish in time")
	// ErrObjectExists means Add was called with a key already stored.
	ErrObjectExists = errors.New("controller: object exists")
	// ErrObjectNotFound means no object has the key.
	ErrObjectNotFound = errors.New("controller: object not found")
	// ErrTerminal marks a handler error that retrying will not fix (see
	// Terminal); the object is then halted with HaltTerminal.
	ErrTerminal = errors.New("controller: terminal error")
	// ErrObjectInvalid means an object cannot be added as given (empty key
	// or state, data that is not JSON).
	ErrObjectInvalid = errors.New("controller: invalid object")
)

// ObjectError is the error of a Controller call about one object. It
// wraps the cause (ErrObjectExists, ErrObjectNotFound, ErrObjectInvalid or
// a store error).
type ObjectError struct {
	Kind string
	Key  string
	Err  error
}

// Error describes the problem, naming its culprit.
func (e *ObjectError) Error() string {
	return fmt.Sprintf("controller: %s %q: %s", e.Kind, e.Key, errtext.Cause(e.Err, "controller: "))
}

// Unwrap returns the cause.
func (e *ObjectError) Unwrap() error { return e.Err }

// ObjectsExistError is the error of AddObjects and Controller.AddMany when
// objects to add are stored already: it names them all, and nothing was
// added. It matches ErrObjectExists.
type ObjectsExistError struct {
	Kind string
	// Keys are the keys stored already, sorted.
	Keys []string
}

// maxKeysNamed is how many keys an ObjectsExistError names in its
// message; Keys holds them all.
const maxKeysNamed = 5

// Error names the objects (the first few, and how many more).
func (e *ObjectsExistError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "controller: %s objects already stored:", e.Kind)
	for i, k := range e.Keys[:min(len(e.Keys), maxKeysNamed)] {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %q", k)
	}
	if n := len(e.Keys) - maxKeysNamed; n > 0 {
		fmt.Fprintf(&b, " and %d more", n)
	}
	return b.String()
}

// Is makes ObjectsExistError match ErrObjectExists.
func (e *ObjectsExistError) Is(target error) bool { return target == ErrObjectExists }

// Terminal marks err as terminal: a handler returns it (or an error that
// wraps it) when running again will not help, as for a machine image that
// does not exist. The object is not retried: it is stored halted
// (Object.Halted is HaltTerminal) with the error's message and time in
// Object.LastError, until Controller.Enqueue, Controller.Request or
// Controller.Release wakes it. The returned error reads as err, and
// matches both ErrTerminal and err with errors.Is; Terminal(nil) returns
// ErrTerminal.
func Terminal(err error) error {
	if err == nil {
		return ErrTerminal
	}
	return terminalError{err}
}

// terminalError is the error Terminal returns.
type terminalError struct{ err error }

func (e terminalError) Error() string        { return e.err.Error() }
func (e terminalError) Unwrap() error        { return e.err }
func (e terminalError) Is(target error) bool { return target == ErrTerminal }
