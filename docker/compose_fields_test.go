package docker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// writeFiles writes files (relative path to content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	}
}

// TestLoadComposeEnvFile: env_file is read only inside the project
// directory (or a directory the program allows), through os.Root so
// neither ".." nor a symbolic link leads out; environment overrides it; a
// missing optional file is skipped; Project.EnvFiles lists exactly the
// files read; a refusal is a *SpecError naming the service and the entry.
func TestLoadComposeEnvFile(t *testing.T) {
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{"shadow": "ROOT=x\n", "allowed.env": "FROM_ALLOWED=yes\n"})
	tests := []struct {
		name      string
		envFile   string // the service's env_file value (YAML)
		env       string // the service's environment (YAML), or ""
		allow     bool   // LoadOptions.EnvFileDirs holds outside
		wantEnv   map[string]string
		wantFiles []docker.EnvFileRead
		wantField string // the *SpecError's field, "" for none
	}{
		{name: "inside", envFile: "[app.env]", wantEnv: map[string]string{"A": "1", "B": "two"},
			wantFiles: []docker.EnvFileRead{{Service: "web", Path: "app.env"}}},
		{name: "environment overrides", envFile: "[app.env]", env: "{B: three}", wantEnv: map[string]string{"A": "1", "B": "three"},
			wantFiles: []docker.EnvFileRead{{Service: "web", Path: "app.env"}}},
		{name: "in order, later wins", envFile: "[app.env, sub/more.env]", wantEnv: map[string]string{"A": "1", "B": "again", "C": "3"},
			wantFiles: []docker.EnvFileRead{{Service: "web", Path: "app.env"}, {Service: "web", Path: filepath.Join("sub", "more.env")}}},
		{name: "optional missing", envFile: "[{path: app.env}, {path: none.env, required: false}]", wantEnv: map[string]string{"A": "1", "B": "two"},
			wantFiles: []docker.EnvFileRead{{Service: "web", Path: "app.env"}}},
		{name: "raw format", envFile: "[{path: raw.env, format: raw}]", wantEnv: map[string]string{"Q": `"kept"`},
			wantFiles: []docker.EnvFileRead{{Service: "web", Path: "raw.env"}}},
		{name: "required missing", envFile: "[none.env]", wantField: "env_file[0]"},
		{name: "dot-dot", envFile: "[../" + filepath.Base(outside) + "/shadow]", wantField: "env_file[0]"},
		{name: "absolute", envFile: "[" + filepath.Join(outside, "shadow") + "]", wantField: "env_file[0]"},
		{name: "symlink out", envFile: "[link.env]", wantField: "env_file[0]"},
		{name: "not an env file", envFile: "[bad.env]", wantField: "env_file[0]"},
		{name: "allowed directory", envFile: "[" + filepath.Join(outside, "allowed.env") + "]", allow: true,
			wantEnv:   map[string]string{"FROM_ALLOWED": "yes"},
			wantFiles: []docker.EnvFileRead{{Service: "web", Path: filepath.Join(outside, "allowed.env")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(filepath.Dir(outside), "proj-"+filepath.Base(t.TempDir()))
			writeFiles(t, dir, map[string]string{"app.env": "A=1\nB=two\n", "sub/more.env": "B=again\nC=3\n",
				"raw.env": `Q="kept"` + "\n", "bad.env": "not a variable line with spaces\n"})
			t.Cleanup(func() { os.RemoveAll(dir) })
			require.NoError(t, os.Symlink(filepath.Join(outside, "shadow"), filepath.Join(dir, "link.env")))
			yaml := "name: ef\nservices:\n  web:\n    image: i\n    env_file: " + tt.envFile + "\n"
			if tt.env != "" {
				yaml += "    environment: " + tt.env + "\n"
			}
			opts := docker.LoadOptions{WorkingDir: dir}
			if tt.allow {
				opts.EnvFileDirs = []string{outside}
			}
			p, err := docker.LoadCompose(context.Background(), []byte(yaml), opts)
			if tt.wantField != "" {
				var se *docker.SpecError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, "web", se.Service)
				assert.Equal(t, tt.wantField, se.Field)
				assert.NotContains(t, err.Error(), "ROOT=x", "no content in the error")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantEnv, p.Containers[0].Env)
			assert.Equal(t, tt.wantFiles, p.EnvFiles)
			assert.Empty(t, p.Unsupported)
		})
	}
}

