package docker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/registry"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// Secrets of the redaction tests: the value of a secret environment key,
// the password of a URL of the spec, and the password of a URL that only
// the engine's message quotes.
const (
	envSecret   = "env-secret-314"
	specURLPass = "url-pw-271"
	engURLPass  = "proxy-pw-161"
)

var redactSecrets = []string{envSecret, specURLPass, engURLPass}

// secretEnv is the environment of the containers of the redaction tests.
func secretEnv() map[string]string {
	return map[string]string{"DB_PASSWORD": envSecret, "DATABASE_URL": "postgres://app:" + specURLPass + "@db.local/app"}
}

// quoting fails the calls it has a function for with that function's
// error, as an engine or proxy whose messages quote what it was sent.
type quoting struct {
	*dockertest.Engine
	create func(cfg *container.Config) error
	pull   func(ref string) error
}

func (q quoting) ContainerCreate(ctx context.Context, cfg *container.Config, h *container.HostConfig, n *network.NetworkingConfig, pl *ocispec.Platform, name string) (container.CreateResponse, error) {
	if q.create != nil {
		return container.CreateResponse{}, q.create(cfg)
	}
	return q.Engine.ContainerCreate(ctx, cfg, h, n, pl, name)
}

func (q quoting) ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error) {
	if q.pull != nil {
		return nil, q.pull(ref)
	}
	return q.Engine.ImagePull(ctx, ref, opts)
}

// invalidParameter is classified by its marker method, as the Docker
// client's errdefs are, not by a sentinel.
type invalidParameter struct{ error }

func (invalidParameter) InvalidParameter() {}

// engineError is an engine error type of another package.
type engineError struct{ Msg string }

func (e *engineError) Error() string { return e.Msg }

// quote is an engine message quoting the create request's environment and
// a URL with credentials.
func quote(cfg *container.Config) string {
	return fmt.Sprintf("bad request: env %v via https://proxy:%s@proxy.local/", cfg.Env, engURLPass)
}

// reachable returns every string a caller can reach from err: the message
// of each error of its chain and the exported string fields of each.
func reachable(err error) []string {
	if err == nil {
		return nil
	}
	out := []string{err.Error(), fmt.Sprintf("%+v", err)}
	v := reflect.ValueOf(err)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
		for i := range v.NumField() {
			f := v.Field(i)
			switch {
			case !v.Type().Field(i).IsExported():
			case f.Kind() == reflect.String:
				out = append(out, f.String())
			case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
				for j := range f.Len() {
					out = append(out, f.Index(j).String())
				}
			}
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, reachable(u.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, reachable(e)...)
		}
	}
	return out
}

// assertNoSecret fails when a string reachable from err contains one of
// the secrets.
func assertNoSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, s := range reachable(err) {
		for _, secret := range secrets {
			assert.NotContains(t, s, secret)
		}
	}
}

