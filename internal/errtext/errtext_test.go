package errtext_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge/internal/errtext"
)

var errSentinel = errors.New("pkg: not found")

// TestBareReadsWithoutPrefixAndStillMatches checks that an embedded error
// loses its copy of the prefix in the message, not its identity.
func TestBareReadsWithoutPrefixAndStillMatches(t *testing.T) {
	err := fmt.Errorf("pkg: key %q: %w", "k", errtext.Bare(errSentinel, "pkg: "))
	assert.Equal(t, `pkg: key "k": not found`, err.Error())
	assert.ErrorIs(t, err, errSentinel)
	assert.Equal(t, "other: x", errtext.Cause(errors.New("other: x"), "pkg: "), "another prefix stays")
	assert.Nil(t, errtext.Bare(nil, "pkg: "))
}

// TestCauseDropsTheFirstPrefixThatMatches checks an error embedded in the
// message of a package that wraps both its own errors and another
// package's: one prefix goes, whichever it is, and only one.
func TestCauseDropsTheFirstPrefixThatMatches(t *testing.T) {
	tests := []struct{ msg, want string }{
		{"pkg: not found", "not found"},
		{"core: version conflict", "version conflict"},
		{"core: pkg: nested", "pkg: nested"},
		{"other: x", "other: x"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, errtext.Cause(errors.New(tt.msg), "pkg: ", "core: "), tt.msg)
		assert.Equal(t, tt.want, errtext.Bare(errors.New(tt.msg), "pkg: ", "core: ").Error(), tt.msg)
	}
}
