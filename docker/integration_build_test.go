package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
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

// contextTarball is a tar archive holding files, a build context.
func contextTarball(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(files[name]))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// TestIntegrationBuildRemoteContext builds a service's image from a remote
// context the engine fetches itself (the build endpoint's remote
// parameter): a tar archive served on 127.0.0.1, which the engine on this
// host reaches. The image carries what the archive held, the container
// runs on it, the unchanged URL is not fetched again, another URL builds
// again and recreates the container, and the other build options still
// apply (a build argument read back from the image's label).
func TestIntegrationBuildRemoteContext(t *testing.T) {
	cli, appImage := realEngine(t)
	ctx := context.Background()
	name := uniqueName("cvr")
	ref := name + "-web:latest"
	started := time.Now().Add(-time.Second)
	t.Cleanup(func() { // last: the classic builder keeps the images of the build steps
		list, _ := cli.ImageList(context.Background(), image.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", docker.LabelBuildKey))})
		sort.Slice(list, func(i, j int) bool { return list[i].Created > list[j].Created })
		for _, im := range list {
			if !time.Unix(im.Created, 0).Before(started) && strings.HasPrefix(im.Labels["remote"], name) {
				_, _ = cli.ImageRemove(context.Background(), im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
			}
		}
	})
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	cleanupProject(t, cli, name)
	eng := dockertest.Count(cli)

	dockerfile := "FROM " + appImage + "\nARG GREETING\nCOPY data.txt /data.txt\nLABEL greeting=$GREETING remote=" + name + "\n"
	tarballs := map[string][]byte{
		"/v1.tar": contextTarball(t, map[string]string{"Dockerfile": dockerfile, "data.txt": "v1"}),
		"/v2.tar": contextTarball(t, map[string]string{"Dockerfile": dockerfile, "data.txt": "v2"}),
	}
	var mu sync.Mutex
	fetched := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := tarballs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		fetched[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-tar")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"), srv.URL)
	fetches := func(p string) int {
		mu.Lock()
		defer mu.Unlock()
		return fetched[p]
	}

	dir := t.TempDir()
	load := func(path string) *docker.Project {
		yaml := "name: " + name + "\nservices:\n  web:\n    build: {context: \"" + srv.URL + path + "\", args: {GREETING: hello}}\n" +
			"    labels: {" + dockertest.TestLabel + ": \"1\"}\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(yaml), 0o644))
		p, err := docker.LoadComposeFile(ctx, filepath.Join(dir, "compose.yaml"), docker.LoadOptions{})
		require.NoError(t, err)
		p.PollInterval = 100 * time.Millisecond
		return p
	}

	apply(t, eng, load("/v1.tar"))
	assert.Equal(t, 1, fetches("/v1.tar"), "the engine fetched the context")
	img, _, err := cli.ImageInspectWithRaw(ctx, ref)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	assert.Equal(t, "hello", img.Config.Labels["greeting"], "build arguments apply to a remote context")
	assert.NotEmpty(t, img.Config.Labels[docker.LabelBuildKey])
	c := inspect(t, cli, name+"-web")
	assert.Equal(t, img.ID, c.Image)
	assert.True(t, c.State.Running)
	_, err = cli.ContainerStatPath(ctx, c.ID, "/data.txt")
	require.NoError(t, err, "the archive's file is in the image")

	// The same URL: converged, nothing fetched or built.
	eng.Reset()
	rep := apply(t, eng, load("/v1.tar"))
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.Zero(t, eng.Writes(), "calls: %v", eng.Calls())
	assert.Equal(t, 1, fetches("/v1.tar"))

	// Another URL: built again, and the container recreated on it.
	rep = apply(t, eng, load("/v2.tar"))
	assert.Contains(t, rep.IDs(converge.OutcomeChanged), docker.BuildID(ref))
	assert.Equal(t, 1, fetches("/v2.tar"))
	img2, _, err := cli.ImageInspectWithRaw(ctx, ref)
	require.NoError(t, err)
	assert.NotEqual(t, img.ID, img2.ID)
	c2 := inspect(t, cli, name+"-web")
	assert.NotEqual(t, c.ID, c2.ID)
	assert.Equal(t, img2.ID, c2.Image)

	// A URL the engine cannot fetch fails the build, naming the image,
	// with nothing created.
	fail := uniqueName("cvrf")
	cleanupProject(t, cli, fail)
	bad, err := docker.LoadCompose(ctx, []byte("name: "+fail+"\nservices:\n  web:\n    build: {context: \""+srv.URL+"/missing.tar\"}\n"),
		docker.LoadOptions{WorkingDir: dir})
	require.NoError(t, err)
	g, err := bad.Graph(eng)
	require.NoError(t, err)
	_, err = converge.Apply(ctx, g)
	require.ErrorIs(t, err, docker.ErrBuildFailed)
	assert.Empty(t, projectObjects(t, cli, fail))
}

// TestIntegrationBuildPlatform builds a service's image for the one
// platform of its build.platforms (here the engine's own, so the container
// runs): the engine is asked for it (the build endpoint's platform
// parameter), the image's OS and architecture read back by inspect are
// that platform's, and a change of the platform builds again and recreates
// the container.
func TestIntegrationBuildPlatform(t *testing.T) {
	cli, appImage := realEngine(t)
	ctx := context.Background()
	name := uniqueName("cvp")
	ref := name + "-web:latest"
	started := time.Now().Add(-time.Second)
	t.Cleanup(func() { // last: the classic builder keeps the images of the build steps
		list, _ := cli.ImageList(context.Background(), image.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", docker.LabelBuildKey))})
		sort.Slice(list, func(i, j int) bool { return list[i].Created > list[j].Created })
		for _, im := range list {
			if !time.Unix(im.Created, 0).Before(started) && im.Labels["platform-test"] == name {
				_, _ = cli.ImageRemove(context.Background(), im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
			}
		}
	})
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	cleanupProject(t, cli, name)
	eng := dockertest.Count(cli)
	v, err := cli.ServerVersion(ctx)
	require.NoError(t, err)
	platform := v.Os + "/" + v.Arch

	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "web"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "web", "Dockerfile"),
		[]byte("FROM "+appImage+"\nLABEL platform-test="+name+"\n"), 0o644))
	load := func(platforms string) *docker.Project {
		yaml := "name: " + name + "\nservices:\n  web:\n    build: {context: ./web" + platforms + "}\n" +
			"    labels: {" + dockertest.TestLabel + ": \"1\"}\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(yaml), 0o644))
		p, err := docker.LoadComposeFile(ctx, filepath.Join(dir, "compose.yaml"), docker.LoadOptions{})
		require.NoError(t, err)
		p.PollInterval = 100 * time.Millisecond
		return p
	}

	p := load(", platforms: [" + platform + "]")
	require.Equal(t, platform, p.Containers[0].Build.Platform)
	apply(t, eng, p)
	img, _, err := cli.ImageInspectWithRaw(ctx, ref)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	assert.Equal(t, platform, img.Os+"/"+img.Architecture)
	c := inspect(t, cli, name+"-web")
	assert.Equal(t, img.ID, c.Image)
	assert.True(t, c.State.Running)

	// Unchanged: nothing built.
	eng.Reset()
	rep := apply(t, eng, load(", platforms: ["+platform+"]"))
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))

	// Another platform setting (none: the engine's default) builds again
	// and recreates the container.
	rep = apply(t, eng, load(""))
	assert.Contains(t, rep.IDs(converge.OutcomeChanged), docker.BuildID(ref))
	img2, _, err := cli.ImageInspectWithRaw(ctx, ref)
	require.NoError(t, err)
	assert.NotEqual(t, img.ID, img2.ID)
	c2 := inspect(t, cli, name+"-web")
	assert.NotEqual(t, c.ID, c2.ID)
	assert.Equal(t, img2.ID, c2.Image)

	// More than one platform is refused by name, with the reason.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "multi.yaml"),
		[]byte("name: "+name+"\nservices:\n  web:\n    build: {context: ./web, platforms: [linux/amd64, linux/arm64]}\n"), 0o644))
	_, err = docker.LoadComposeFile(ctx, filepath.Join(dir, "multi.yaml"), docker.LoadOptions{})
	var ue *docker.UnsupportedError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, ue.Reasons["services.web.build.platforms"], "buildx")
}