// TestRedactedErrorsKeepTheirTypes: an error about a container whose
// message quotes a secret is scrubbed, and errors.As still finds each typed
// error of its chain, errors.Is each sentinel and engine classification;
// nothing reachable from it carries the secret.
func TestRedactedErrorsKeepTheirTypes(t *testing.T) {
	const ref = "reg.example/app:stable"
	spec := func(mod func(*docker.ContainerSpec)) *docker.Project {
		s := docker.ContainerSpec{Service: "a", Image: "app:1", Env: secretEnv()}
		if mod != nil {
			mod(&s)
		}
		return &docker.Project{Name: "red", Containers: []docker.ContainerSpec{s}}
	}
	tests := []struct {
		name string
		// setup returns the project and engine of the walk that fails.
		setup func(t *testing.T, f *dockertest.Engine) (*docker.Project, docker.Engine)
		is    []error // matched with errors.Is
		as    []any   // pointers to typed errors errors.As must find
		notAs []any   // pointers to types errors.As must not find
		keeps string  // a part of the message that must be kept
	}{
		{
			name: "create fails with an engine error classified by its marker method",
			setup: func(_ *testing.T, f *dockertest.Engine) (*docker.Project, docker.Engine) {
				return spec(nil), quoting{Engine: f, create: func(cfg *container.Config) error {
					return invalidParameter{errors.New(quote(cfg))}
				}}
			},
			is: []error{cerrdefs.ErrInvalidArgument}, as: []any{new(*converge.ItemError)},
			keeps: "docker: container red-a: create: bad request: env [",
		},
		{
			name: "create fails with a typed engine error",
			setup: func(_ *testing.T, f *dockertest.Engine) (*docker.Project, docker.Engine) {
				return spec(nil), quoting{Engine: f, create: func(cfg *container.Config) error {
					return fmt.Errorf("%w: %w", &engineError{Msg: quote(cfg)}, cerrdefs.ErrUnavailable)
				}}
			},
			is: []error{cerrdefs.ErrUnavailable}, as: []any{new(*converge.ItemError)},
			notAs: []any{new(*engineError)}, // its fields carry the secret
		},
		{
			name: "the name is taken by a container we do not own",
			setup: func(t *testing.T, f *dockertest.Engine) (*docker.Project, docker.Engine) {
				_, err := f.ContainerCreate(t.Context(), &container.Config{Image: "app:1"}, nil, nil, nil, "red-a")
				require.NoError(t, err)
				return spec(nil), quoting{Engine: f, create: func(cfg *container.Config) error {
					return fmt.Errorf("Conflict. %s: %w", quote(cfg), cerrdefs.ErrConflict)
				}}
			},
			is: []error{docker.ErrNotOwned, cerrdefs.ErrConflict}, as: []any{new(*converge.ItemError)},
			keeps: "the name is taken",
		},
		{
			name: "a dependency exits and its log quotes the secrets of the dependent",
			setup: func(t *testing.T, f *dockertest.Engine) (*docker.Project, docker.Engine) {
				apply(t, f, &docker.Project{Name: "red", Containers: []docker.ContainerSpec{{Service: "db", Image: "app:1", Run: docker.Stopped}}})
				f.Tamper("red-db", func(c *dockertest.Container) {
					c.Status, c.ExitCode = "exited", 2
					c.Log = fmt.Sprintf("password %s refused for postgres://app:%s@db.local/app\n", envSecret, specURLPass)
				})
				p := spec(func(s *docker.ContainerSpec) {
					s.DependsOn = []docker.Dependency{{Service: "db", Condition: docker.ServiceStarted}}
				})
				p.Containers = append(p.Containers, docker.ContainerSpec{Service: "db", Image: "app:1", Run: docker.Stopped})
				return p, f
			},
			is:    []error{docker.ErrDependencyFailed},
			as:    []any{new(*converge.ItemError), new(*docker.DependencyError)},
			keeps: "password " + docker.Redacted + " refused",
		},
		{
			name: "a KillThenDownload pull fails through a proxy that quotes its credentials",
			setup: func(t *testing.T, f *dockertest.Engine) (*docker.Project, docker.Engine) {
				f.Pullable(ref, 100)
				p := spec(func(s *docker.ContainerSpec) {
					s.Image, s.Pull, s.Update = ref, docker.PullAlways, docker.KillThenDownload
				})
				apply(t, f, p)
				f.Pullable(ref, 200) // a newer image under the tag
				return p, quoting{Engine: f, pull: func(ref string) error {
					return fmt.Errorf("pull %s via https://proxy:%s@proxy.local/ (env %s): %w", ref, engURLPass, envSecret, cerrdefs.ErrUnavailable)
				}}
			},
			is:    []error{cerrdefs.ErrUnavailable},
			as:    []any{new(*converge.ItemError), new(*docker.ImageError), new(*docker.PullError)},
			keeps: "https://proxy:" + docker.Redacted + "@proxy.local/",
		},
		{
			name: "a container exits at once and its log quotes the secrets",
			setup: func(_ *testing.T, f *dockertest.Engine) (*docker.Project, docker.Engine) {
				f.OnStart = func(c *dockertest.Container) (container.ContainerState, int) {
					c.Log = fmt.Sprintf("password %s refused for postgres://app:%s@db.local/app\n", envSecret, specURLPass)
					return "exited", 1
				}
				return spec(nil), f
			},
			is:    []error{docker.ErrContainerFailed},
			as:    []any{new(*converge.ItemError), new(*docker.ContainerError)},
			keeps: "password " + docker.Redacted + " refused",
		},
		{
			name: "a create refused with a *SpecError quoting the request",
			setup: func(_ *testing.T, f *dockertest.Engine) (*docker.Project, docker.Engine) {
				return spec(nil), quoting{Engine: f, create: func(cfg *container.Config) error {
					return &docker.SpecError{Object: "container red-a", Service: "a", Field: "Env", Reason: "refused by policy: " + quote(cfg)}
				}}
			},
			is:    []error{docker.ErrInvalidSpec},
			as:    []any{new(*converge.ItemError), new(*docker.SpecError)},
			keeps: "docker: container red-a: Env: refused by policy: bad request: env [",
		},
		{
			name: "a typed engine error without secrets, beside a message quoting them, is kept as it is",
			setup: func(_ *testing.T, f *dockertest.Engine) (*docker.Project, docker.Engine) {
				return spec(nil), quoting{Engine: f, create: func(cfg *container.Config) error {
					return fmt.Errorf("%w: %w", &engineError{Msg: "no space left on device"},
						fmt.Errorf("%s: %w", quote(cfg), cerrdefs.ErrResourceExhausted))
				}}
			},
			is: []error{cerrdefs.ErrResourceExhausted}, as: []any{new(*converge.ItemError), new(*engineError)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, eng := tt.setup(t, newFake())
				rep, err := converge.Apply(t.Context(), mustGraph(t, p, eng))
				require.Error(t, err)
				r, _ := rep.Item(docker.ContainerID("red", "a"))
				for _, e := range []error{err, r.Err} {
					for _, target := range tt.is {
						assert.ErrorIs(t, e, target)
					}
					for _, target := range tt.as {
						if assert.ErrorAs(t, e, target) { // what As found carries no secret either
							assertNoSecret(t, reflect.ValueOf(target).Elem().Interface().(error), redactSecrets...)
						}
					}
					for _, target := range tt.notAs {
						assert.False(t, errors.As(e, target), "%T found", target)
					}
					assert.Contains(t, e.Error(), tt.keeps)
					assertNoSecret(t, e, redactSecrets...)
				}
			})
		})
	}
}

