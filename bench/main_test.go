package bench

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestMain stops the throw-away PostgreSQL cluster that the PostgreSQL
// benchmarks start (see pg_test.go) and fails the run when a benchmark
// leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }
