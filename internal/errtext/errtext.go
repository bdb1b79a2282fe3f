// Package errtext keeps error messages reading once: an error that embeds
// another after its own package prefix ("converge: ", "controller: ")
// drops the embedded error's copy of that prefix.
package errtext

import "strings"

// Cause returns err's message without a leading prefix, for embedding it
// in a message that already starts with a package prefix: the first of
// prefixes that the message starts with is dropped.
func Cause(err error, prefixes ...string) string {
	msg := err.Error()
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return rest
		}
	}
	return msg
}

// Bare returns an error that reads as Cause(err, prefixes...) and unwraps
// to err, so errors.Is and errors.As see err through it; nil stays nil.
// Wrap a sentinel with it before embedding it with fmt.Errorf's %w after
// a package prefix.
func Bare(err error, prefixes ...string) error {
	if err == nil {
		return nil
	}
	return bare{err: err, prefixes: prefixes}
}

type bare struct {
	err      error
	prefixes []string
}

func (b bare) Error() string { return Cause(b.err, b.prefixes...) }
func (b bare) Unwrap() error { return b.err }
