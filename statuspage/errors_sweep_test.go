package statuspage_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge/internal/errtext"
	"github.com/convergekit/converge/statuspage"
)

// TestErrorMessagesReadOnce sweeps the package's sentinels and typed
// errors as the core module's sweep does: one "statuspage: " prefix,
// first, and the right articles.
func TestErrorMessagesReadOnce(t *testing.T) {
	prefixes := []string{"statuspage: ", "converge: "}
	for _, err := range []error{
		statuspage.ErrLoopNotRunning, statuspage.ErrActionsNeedAuthorizer,
		&statuspage.ActionsError{Err: statuspage.ErrActionsNeedAuthorizer},
	} {
		assert.Empty(t, errtext.Problems("statuspage", err.Error(), prefixes), "%q", err.Error())
	}
}
