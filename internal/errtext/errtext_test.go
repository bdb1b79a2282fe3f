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