// TestLoadComposeNewFields: anonymous volumes, dockerfile_inline and
// build tags load, and the stored JSON form carries them (and the env_file
// report) through a round trip.
func TestLoadComposeNewFields(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"app.env": "A=1\n"})
	p, err := docker.LoadCompose(context.Background(), []byte(`name: nf
services:
  web:
    build:
      dockerfile_inline: |
        FROM scratch
        COPY app /app
      tags: [nf-web:extra]
    env_file: app.env
    volumes:
      - /data
      - type: volume
        target: /cache
`), docker.LoadOptions{WorkingDir: dir})
	require.NoError(t, err)
	c := p.Containers[0]
	assert.Equal(t, []docker.Mount{{Type: "volume", Target: "/data"}, {Type: "volume", Target: "/cache"}}, c.Mounts)
	require.NotNil(t, c.Build)
	assert.Equal(t, "FROM scratch\nCOPY app /app\n", c.Build.DockerfileInline)
	assert.Empty(t, c.Build.Dockerfile)
	assert.Equal(t, []string{"nf-web:extra"}, c.Build.Tags)
	assert.Equal(t, "nf-web", c.Image)

	b, err := json.Marshal(p)
	require.NoError(t, err)
	for _, s := range []string{`"dockerfile_inline":"FROM scratch`, `"tags":["nf-web:extra"]`, `"env_files":[{"service":"web","path":"app.env"}]`,
		`{"type":"volume","target":"/data"}`} {
		assert.Contains(t, string(b), s)
	}
	var back docker.Project
	require.NoError(t, json.Unmarshal(b, &back))
	back.HashKey = p.HashKey
	assert.Equal(t, *p, back)
}

// TestBadMountsAndBuildsNameTheField: a mount without a target, a bind
// without a source, a build with both Dockerfile and DockerfileInline,
// an empty tag, a link to a service the container does not depend on and
// a bad volumes_from are refused naming the field.
func TestBadMountsAndBuildsNameTheField(t *testing.T) {
	tests := []struct {
		name  string
		spec  docker.ContainerSpec
		field string
	}{
		{"volume without target", docker.ContainerSpec{Mounts: []docker.Mount{{Type: "volume"}}}, "Mounts[0].Target"},
		{"bind without source", docker.ContainerSpec{Mounts: []docker.Mount{{Type: "bind", Target: "/x"}}}, "Mounts[0].Source"},
		{"two dockerfiles", docker.ContainerSpec{Build: &docker.Build{Context: ".", Dockerfile: "D", DockerfileInline: "FROM scratch"}}, "Build.DockerfileInline"},
		{"empty tag", docker.ContainerSpec{Build: &docker.Build{Context: ".", Tags: []string{""}}}, "Build.Tags[0]"},
		{"remote context of no scheme the engine fetches", docker.ContainerSpec{Build: &docker.Build{Context: "ssh://user:pw-s3cr3t@host/repo.git"}}, "Build.Context"},
		{"two build platforms", docker.ContainerSpec{Build: &docker.Build{Context: ".", Platform: "linux/amd64,linux/arm64"}}, "Build.Platform"},
		{"remote context with an inline Dockerfile", docker.ContainerSpec{Build: &docker.Build{Context: "https://host/c.tar", DockerfileInline: "FROM scratch"}}, "Build.DockerfileInline"},
		{"link to a service not depended on", docker.ContainerSpec{Links: []string{"db:database"}}, "Links[0]"},
		{"volumes_from an unknown service", docker.ContainerSpec{VolumesFrom: []string{"nope"}}, "VolumesFrom[0]"},
		{"external link without a container", docker.ContainerSpec{ExternalLinks: []string{":alias"}}, "ExternalLinks[0]"},
		{"volumes_from with a bad mode", docker.ContainerSpec{VolumesFrom: []string{"container:x:rx"}}, "VolumesFrom[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Service, tt.spec.Image = "a", "i"
			_, err := (&docker.Project{Name: "bad", Containers: []docker.ContainerSpec{tt.spec}}).Graph(newFake())
			require.ErrorIs(t, err, docker.ErrInvalidSpec)
			var se *docker.SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tt.field, se.Field)
			assert.NotContains(t, err.Error(), "pw-s3cr3t", "a URL's password is redacted")
		})
	}
}

