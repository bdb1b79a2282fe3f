package fleet_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when any test leaves a goroutine
// behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