// TestRedactedErrorKeepsEngineClassifications: errors.Is and the
// containerd errdefs predicates see through a scrubbed engine error, for
// sentinels and for errors classified by their marker methods.
func TestRedactedErrorKeepsEngineClassifications(t *testing.T) {
	tests := []struct {
		name string
		err  error
		is   func(error) bool
	}{
		{"sentinel", fmt.Errorf("%s: %w", envSecret, cerrdefs.ErrPermissionDenied), cerrdefs.IsPermissionDenied},
		{"marker method", invalidParameter{errors.New(envSecret)}, cerrdefs.IsInvalidArgument},
		{"context", fmt.Errorf("%s: %w", envSecret, context.DeadlineExceeded), cerrdefs.IsDeadlineExceeded},
		{"joined", errors.Join(errors.New(envSecret), cerrdefs.ErrNotModified), cerrdefs.IsNotModified},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &docker.Project{Name: "red", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Env: secretEnv()}}}
				eng := quoting{Engine: newFake(), create: func(*container.Config) error { return tt.err }}
				_, err := converge.Apply(t.Context(), mustGraph(t, p, eng))
				require.Error(t, err)
				assert.True(t, tt.is(err), "%v", err)
				assertNoSecret(t, err, envSecret)
			})
		})
	}
}