// recordingBuilder is a fake engine that records the builds asked of it
// and fails each, with a URL's password in the engine's message.
type recordingBuilder struct {
	*dockertest.Engine
	builds []build.ImageBuildOptions
	bodies []io.Reader
}

func (r *recordingBuilder) ImageBuild(_ context.Context, body io.Reader, opts build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	r.builds = append(r.builds, opts)
	r.bodies = append(r.bodies, body)
	return build.ImageBuildResponse{}, errors.New("cannot fetch " + opts.RemoteContext)
}

// TestRemoteBuildContext: a remote context (git or http URL) is accepted
// and sent as the build endpoint's remote parameter with no tar stream;
// its build key follows its URL and options; an error of its build
// carries no password of the URL.
func TestRemoteBuildContext(t *testing.T) {
	for _, c := range []string{"https://github.com/docker/compose.git", "https://host/repo.git#v1:sub", "git://host/repo",
		"git@github.com:docker/compose.git", "github.com/docker/compose", "http://user:pw-s3cr3t@127.0.0.1:8080/ctx.tar"} {
		t.Run(c, func(t *testing.T) {
			f := &recordingBuilder{Engine: newFake()}
			var keys []string
			for _, b := range []docker.Build{{Context: c, Args: map[string]string{"X": "1"}},
				{Context: c, Args: map[string]string{"X": "1"}}, {Context: c + "x", Args: map[string]string{"X": "1"}},
				{Context: c, Args: map[string]string{"X": "2"}}} {
				p := &docker.Project{Name: "rb", Containers: []docker.ContainerSpec{{Service: "a", Image: "rb-a", Build: &b}}}
				g, err := p.Graph(f)
				require.NoError(t, err)
				_, err = converge.Apply(context.Background(), g)
				require.ErrorIs(t, err, docker.ErrBuildFailed)
				assert.NotContains(t, err.Error(), "pw-s3cr3t")
				last := f.builds[len(f.builds)-1]
				assert.Equal(t, b.Context, last.RemoteContext)
				assert.Nil(t, f.bodies[len(f.bodies)-1], "no tar stream is sent")
				keys = append(keys, last.Labels[docker.LabelBuildKey])
			}
			assert.Equal(t, keys[0], keys[1], "the same URL and options, the same key")
			assert.NotEqual(t, keys[0], keys[2], "another URL, another key")
			assert.NotEqual(t, keys[0], keys[3], "other options, another key")
		})
	}
}

// TestLoadComposeRefusesByDesignWithReason: develop, provider and
// additional_contexts are refused through *UnsupportedError with the
// reason, which the message carries.
func TestLoadComposeRefusesByDesignWithReason(t *testing.T) {
	_, err := docker.LoadCompose(context.Background(), []byte(`name: r
services:
  web:
    image: i
    attach: false
  ai:
    provider: {type: model, options: {model: x}}
`), docker.LoadOptions{WorkingDir: t.TempDir()})
	var ue *docker.UnsupportedError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, []string{"services.ai.provider", "services.web.attach"}, ue.Fields)
	for _, f := range ue.Fields {
		require.NotEmpty(t, ue.Reasons[f], f)
		assert.Contains(t, err.Error(), f+" ("+ue.Reasons[f]+")")
	}
}

