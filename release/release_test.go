package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the repository this module lives in.
const repoRoot = ".."

func TestRepositoryModulesRequireEachOtherInLockstep(t *testing.T) {
	mods, err := readModules(repoRoot)
	require.NoError(t, err)
	v, err := lockstepVersion(mods)
	require.NoError(t, err, "every module must require its siblings at one release version")
	assert.NotEqual(t, "v0.0.0", v)

	var published []string
	for _, m := range mods {
		if m.Published {
			published = append(published, m.Dir)
		}
	}
	for _, dir := range []string{".", "docker", "pgstore", "prometheus", "statuspage", "systemd", "fleet", "otel", "convergectl"} {
		assert.Contains(t, published, dir, "a library or command module must be tagged")
	}
	for _, m := range mods {
		assert.Equal(t, m.Dir == "convergectl", m.Command, "%s: only convergectl is a command", m.Dir)
	}
	assert.NotContains(t, published, "bench")
	assert.NotContains(t, published, "release")
}

// workspace writes a small repository of four modules under a temporary
// directory: the core, docker (a library requiring the core at from),
// bench (a tool requiring both) and convergectl (a command requiring the
// core, with a replace line for building alone).
func workspace(t *testing.T, from string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.work":             "go 1.25.0\n\nuse (\n\t.\n\t./docker\n\t./bench\n\t./convergectl\n)\n",
		"go.mod":              "module example.com/kit\n\ngo 1.25.0\n",
		"kit.go":              "package kit\n",
		"docker/go.mod":       "module example.com/kit/docker\n\ngo 1.25.0\n\nrequire example.com/kit " + from + "\n\nreplace example.com/kit => ../\n",
		"docker/docker.go":    "package docker\n",
		"bench/go.mod":        "module example.com/kit/bench\n\ngo 1.25.0\n\nrequire (\n\texample.com/kit " + from + "\n\texample.com/kit/docker " + from + "\n)\n",
		"convergectl/go.mod":  "module example.com/kit/convergectl\n\ngo 1.25.0\n\nrequire example.com/kit " + from + "\n\nreplace example.com/kit => ../\n",
		"convergectl/main.go": "package main\n\nfunc main() {}\n",
		"CHANGELOG.md":        "# Changelog\n\n## Unreleased\n\n### Changes that need your attention\n\n- Clean keeps volumes.\n\n## v0.1.0 — 2026-01-01\n\nFirst.\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

func TestLockstepVersionRefusesSkew(t *testing.T) {
	dir := workspace(t, "v0.1.0")
	bench := filepath.Join(dir, "bench", "go.mod")
	data, err := os.ReadFile(bench)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bench, bytes.Replace(data, []byte("docker v0.1.0"), []byte("docker v0.2.0"), 1), 0o644))

	mods, err := readModules(dir)
	require.NoError(t, err)
	_, err = lockstepVersion(mods)
	var skew *SkewError
	require.ErrorAs(t, err, &skew)
	assert.Len(t, skew.Versions, 2)
	assert.Contains(t, err.Error(), "bench requires example.com/kit/docker")
}

