package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/user"
	"strings"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/plan"
)

// usageError is a command line that cannot be run: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return "convergectl: " + e.msg }

// notFoundError names what the store does not hold. It matches
// converge.ErrStoreNotFound.
type notFoundError struct {
	what, name string
}

func (e *notFoundError) Error() string {
	return fmt.Sprintf("convergectl: %s %q is not in the store", e.what, e.name)
}

func (e *notFoundError) Is(target error) bool { return target == converge.ErrStoreNotFound }

// lockedError is a bolt file that another process (a running agent) holds.
type lockedError struct {
	path  string
	write bool
	err   error
}

func (e *lockedError) Error() string {
	if e.write {
		return fmt.Sprintf("convergectl: bolt file %q is held by another process (a running agent?): it cannot be written while that process has it open; stop the process, or act through it (its status page)", e.path)
	}
	return fmt.Sprintf("convergectl: bolt file %q is held by another process (a running agent?): bbolt lets no reader share a file that a process has open for writing; stop the process, or look through it (its status page)", e.path)
}

func (e *lockedError) Unwrap() error { return e.err }

// schemaError is a database whose store schema a read cannot use as it is:
// it is missing or older than this convergectl, and a read creates and
// migrates nothing.
type schemaError struct {
	schema string
	err    error
}

func (e *schemaError) Error() string {
	return fmt.Sprintf("convergectl: schema %q holds no store of this version: it is missing or older, and a read-only session creates and migrates nothing (the program's pgstore.Open does)", e.schema)
}

func (e *schemaError) Unwrap() error { return e.err }

// keyFileError is a key file that cannot be used. Its message never holds
// a key.
type keyFileError struct {
	path string
	err  error
}

func (e *keyFileError) Error() string {
	var ke *converge.KeyFileError
	if errors.As(e.err, &ke) { // it names the file: read it once
		where := fmt.Sprintf("%q", ke.Path)
		if ke.Line > 0 {
			where += fmt.Sprintf(" line %d", ke.Line)
		}
		if ke.Err != nil && !errors.Is(ke.Err, fs.ErrNotExist) {
			return fmt.Sprintf("convergectl: key file %s: %s: %v", where, ke.Reason, ke.Err)
		}
		return fmt.Sprintf("convergectl: key file %s: %s", where, ke.Reason)
	}
	return fmt.Sprintf("convergectl: key file %q: %s", e.path, strings.TrimPrefix(e.err.Error(), "converge: "))
}

func (e *keyFileError) Unwrap() error { return e.err }

// sealedError is a value that is sealed and has to be read to do what was
// asked (a write, or a read with a key that does not open it). It matches
// converge.ErrSealed.
type sealedError struct {
	what, name, keyID string
	// withKey says a key file was given, whose keys do not open the value.
	withKey bool
	err     error
}

func (e *sealedError) Error() string {
	key := "a key"
	if e.keyID != "" {
		key = fmt.Sprintf("the key with ID %s", e.keyID)
	}
	if e.withKey {
		return fmt.Sprintf("convergectl: %s %q is sealed with a key that --key-file does not hold", e.what, e.name)
	}
	return fmt.Sprintf("convergectl: %s %q is sealed: give --key-file with %s", e.what, e.name, key)
}

func (e *sealedError) Is(target error) bool { return target == converge.ErrSealed }

func (e *sealedError) Unwrap() error { return e.err }

// needKeyError is --show-secrets without a key on a store whose values
// are sealed. It matches converge.ErrSealed.
type needKeyError struct{ err error }

func (e *needKeyError) Error() string {
	return "convergectl: --show-secrets: the store's values are sealed: give their key with --key-file FILE or $" + keyFileEnv
}

func (e *needKeyError) Unwrap() error { return e.err }

// errorKind names the kind of err in JSON error output: a stable word a
// script can switch on.
func errorKind(err error) string {
	var ue *usageError
	var ke *keyFileError
	var le *lockedError
	var se *schemaError
	switch {
	case errors.As(err, &ue):
		return "usage"
	case errors.As(err, &le), errors.Is(err, boltstore.ErrFileLocked):
		return "locked"
	case errors.As(err, &ke):
		return "key-file"
	case errors.As(err, &se):
		return "store"
	case errors.Is(err, converge.ErrSealed):
		return "sealed"
	case errors.Is(err, converge.ErrNotSealed):
		return "not-sealed"
	case errors.Is(err, converge.ErrStoreNotFound), errors.Is(err, controller.ErrObjectNotFound):
		return "not-found"
	case errors.Is(err, plan.ErrNotFailed), errors.Is(err, plan.ErrFinished):
		return "conflict"
	case errors.Is(err, boltstore.ErrNotStore), errors.Is(err, boltstore.ErrCorrupt), errors.Is(err, boltstore.ErrNewerFormat), errors.Is(err, boltstore.ErrReadOnly):
		return "store"
	case errors.Is(err, pgstore.ErrDSN), errors.Is(err, pgstore.ErrConnect), errors.Is(err, pgstore.ErrPermission), errors.Is(err, pgstore.ErrSchemaTooNew):
		return "store"
	}
	return "error"
}

// report writes err to w: a line of text, or with asJSON the object
// {"error": {"kind": ..., "message": ...}}.
func report(w io.Writer, asJSON bool, err error) {
	if !asJSON {
		fmt.Fprintln(w, err)
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"kind": errorKind(err), "message": err.Error()}})
	fmt.Fprintln(w, string(b))
}

// currentUser names the user running the command.
func currentUser() string {
	u, err := user.Current()
	if err != nil || u.Username == "" {
		return "unknown user"
	}
	return u.Username
}