// TestSecretEnvKeys: the keys whose values are secret by default (see
// IsSecretEnv), and those that are not; a secret key's value is scrubbed
// from a failing container's error and log tail.
func TestSecretEnvKeys(t *testing.T) {
	secret := []string{
		"DB_PASSWORD", "db_passwd", "GPG_PASSPHRASE", "CLIENT_SECRET", "github_token", "TOKEN", "AccessToken",
		"GOOGLE_APPLICATION_CREDENTIALS", "credential", "API_KEY", "apikey", "SSH_PRIVATE_KEY", "PRIVATEKEY",
		"BASIC_AUTH", "AWS_SECRET_ACCESS_KEY",
		"SMTP_PASS", "db.pass", "MYSQL_PWD", "redis-pw", "STRIPE_KEY", "Signing_Key", "JWT_KEYS", "SENTRY_DSN",
	}
	plain := []string{"MODE", "PORT", "PWD", "PATH", "MONKEY", "KEYBOARD", "PASSAGE", "DSN_HOST", "HOME", "KEY_ID"}
	for _, k := range secret {
		assert.True(t, docker.IsSecretEnv(k, nil), k)
	}
	for _, k := range plain {
		assert.False(t, docker.IsSecretEnv(k, nil), k)
	}
	assert.True(t, docker.IsSecretEnv("PIN", []string{"PIN"}), "listed in extra")
	assert.False(t, docker.IsSecretEnv("pin", []string{"PIN"}), "extra lists keys exactly")

	for _, k := range secret {
		t.Run(k, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				value := "value-of-" + strings.ToLower(k)
				f := newFake()
				f.OnStart = func(c *dockertest.Container) (container.ContainerState, int) {
					c.Log = "starting with " + value + "\n"
					return "exited", 1
				}
				p := &docker.Project{Name: "red", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1",
					Env: map[string]string{k: value}}}}
				_, err := converge.Apply(t.Context(), mustGraph(t, p, f))
				var ce *docker.ContainerError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, "starting with "+docker.Redacted, ce.Log)
				assertNoSecret(t, err, value)
			})
		})
	}
}

// TestSecretAroundTypedFieldsHidesTheType: a secret that only shows in the
// text a typed error formats around its fields cannot be scrubbed from a
// copy of that type, so the error becomes opaque: errors.Is holds,
// errors.As does not, and the secret is nowhere.
func TestSecretAroundTypedFieldsHidesTheType(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const secret = "code 3 right"
		f := newFake()
		f.OnStart = func(*dockertest.Container) (container.ContainerState, int) { return "exited", 3 }
		p := &docker.Project{Name: "red", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1",
			Env: map[string]string{"API_TOKEN": secret}}}}
		_, err := converge.Apply(t.Context(), mustGraph(t, p, f))
		require.ErrorIs(t, err, docker.ErrContainerFailed)
		var ce *docker.ContainerError
		assert.False(t, errors.As(err, &ce))
		assert.Contains(t, err.Error(), "exited with "+docker.Redacted+" after it was started")
		assertNoSecret(t, err, secret)
	})
}

// TestImageErrorsScrubURLPasswords: a pull that fails with an engine
// message quoting a proxy URL with its credentials fails the image item
// with the password scrubbed, and errors.As still finds *ImageError and
// *PullError.
func TestImageErrorsScrubURLPasswords(t *testing.T) {
	const ref = "reg.example/app:2"
	for _, dry := range []bool{false, true} {
		t.Run(fmt.Sprintf("dry=%v", dry), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake()
				f.Pullable(ref, 100)
				fail := func(string) error {
					return fmt.Errorf("pull via https://proxy:%s@proxy.local/: %w", engURLPass, cerrdefs.ErrUnavailable)
				}
				var eng docker.Engine = quoting{Engine: f, pull: fail}
				if dry {
					eng = inspectFails{Engine: f, err: fail(ref)}
				}
				p := &docker.Project{Name: "red", Containers: []docker.ContainerSpec{{Service: "a", Image: ref}}}
				apply := converge.Apply
				if dry {
					apply = converge.ApplyDry
				}
				rep, err := apply(t.Context(), mustGraph(t, p, eng))
				require.Error(t, err)
				r, ok := rep.Item(docker.ImageID(ref))
				require.True(t, ok)
				for _, e := range []error{err, r.Err} {
					assert.ErrorIs(t, e, cerrdefs.ErrUnavailable)
					var ie *docker.ImageError
					var pe *docker.PullError
					assert.ErrorAs(t, e, &ie)
					assert.ErrorAs(t, e, &pe)
					assert.Contains(t, e.Error(), "https://proxy:"+docker.Redacted+"@proxy.local/")
					assertNoSecret(t, e, engURLPass)
				}
			})
		})
	}
}

// inspectFails fails every registry lookup with err.
type inspectFails struct {
	*dockertest.Engine
	err error
}

func (e inspectFails) DistributionInspect(context.Context, string, string) (registry.DistributionInspect, error) {
	return registry.DistributionInspect{}, e.err
}
