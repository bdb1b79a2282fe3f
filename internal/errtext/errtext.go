// Package errtext keeps error messages reading once: an error that embeds
// another after its own package prefix ("converge: ", "controller: ")
// drops the embedded error's copy of that prefix.
package errtext

import "strings"

// Cause returns err's message without a leading prefix, for embedding it
// in a message that already starts with prefix.
func Cause(err error, prefix string) string {
	return strings.TrimPrefix(err.Error(), prefix)
}

// Bare returns an error that reads as Cause(err, prefix) and unwraps to
// err, so errors.Is and errors.As see err through it; nil stays nil. Wrap
// a sentinel with it before embedding it with fmt.Errorf's %w after the
// prefix.
func Bare(err error, prefix string) error {
	if err == nil {
		return nil
	}
	return bare{err: err, prefix: prefix}
}

type bare struct {
	err    error
	prefix string
}

func (b bare) Error() string { return Cause(b.err, b.prefix) }
func (b bare) Unwrap() error { return b.err }
