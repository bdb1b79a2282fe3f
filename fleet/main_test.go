package fleet_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestMain stops the throw-away PostgreSQL cluster after the tests (see
// pgtest) and fails them when any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Wrap(m))
}
