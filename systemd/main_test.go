package systemd

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when any test leaves a goroutine
// behind, outside the container and inside it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