// TestLoadComposeDevelopHasNoEffect: develop (compose watch's) is accepted,
// changes nothing in the service's spec (but compose's own hash, which covers it),
// and is listed in Project.NoEffect with its reason, in the project's JSON
// too, with or without IgnoreUnsupported.
func TestLoadComposeDevelopHasNoEffect(t *testing.T) {
	const base = `name: dev
services:
  web:
    image: alpine
    command: [sleep, "1"]
`
	const develop = `    develop:
      watch: [{path: ./src, action: sync, target: /src}]
`
	for _, ignore := range []bool{false, true} {
		opts := docker.LoadOptions{WorkingDir: t.TempDir(), IgnoreUnsupported: ignore}
		plain, err := docker.LoadCompose(context.Background(), []byte(base), opts)
		require.NoError(t, err)
		p, err := docker.LoadCompose(context.Background(), []byte(base+develop), opts)
		require.NoError(t, err)
		assert.Empty(t, p.Unsupported)
		require.Len(t, p.NoEffect, 1)
		assert.Equal(t, "services.web.develop", p.NoEffect[0].Field)
		assert.Contains(t, p.NoEffect[0].Reason, "compose watch")
		assert.Empty(t, plain.NoEffect)
		got, want := p.Containers[0], plain.Containers[0]
		assert.NotEmpty(t, got.ComposeHash, "compose's hash, develop included, is written as compose writes it")
		assert.NotEqual(t, want.ComposeHash, got.ComposeHash, "compose's hash covers develop")
		got.ComposeHash, want.ComposeHash = "", ""
		assert.Equal(t, want, got, "develop changes nothing in the container")
		b, err := json.Marshal(p)
		require.NoError(t, err)
		assert.Contains(t, string(b), `"no_effect":[{"field":"services.web.develop","reason":`)
	}
}

// TestLoadComposeSecretsAndConfigs: secrets and configs are carried out as
// compose does without swarm, file-based ones as read-only binds, the
// others as Files; what cannot be carried out is refused by name with its
// reason, and an unset variable is named without any value.
func TestLoadComposeSecretsAndConfigs(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"db.txt": "s3cr3t-file\n", "app.conf": "x=1\n"})
	top := `
secrets:
  db: {file: ./db.txt}
  api: {environment: API_VALUE}
configs:
  conf: {file: ./app.conf}
  inline: {content: "hello config"}
`
	tests := []struct {
		name       string
		service    string
		extraTop   string
		env        map[string]string
		wantMounts []docker.Mount
		wantFiles  []docker.File
		wantFields []string // UnsupportedError.Fields
		wantSpec   string   // SpecError.Field
	}{
		{name: "file secret at its default target", service: "secrets: [db]",
			wantMounts: []docker.Mount{{Type: "bind", Source: filepath.Join(dir, "db.txt"), Target: "/run/secrets/db", ReadOnly: true}}},
		{name: "relative secret target", service: "secrets: [{source: db, target: pw}]",
			wantMounts: []docker.Mount{{Type: "bind", Source: filepath.Join(dir, "db.txt"), Target: "/run/secrets/pw", ReadOnly: true}}},
		{name: "file config", service: "configs: [{source: conf, target: /etc/app.conf}]",
			wantMounts: []docker.Mount{{Type: "bind", Source: filepath.Join(dir, "app.conf"), Target: "/etc/app.conf", ReadOnly: true}}},
		{name: "environment secret with owner and mode", service: "secrets: [{source: api, uid: '100', gid: '101', mode: 0400}]",
			env:       map[string]string{"API_VALUE": "from-env"},
			wantFiles: []docker.File{{Target: "/run/secrets/api", Content: "from-env", UID: "100", GID: "101", Mode: 0o400, Secret: true}}},
		{name: "content config", service: "configs: [inline]",
			wantFiles: []docker.File{{Target: "/inline", Content: "hello config"}}},
		{name: "unset variable", service: "secrets: [api]", wantSpec: "secrets.api"},
		{name: "owner of a file secret", service: "secrets: [{source: db, uid: '1'}]", wantFields: []string{"services.web.secrets.db.uid"}},
		{name: "external secret", service: "secrets: [ext]", extraTop: "  ext: {external: true}\n",
			wantFields: []string{"secrets.ext.external"}},
		{name: "read-only container", service: "read_only: true\n    configs: [inline]", wantSpec: "Files[0].Target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := "name: sc\nservices:\n  web:\n    image: i\n    " + tt.service + "\n" + top
			if tt.extraTop != "" {
				yaml = strings.Replace(yaml, "secrets:\n  db:", "secrets:\n"+tt.extraTop+"  db:", 1)
			}
			p, err := docker.LoadCompose(context.Background(), []byte(yaml), docker.LoadOptions{WorkingDir: dir, Env: tt.env})
			switch {
			case tt.wantFields != nil:
				var ue *docker.UnsupportedError
				require.ErrorAs(t, err, &ue)
				assert.Equal(t, tt.wantFields, ue.Fields)
				for _, f := range tt.wantFields {
					assert.NotEmpty(t, ue.Reasons[f], f)
				}
			case tt.wantSpec != "":
				var se *docker.SpecError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, tt.wantSpec, se.Field)
			default:
				require.NoError(t, err)
				assert.Equal(t, tt.wantMounts, p.Containers[0].Mounts)
				assert.Equal(t, tt.wantFiles, p.Containers[0].Files)
			}
		})
	}
}