func TestLockstepVersionRefusesAnUnreleasedVersion(t *testing.T) {
	mods, err := readModules(workspace(t, "v0.0.0"))
	require.NoError(t, err)
	_, err = lockstepVersion(mods)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"v0.0.0"`)
}

func TestSetVersionRewritesEverySiblingRequirement(t *testing.T) {
	mods, err := readModules(workspace(t, "v0.1.0"))
	require.NoError(t, err)
	changed, err := setVersion(mods, "v0.2.0")
	require.NoError(t, err)
	require.Len(t, changed, 3, "docker, bench and convergectl require siblings; the core requires none")
	assert.Contains(t, string(changed["docker"]), "require example.com/kit v0.2.0")
	assert.Contains(t, string(changed["docker"]), "replace example.com/kit => ../", "replace stays for building alone")
	assert.Contains(t, string(changed["bench"]), "example.com/kit v0.2.0")
	assert.Contains(t, string(changed["bench"]), "example.com/kit/docker v0.2.0")
	assert.NotContains(t, string(changed["bench"]), "v0.1.0")
}

func TestChangelogEntry(t *testing.T) {
	tests := []struct {
		name, doc, want string
		commits         []string
		err             error
	}{
		{
			name:    "unreleased notes and commits",
			doc:     "# Changelog\n\n## Unreleased\n\n- Clean keeps volumes.\n\n## v0.1.0 — 2026-01-01\n\nFirst.\n",
			commits: []string{"docker: a", "core: b"},
			want:    "# Changelog\n\n## Unreleased\n\n## v0.2.0 — 2026-11-25\n\n- Clean keeps volumes.\n\n### Commits\n\n- docker: a\n- core: b\n\n## v0.1.0 — 2026-01-01\n\nFirst.\n",
		},
		{
			name: "nothing unreleased, no commits listed",
			doc:  "# Changelog\n\n## Unreleased\n",
			want: "# Changelog\n\n## Unreleased\n\n## v0.2.0 — 2026-11-25\n\n",
		},
		{
			name: "no unreleased section",
			doc:  "# Changelog\n\n## v0.1.0\n",
			err:  ErrNoUnreleased,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := changelogEntry(tt.doc, "v0.2.0", "2026-11-25", tt.commits)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := git(dir, args...)
	require.NoError(t, err)
	return out
}

func TestReleaseTagsEveryPublishedModuleInLockstep(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := workspace(t, "v0.1.0")
	gitT(t, dir, "init", "-q", "-b", "main")
	gitT(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "start")
	gitT(t, dir, "tag", "v0.1.0")
	gitT(t, dir, "add", "-A")
	gitT(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "docker: adopt interrupted ups")
	t.Setenv("GIT_AUTHOR_NAME", "t")
	t.Setenv("GIT_AUTHOR_EMAIL", "t@example.com")
	t.Setenv("GIT_COMMITTER_NAME", "t")
	t.Setenv("GIT_COMMITTER_EMAIL", "t@example.com")

	var out bytes.Buffer
	err := run([]string{"-C", dir, "-version", "v0.1.0", "-skip-tests"}, &out, &out)
	require.Error(t, err, "a version that is not above the latest tag is refused")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "kit.go"), []byte("package kit // edited\n"), 0o644))
	err = run([]string{"-C", dir, "-version", "v0.2.0", "-skip-tests"}, &out, &out)
	require.Error(t, err, "a dirty tree is refused")
	assert.Contains(t, err.Error(), "not clean")
	gitT(t, dir, "checkout", "--", "kit.go")

	require.NoError(t, run([]string{"-C", dir, "-version", "v0.2.0", "-skip-tests", "-dry-run"}, &out, &out))
	assert.NotContains(t, gitT(t, dir, "tag"), "v0.2.0", "a dry run tags nothing")

	require.NoError(t, run([]string{"-C", dir, "-version", "v0.2.0", "-skip-tests"}, &out, &out), out.String())
	tags := strings.Fields(gitT(t, dir, "tag", "--points-at", "HEAD~1"))
	assert.ElementsMatch(t, []string{"v0.2.0", "docker/v0.2.0", "convergectl/v0.2.0"}, tags, "bench is a tool: not tagged")
	assert.Empty(t, strings.TrimSpace(gitT(t, dir, "status", "--porcelain")), "everything is committed")

	// The command is tagged without its replace line (go install refuses
	// one), and has it back in the commit after the tags.
	tagged := gitT(t, dir, "show", "convergectl/v0.2.0:convergectl/go.mod")
	assert.Contains(t, tagged, "require example.com/kit v0.2.0")
	assert.NotContains(t, tagged, "replace")
	assert.Contains(t, gitT(t, dir, "show", "v0.2.0:docker/go.mod"), "replace example.com/kit => ../", "a library keeps its replace")
	ctl, err := os.ReadFile(filepath.Join(dir, "convergectl", "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(ctl), "require example.com/kit v0.2.0")
	assert.Contains(t, string(ctl), "replace example.com/kit => ../")
	assert.Contains(t, gitT(t, dir, "log", "-1", "--format=%s"), "convergectl builds alone in the repository again")

	docker, err := os.ReadFile(filepath.Join(dir, "docker", "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(docker), "example.com/kit v0.2.0")
	cl, err := os.ReadFile(filepath.Join(dir, "CHANGELOG.md"))
	require.NoError(t, err)
	assert.Contains(t, string(cl), "## Unreleased\n\n## v0.2.0 — ")
	assert.Contains(t, string(cl), "- Clean keeps volumes.")
	assert.Contains(t, string(cl), "- docker: adopt interrupted ups")

	mods, err := readModules(dir)
	require.NoError(t, err)
	v, err := lockstepVersion(mods)
	require.NoError(t, err)
	assert.Equal(t, "v0.2.0", v)
}

func TestRunRefusesAMissingVersion(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"-C", workspace(t, "v0.1.0")}, &out, &out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-version is required")
}

// TestConsumerGoGetsEveryModule is the proof that a program outside this
// repository can depend on its modules from the module proxy that
// `go run ./release -proxy DIR` writes, on a machine that reaches nothing
// else: it writes the proxy of the working tree at its lockstep version
// and, in a consumer module outside the workspace, with the settings
// docs/modules.md gives, an empty module cache and no network, runs go
// get for every library module, builds a program that imports them all
// and a program of the examples, and installs the command.
func TestConsumerGoGetsEveryModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a consumer against a module proxy of the tree: not in -short")
	}
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	mods, err := readModules(repoRoot)
	require.NoError(t, err)
	v, err := lockstepVersion(mods)
	require.NoError(t, err)

	proxy := t.TempDir()
	paths, err := writeProxy(repoRoot, proxy, v, time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)

	consumer := t.TempDir()
	// The consumer starts from the proxy's go.sum, as docs/modules.md says.
	sums, err := os.ReadFile(filepath.Join(proxy, "go.sum"))
	require.NoError(t, err, "the proxy has its go.sum")
	// Import every module that has a package at its root (the libraries,
	// not a root of tests only, as examples' is);
	// the examples module is built below by the path of a command in it.
	var imports strings.Builder
	for _, m := range mods {
		if !m.Published {
			continue
		}
		if !hasPackage(filepath.Join(repoRoot, m.Dir)) || m.Command {
			continue
		}
		imports.WriteString("\t_ \"" + m.Path + "\"\n")
	}
	files := map[string]string{
		"go.mod":  "module example.com/consumer\n\ngo 1.25.0\n",
		"go.sum":  string(sums),
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/convergekit/converge\"\n" + imports.String() + ")\n\nfunc main() { fmt.Println(converge.NewGraph() != nil) }\n",
	}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(consumer, name), []byte(content), 0o644))
	}

	// A machine that reaches only the proxy: GOPROXY names it alone, the
	// module cache starts empty, and every connection goes to a proxy
	// that is not there, so a module the proxy lacks, or a checksum the
	// go.sum lacks (the checksum database stays on), fails the test.
	env := append(os.Environ(),
		"GOWORK=off",
		"GOMODCACHE="+filepath.Join(t.TempDir(), "modcache"),
		"GOPROXY=file://"+filepath.ToSlash(proxy),
		"GOSUMDB=sum.golang.org",
		"GONOSUMDB=",
		"GONOSUMCHECK=",
		"GOPRIVATE=",
		"GOTOOLCHAIN=local",
		"GOFLAGS=-mod=mod -modcacherw -trimpath", // -trimpath: the build cache serves the next run, whatever its module cache path
		"HTTP_PROXY=http://127.0.0.1:1",
		"HTTPS_PROXY=http://127.0.0.1:1",
		"NO_PROXY=",
		"http_proxy=http://127.0.0.1:1",
		"https_proxy=http://127.0.0.1:1",
		"no_proxy=",
	)
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = consumer
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	}
	var gets []string
	for _, p := range paths {
		gets = append(gets, p+"@"+v)
	}
	goCmd(append([]string{"get"}, gets...)...)
	goCmd("build", "-o", filepath.Join(consumer, "consumer"), ".")
	goCmd("build", "-o", filepath.Join(consumer, "quickstart"), "github.com/convergekit/converge/examples/quickstart")

	// A command installs as docs/modules.md says, with go install at the version:
	// go install refuses a module whose go.mod has replace lines. Outside
	// a module it reads no go.sum, so offline it runs with the checksum
	// database off, trusting the proxy.
	env = append(env, "GOBIN="+filepath.Join(consumer, "bin"), "GOSUMDB=off")
	for _, m := range mods {
		if m.Command {
			goCmd("install", m.Path+"@"+v)
			out, err := exec.Command(filepath.Join(consumer, "bin", filepath.Base(m.Path)), "-h").Output()
			require.NoError(t, err, "%s -h", m.Path)
			assert.Contains(t, string(out), "usage:")
		}
	}

	gomod, err := os.ReadFile(filepath.Join(consumer, "go.mod"))
	require.NoError(t, err)
	for _, p := range paths {
		assert.Contains(t, string(gomod), p+" "+v, "the consumer requires %s at the release version", p)
	}
	assert.NotContains(t, string(gomod), "replace", "a consumer needs no replace")
	out, err := exec.Command(filepath.Join(consumer, "consumer")).Output()
	require.NoError(t, err)
	assert.Equal(t, "true\n", string(out))
}

// hasPackage reports whether dir holds a Go file other than a test.
func hasPackage(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			return true
		}
	}
	return false
}
