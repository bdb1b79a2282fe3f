package bench

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestMain stops the throw-away PostgreSQL cluster that the PostgreSQL
// benchmarks start (see pg_test.go), closes the Docker client the Docker
// benchmarks share, and fails the run when a benchmark leaves a goroutine
// behind.
// A child process of the fleet benchmarks (fleetChildEnv) runs its
// clients instead.
func TestMain(m *testing.M) {
	if os.Getenv(fleetChildEnv) != "" {
		os.Exit(runFleetChild())
	}
	goleak.VerifyTestMain(pgtest.Wrap(closeDocker{m}))
}

// closeDocker runs the benchmarks, then closes the shared Docker client
// (benchEngine closes it only when it built the image), so that its idle
// connections are not taken for leaks.
type closeDocker struct{ m *testing.M }

func (c closeDocker) Run() int {
	code := c.m.Run()
	if dockerCli != nil {
		_ = dockerCli.Close()
	}
	return code
}
