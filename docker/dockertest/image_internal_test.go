package dockertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrentBuildsLeaveOneImage: test binaries that find the app image
// missing at the same moment build it one at a time, so the engine ends
// with one image of it, tagged, and no untagged loser of a race for the
// tag (which would carry TestLabel and count as a test's leftover). The
// builds here are of a copy under a repository of this run's own.
func TestConcurrentBuildsLeaveOneImage(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test against the Docker engine skipped in -short mode")
	}
	ctx := context.Background()
	cli, err := Connect(ctx)
	if err != nil {
		if os.Getenv("CONVERGE_REQUIRE_DOCKER") == "1" {
			t.Fatalf("Docker engine required (CONVERGE_REQUIRE_DOCKER=1): %v", err)
		}
		t.Skipf("no Docker engine, skipping (set CONVERGE_REQUIRE_DOCKER=1 to fail instead): %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	repo := "converge-test/buildlock" + hex.EncodeToString(suffix)
	const runLabel = TestLabel + ".build"
	mine := filters.NewArgs(filters.Arg("label", runLabel+"="+repo))
	t.Cleanup(func() {
		list, _ := cli.ImageList(context.Background(), image.ListOptions{All: true, Filters: mine})
		for _, im := range list {
			_, _ = cli.ImageRemove(context.Background(), im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})

	const builders = 3
	type result struct {
		tag   string
		built bool
		err   error
	}
	results := make([]result, builders)
	var wg sync.WaitGroup
	for i := range builders {
		wg.Go(func() {
			tag, built, err := buildApp(ctx, cli, repo, map[string]string{runLabel: repo})
			results[i] = result{tag, built, err}
		})
	}
	wg.Wait()

	builtCount := 0
	for _, r := range results {
		require.NoError(t, r.err)
		assert.Equal(t, results[0].tag, r.tag)
		if r.built {
			builtCount++
		}
	}
	assert.Equal(t, 1, builtCount, "one builder built the image, the others found it")
	list, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: mine})
	require.NoError(t, err)
	require.Len(t, list, 1, "one image of the build on the engine: %+v", list)
	assert.Contains(t, list[0].RepoTags, results[0].tag)
}