// TestSecretOfAnIncludedFile: a secret an included file declares from a
// variable takes the variable from the include's env_file, as compose does
// (compose's TestSecretFromEnv); with no such variable anywhere it is
// refused by name, without a value.
func TestSecretOfAnIncludedFile(t *testing.T) {
	tests := []struct {
		name     string
		envFile  string
		wantSpec bool
	}{
		{name: "from the include's env_file", envFile: "MY_SECRET=from-include\n"},
		{name: "unset", envFile: "OTHER=x\n", wantSpec: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{
				"secret.env": tt.envFile,
				"child/compose.yaml": `services:
  included:
    image: alpine
    secrets: [my-secret]
secrets:
  my-secret: {environment: MY_SECRET}
`})
			p, err := docker.LoadCompose(context.Background(), []byte(`name: inc
include:
  - path: child/compose.yaml
    env_file: [secret.env]
`), docker.LoadOptions{WorkingDir: dir})
			if tt.wantSpec {
				var se *docker.SpecError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, "secrets.my-secret", se.Field)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []docker.File{{Target: "/run/secrets/my-secret", Content: "from-include", Secret: true}}, p.Containers[0].Files)
		})
	}
}

// TestFilesNeedACopier: a container with Files on an engine that cannot
// copy fails with ErrCannotCopy, before it is started, and the error
// carries no secret content.
func TestFilesNeedACopier(t *testing.T) {
	f := newFake()
	p := &docker.Project{Name: "fc", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1",
		Files: []docker.File{{Target: "/run/secrets/k", Content: "very-secret-content", Secret: true}}}}}
	g, err := p.Graph(f)
	require.NoError(t, err)
	_, err = converge.Apply(context.Background(), g)
	require.ErrorIs(t, err, docker.ErrCannotCopy)
	assert.NotContains(t, err.Error(), "very-secret-content")
	assert.Zero(t, f.Calls()["ContainerStart"], "calls: %v", f.Calls())
	assert.Empty(t, f.Containers(), "the container without its files is removed")
}

