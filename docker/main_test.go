package docker_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/convergekit/converge/docker/dockertest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	shutdownEngine()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The real engine and the test image, shared by the integration tests and
// built when the engine lacks it (it is kept: a fixture other test
// binaries may be using, see dockertest.BuildAppImage).
var (
	engineOnce sync.Once
	engineCli  *client.Client
	engineErr  error
	appImage   string
	// bystander is a project named like the device agent example's,
	// started before the first integration test (or a user's own found
	// there): every integration test checks, after its cleanup, that it
	// left it alone.
	bystander    *dockertest.Bystander
	bystanderErr error
)

// bystanderName is the name of the bystander project: the device agent
// example's, which a user may be running on the engine the tests use.
const bystanderName = "deviceagent"

// realEngine returns a client for the local engine and the tag of the test
// image, or skips the test when there is no engine (fails instead when
// CONVERGE_REQUIRE_DOCKER=1).
func realEngine(t *testing.T) (*client.Client, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test against the Docker engine skipped in -short mode")
	}
	engineOnce.Do(func() {
		ctx := context.Background()
		engineCli, engineErr = dockertest.Connect(ctx)
		if engineErr != nil {
			return
		}
		appImage, _, engineErr = dockertest.BuildAppImage(ctx, engineCli)
		if engineErr == nil {
			bystander, bystanderErr = dockertest.StartBystander(ctx, engineCli, bystanderName, appImage)
		}
	})
	if engineErr != nil {
		if os.Getenv("CONVERGE_REQUIRE_DOCKER") == "1" {
			t.Fatalf("Docker engine required (CONVERGE_REQUIRE_DOCKER=1): %v", engineErr)
		}
		t.Skipf("no usable Docker engine, skipping (set CONVERGE_REQUIRE_DOCKER=1 to fail instead): %v", engineErr)
	}
	require.NoError(t, bystanderErr)
	t.Cleanup(func() { // after the test's own cleanups
		assert.NoError(t, bystander.Check(context.Background()), "a user's project beside the tests is left alone")
	})
	return engineCli, appImage
}

func shutdownEngine() {
	if engineCli == nil {
		return
	}
	if bystander != nil {
		if err := bystander.Remove(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	_ = engineCli.Close()
}
