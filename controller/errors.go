package controller

import (
	"errors"
	"fmt"

	"github.com/convergekit/converge/internal/errtext"
)

// Controller errors.
var (
	// ErrRunning means Run was called on a controller that is
	// running or has run.
	ErrRunning = errors.New("controller: controller already ran")
	// ErrShutdownTimeout means running handlers did not finish
	// within ShutdownTimeout and their context was cancelled.
	ErrShutdownTimeout = errors.New("controller: controller handlers did not finish in time")
	// ErrObjectExists means Add was called with a key already stored.
	ErrObjectExists = errors.New("controller: object exists")
	// ErrObjectNotFound means no object has the key.
	ErrObjectNotFound = errors.New("controller: object not found")
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