// TestLoadComposeSmallFields: healthcheck.start_interval,
// deploy.restart_policy (restart: wins, as in compose) and an optional
// dependency on a service the project does not run.
func TestLoadComposeSmallFields(t *testing.T) {
	tests := []struct {
		name    string
		service string
		check   func(t *testing.T, c docker.ContainerSpec)
		refused []string
	}{
		{name: "start_interval", service: "healthcheck: {test: [CMD, x], interval: 30s, start_period: 10s, start_interval: 1s}",
			check: func(t *testing.T, c docker.ContainerSpec) {
				assert.Equal(t, &docker.Healthcheck{Test: []string{"CMD", "x"}, Interval: 30 * time.Second, StartPeriod: 10 * time.Second,
					StartInterval: time.Second}, c.Healthcheck)
			}},
		{name: "restart_policy on-failure", service: "deploy: {restart_policy: {condition: on-failure, max_attempts: 2}}",
			check: func(t *testing.T, c docker.ContainerSpec) { assert.Equal(t, "on-failure:2", c.Restart) }},
		{name: "restart_policy any", service: "deploy: {restart_policy: {condition: any}}",
			check: func(t *testing.T, c docker.ContainerSpec) { assert.Equal(t, "always", c.Restart) }},
		{name: "restart_policy none", service: "deploy: {restart_policy: {condition: none}}",
			check: func(t *testing.T, c docker.ContainerSpec) { assert.Equal(t, "no", c.Restart) }},
		{name: "restart wins", service: "restart: unless-stopped\n    deploy: {restart_policy: {condition: none}}",
			check: func(t *testing.T, c docker.ContainerSpec) { assert.Equal(t, "unless-stopped", c.Restart) }},
		{name: "restart_policy delay is swarm's", service: "deploy: {restart_policy: {condition: any, delay: 5s}}",
			refused: []string{"services.web.deploy.restart_policy.delay"}},
		{name: "optional dependency absent", service: "depends_on: {off: {condition: service_healthy, required: false}}",
			check: func(t *testing.T, c docker.ContainerSpec) { assert.Empty(t, c.DependsOn) }},
		{name: "optional dependency present", service: "depends_on: {db: {condition: service_started, required: false}}",
			check: func(t *testing.T, c docker.ContainerSpec) {
				require.Len(t, c.DependsOn, 1)
				assert.Equal(t, "db", c.DependsOn[0].Service)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := "name: sf\nservices:\n  db:\n    image: i\n  off:\n    image: i\n    profiles: [never]\n  web:\n    image: i\n    " + tt.service + "\n"
			p, err := docker.LoadCompose(context.Background(), []byte(yaml), docker.LoadOptions{WorkingDir: t.TempDir()})
			if tt.refused != nil {
				var ue *docker.UnsupportedError
				require.ErrorAs(t, err, &ue)
				assert.Equal(t, tt.refused, ue.Fields)
				return
			}
			require.NoError(t, err)
			for _, c := range p.Containers {
				if c.Service == "web" {
					tt.check(t, c)
				}
			}
		})
	}
}

// TestStartIntervalReachesTheEngine: healthcheck.start_interval is in the
// create request (engines older than API 1.44 refuse it there).
func TestStartIntervalReachesTheEngine(t *testing.T) {
	f := newFake()
	p := load(t, "name: si\nservices:\n  a:\n    image: app:1\n    healthcheck: {test: [CMD, x], start_interval: 2s}\n")
	apply(t, f, p)
	c, ok := f.Container("si-a")
	require.True(t, ok, "containers: %v", f.Containers())
	require.NotNil(t, c.Config.Healthcheck)
	assert.Equal(t, 2*time.Second, c.Config.Healthcheck.StartInterval)
}

