package docker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// appBinary compiles dockertest.AppSource as a static Linux binary into
// dir/app.
func appBinary(t *testing.T, dir string) {
	t.Helper()
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "main.go"), []byte(dockertest.AppSource), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "go.mod"), []byte("module app\n\ngo 1.25\n"), 0o644))
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "app"), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// TestIntegrationBuildFromContext builds a service's image from a context
// on the real engine (FROM scratch, no registry): a dry run builds
// nothing, the build honours .dockerignore, an unchanged context (or a
// change to an ignored file) is not built again, a changed one is and its
// container is recreated, and a failed build is an *ImageError with the
// build output's tail, secret build arguments redacted, before anything
// is created.
func TestIntegrationBuildFromContext(t *testing.T) {
	cli, _ := realEngine(t)
	ctx := context.Background()
	name := uniqueName("cvb")
	ref := name + "-web:latest"
	started := time.Now().Add(-time.Second)
	t.Cleanup(func() { // last: the classic builder keeps the images of the build steps
		list, _ := cli.ImageList(context.Background(), image.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", docker.LabelBuildKey))})
		sort.Slice(list, func(i, j int) bool { return list[i].Created > list[j].Created }) // children first
		for _, im := range list {
			if !time.Unix(im.Created, 0).Before(started) {
				_, _ = cli.ImageRemove(context.Background(), im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
			}
		}
	})
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	cleanupProject(t, cli, name) // first: its containers hold the images
	eng := dockertest.Count(cli)

	dir := t.TempDir()
	bctx := filepath.Join(dir, "web")
	require.NoError(t, os.MkdirAll(filepath.Join(bctx, "junk"), 0o755))
	appBinary(t, bctx)
	write := func(rel, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644))
	}
	write("web/Dockerfile", "FROM scratch\nARG GREETING\nCOPY . /ctx/\nCOPY app /app\nLABEL greeting=$GREETING\nCMD [\"/app\", \"sleep\"]\n")
	write("web/.dockerignore", "secret.txt\njunk/\n")
	write("web/secret.txt", "do not send")
	write("web/junk/big", "ignored")
	write("web/data.txt", "v1")
	write("compose.yaml", "name: "+name+"\nservices:\n  web:\n    build: {context: ./web, args: {GREETING: hello}}\n"+
		"    labels: {"+dockertest.TestLabel+": \"1\"}\n")
	load := func() *docker.Project {
		p, err := docker.LoadComposeFile(ctx, filepath.Join(dir, "compose.yaml"), docker.LoadOptions{})
		require.NoError(t, err)
		p.PollInterval = 100 * time.Millisecond
		return p
	}
	p := load()
	require.Equal(t, name+"-web", p.Containers[0].Image)

	// A dry run reports the build and builds nothing.
	rep := dry(t, eng, p)
	assert.Contains(t, rep.IDs(converge.OutcomeWouldChange), docker.BuildID(ref))
	assert.Zero(t, eng.Writes(), "calls: %v", eng.Calls())
	_, _, err := cli.ImageInspectWithRaw(ctx, ref)
	require.True(t, errdefs.IsNotFound(err), "nothing built: %v", err)

	apply(t, eng, p)
	img, _, err := cli.ImageInspectWithRaw(ctx, ref)
	require.NoError(t, err)
	t.Cleanup(func() { // untagged by the rebuild below
		_, _ = cli.ImageRemove(context.Background(), img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	assert.Equal(t, "hello", img.Config.Labels["greeting"])
	assert.NotEmpty(t, img.Config.Labels[docker.LabelBuildKey])
	c := inspect(t, cli, name+"-web")
	assert.Equal(t, img.ID, c.Image)
	assert.True(t, c.State.Running)
	_, err = cli.ContainerStatPath(ctx, c.ID, "/ctx/data.txt")
	require.NoError(t, err)
	for _, ignored := range []string{"/ctx/secret.txt", "/ctx/junk"} {
		_, err = cli.ContainerStatPath(ctx, c.ID, ignored)
		assert.True(t, errdefs.IsNotFound(err), ".dockerignore keeps %s out: %v", ignored, err)
	}

	// Converged, and a change to an ignored file changes nothing: two
	// reads.
	write("web/secret.txt", "changed but ignored")
	eng.Reset()
	rep = apply(t, eng, load())
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.Zero(t, eng.Writes(), "calls: %v", eng.Calls())
	assert.LessOrEqual(t, eng.Total(), 2, "calls: %v", eng.Calls())

	// A changed context is built again and the container recreated on it.
	write("web/data.txt", "v2")
	eng.Reset()
	rep = apply(t, eng, load())
	assert.Contains(t, rep.IDs(converge.OutcomeChanged), docker.BuildID(ref))
	img2, _, err := cli.ImageInspectWithRaw(ctx, ref)
	require.NoError(t, err)
	assert.NotEqual(t, img.ID, img2.ID)
	c2 := inspect(t, cli, name+"-web")
	assert.NotEqual(t, c.ID, c2.ID)
	assert.Equal(t, img2.ID, c2.Image)
	// The image the rebuild superseded is pruned once the new container
	// runs (converge built it: LabelImageBrought on its container).
	assert.Contains(t, rep.IDs(converge.OutcomeChanged), docker.PruneID(name))
	_, _, err = cli.ImageInspectWithRaw(ctx, img.ID)
	assert.True(t, errdefs.IsNotFound(err), "the superseded build is removed: %v", err)
	assert.Equal(t, "true", c2.Config.Labels[docker.LabelImageBrought])

	// A failed build names the image and service, carries the end of the
	// build output with the secret argument redacted, and creates nothing.
	fail := uniqueName("cvf")
	cleanupProject(t, cli, fail)
	write("web/Dockerfile.bad", "FROM scratch\nARG API_TOKEN\nCOPY ${API_TOKEN} /x\n")
	write("bad.yaml", "name: "+fail+"\nservices:\n  web:\n    build: {context: ./web, dockerfile: Dockerfile.bad, args: {API_TOKEN: s3cr3t-build-arg}}\n")
	bad, err := docker.LoadComposeFile(ctx, filepath.Join(dir, "bad.yaml"), docker.LoadOptions{})
	require.NoError(t, err)
	g, err := bad.Graph(eng)
	require.NoError(t, err)
	_, err = converge.Apply(ctx, g)
	require.ErrorIs(t, err, docker.ErrBuildFailed)
	var ie *docker.ImageError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, fail+"-web:latest", ie.Ref)
	assert.Equal(t, []string{"web"}, ie.Services)
	assert.NotContains(t, err.Error(), "s3cr3t-build-arg")
	assert.Contains(t, err.Error(), docker.Redacted, "the output's tail is there, redacted: %v", err)
	assert.Empty(t, projectObjects(t, cli, fail))
	assert.False(t, strings.Contains(ie.Error(), "s3cr3t-build-arg"))
}
