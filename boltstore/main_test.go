package boltstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the crash tests' child processes, and fails the package's
// tests when any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	if childMain() {
		return
	}
	goleak.VerifyTestMain(m)
}
