package pgstore_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestMain stops the throw-away PostgreSQL cluster after the tests and
// fails them when any test leaves a goroutine behind. Started as a replica
// process (see TestReplicasShareObjectsAcrossProcesses), the test binary
// runs that replica instead.
func TestMain(m *testing.M) {
	if owner := os.Getenv(replicaOwnerEnv); owner != "" {
		if err := runReplica(owner, os.Getenv(replicaDSNEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "replica", owner+":", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(pgtest.Wrap(m))
}