// TestHooksLoadAndNeedAnExecer: post_start and pre_stop load with their
// options and survive the stored JSON form; a hook without a command is
// refused naming it; an engine that cannot exec fails the hook with
// ErrCannotExec.
func TestHooksLoadAndNeedAnExecer(t *testing.T) {
	p := load(t, `name: hk
services:
  a:
    image: app:1
    environment: {FROM_PROJECT: v}
    post_start:
      - {command: [/bin/true], user: root, privileged: true, working_dir: /w, environment: {X: "1"}}
    pre_stop:
      - command: [/bin/drain]
`)
	c := p.Containers[0]
	assert.Equal(t, []docker.Hook{{Command: []string{"/bin/true"}, User: "root", Privileged: true, WorkingDir: "/w", Env: map[string]string{"X": "1"}}}, c.PostStart)
	assert.Equal(t, []docker.Hook{{Command: []string{"/bin/drain"}}}, c.PreStop)
	b, err := json.Marshal(p)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"post_start":[{"command":["/bin/true"]`)
	var back docker.Project
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, c.PostStart, back.Containers[0].PostStart)
	assert.Equal(t, c.PreStop, back.Containers[0].PreStop)

	bad := *p
	bad.Containers = []docker.ContainerSpec{c}
	bad.Containers[0].PreStop = []docker.Hook{{}}
	_, err = bad.Graph(newFake())
	var se *docker.SpecError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "PreStop[0].Command", se.Field)

	f := newFake()
	g, err := p.Graph(f)
	require.NoError(t, err)
	_, err = converge.Apply(context.Background(), g)
	require.ErrorIs(t, err, docker.ErrCannotExec)
}

// TestPreStartHooksBecomeServices: each pre_start hook is a service run
// once, after the previous hook, before its service, on the service's
// image (its built one, built once), without the service's name, ports
// or restart policy.
func TestPreStartHooksBecomeServices(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"Dockerfile": "FROM scratch\n"})
	p, err := docker.LoadCompose(context.Background(), []byte(`name: ps
services:
  web:
    build: .
    container_name: the-web
    restart: always
    ports: ["8080:80"]
    pre_start:
      - command: [init, one]
      - {image: other:1, command: [init, two]}
`), docker.LoadOptions{WorkingDir: dir})
	require.NoError(t, err)
	byName := map[string]docker.ContainerSpec{}
	for _, c := range p.Containers {
		byName[c.Service] = c
	}
	h0, h1, web := byName["web-pre_start-0"], byName["web-pre_start-1"], byName["web"]
	assert.Equal(t, "ps-web", h0.Image)
	assert.Equal(t, web.Build, h0.Build, "the service's build")
	assert.Equal(t, []string{"init", "one"}, h0.Command)
	assert.Equal(t, docker.Once, h0.Run)
	assert.Empty(t, h0.Name)
	assert.Empty(t, h0.Ports)
	assert.Empty(t, h0.Restart)
	assert.Equal(t, "other:1", h1.Image)
	assert.Equal(t, []docker.Dependency{{Service: "web-pre_start-0", Condition: docker.ServiceCompletedSuccessfully}}, h1.DependsOn)
	assert.Equal(t, []docker.Dependency{{Service: "web-pre_start-0", Condition: docker.ServiceCompletedSuccessfully},
		{Service: "web-pre_start-1", Condition: docker.ServiceCompletedSuccessfully}}, web.DependsOn)
	g, err := p.Graph(newFake())
	require.NoError(t, err)
	assert.NotNil(t, g)
}

// TestLoadComposeBuildPlatform: one build platform, or the service's
// platform, is the build's; more than one is refused with its reason.
func TestLoadComposeBuildPlatform(t *testing.T) {
	tests := []struct {
		name, service, want string
		refused             bool
	}{
		{name: "one build platform", service: "build: {context: ., platforms: [linux/arm64]}", want: "linux/arm64"},
		{name: "the service's platform", service: "platform: linux/386\n    build: {context: .}", want: "linux/386"},
		{name: "neither", service: "build: {context: .}"},
		{name: "two", service: "build: {context: ., platforms: [linux/amd64, linux/arm64]}", refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := docker.LoadCompose(context.Background(), []byte("name: bp\nservices:\n  web:\n    "+tt.service+"\n"),
				docker.LoadOptions{WorkingDir: t.TempDir()})
			if tt.refused {
				var ue *docker.UnsupportedError
				require.ErrorAs(t, err, &ue)
				assert.Equal(t, []string{"services.web.build.platforms"}, ue.Fields)
				assert.Contains(t, ue.Reasons["services.web.build.platforms"], "buildx")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, p.Containers[0].Build.Platform)
		})
	}
}

// TestLoadComposeNewerAPIFieldsNameTheVersion: fields that need an engine
// API newer than 1.41 are refused with a reason naming the version.
func TestLoadComposeNewerAPIFieldsNameTheVersion(t *testing.T) {
	_, err := docker.LoadCompose(context.Background(), []byte(`name: api
services:
  web:
    image: alpine
    volumes: [{type: image, source: alpine, target: /img}]
    networks:
      default: {interface_name: eth7}
`), docker.LoadOptions{WorkingDir: t.TempDir()})
	var ue *docker.UnsupportedError
	require.ErrorAs(t, err, &ue)
	want := map[string]string{
		"services.web.volumes(image)":                  "1.48",
		"services.web.networks.default.interface_name": "1.49",
	}
	for f, version := range want {
		require.Contains(t, ue.Fields, f)
		assert.Contains(t, ue.Reasons[f], "API "+version, f)
	}
}
