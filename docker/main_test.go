package docker_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
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
// built once per run.
var (
	engineOnce sync.Once
	engineCli  *client.Client
	engineErr  error
	appImage   string
	appBuilt   bool
)

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
		appImage, appBuilt, engineErr = dockertest.BuildAppImage(ctx, engineCli)
	})
	if engineErr != nil {
		if os.Getenv("CONVERGE_REQUIRE_DOCKER") == "1" {
			t.Fatalf("Docker engine required (CONVERGE_REQUIRE_DOCKER=1): %v", engineErr)
		}
		t.Skipf("no usable Docker engine, skipping (set CONVERGE_REQUIRE_DOCKER=1 to fail instead): %v", engineErr)
	}
	return engineCli, appImage
}

func shutdownEngine() {
	if engineCli == nil {
		return
	}
	if appBuilt {
		_, _ = engineCli.ImageRemove(context.Background(), appImage, image.RemoveOptions{PruneChildren: true})
	}
	_ = engineCli.Close()
}
