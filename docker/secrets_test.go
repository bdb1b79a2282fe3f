package docker_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// echoEngine echoes the whole create request, environment and command, in
// its error, plus a URL with credentials of its own, as a careless engine
// or proxy might.
type echoEngine struct{ *dockertest.Engine }

func (e echoEngine) ContainerCreate(ctx context.Context, cfg *container.Config, h *container.HostConfig, n *network.NetworkingConfig, pl *ocispec.Platform, name string) (container.CreateResponse, error) {
	return container.CreateResponse{}, fmt.Errorf("bad request: env %v cmd %v via https://proxy:proxy-pw-789@proxy.local/: %w",
		cfg.Env, cfg.Cmd, errors.ErrUnsupported)
}

const urlSecrets = `
name: urls
services:
  app:
    image: app:1
    command: ["/app", "--upstream=https://bob:cmd-pw-456@upstream.local/api"]
    environment:
      DATABASE_URL: postgres://app:pg-pw-123@db.local:5432/app
      PLAIN: visible-value
`

// transcript walks the project of yaml on each engine, a dry run then
// applies times, and returns everything the walks showed: events, errors,
// item results and summaries.
func transcript(t *testing.T, yaml string, applies int, engines ...docker.Engine) string {
	t.Helper()
	var (
		mu  sync.Mutex
		out strings.Builder
	)
	obs := converge.ObserverFunc(func(e converge.Event) {
		mu.Lock()
		fmt.Fprintf(&out, "%+v\n", e)
		mu.Unlock()
	})
	w, err := converge.NewWalker(converge.WalkerConfig{Observer: obs})
	require.NoError(t, err)
	walks := []func(context.Context, *converge.Graph) (*converge.Report, error){w.ApplyDry}
	for range applies {
		walks = append(walks, w.Apply)
	}
	for _, eng := range engines {
		g, err := load(t, yaml).Graph(eng)
		require.NoError(t, err)
		for _, walk := range walks {
			rep, err := walk(context.Background(), g)
			mu.Lock()
			if err != nil {
				fmt.Fprintf(&out, "%v\n%+v\n", err, err)
			}
			for _, it := range rep.Items {
				fmt.Fprintf(&out, "%+v %#v\n", it, it)
			}
			fmt.Fprintln(&out, rep.Summary())
			mu.Unlock()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return out.String()
}

// TestURLCredentialsRedacted: passwords in URL-shaped values are redacted
// like values of secret keys, in events, reports, errors and item states.
func TestURLCredentialsRedacted(t *testing.T) {
	s := transcript(t, urlSecrets, 1, newFake(), echoEngine{newFake()})
	assert.Contains(t, s, "visible-value", "the echoing engine's error is kept")
	assert.Contains(t, s, "postgres://app:"+docker.Redacted+"@db.local", "the user and host stay readable")
	for _, pw := range []string{"pg-pw-123", "cmd-pw-456", "proxy-pw-789"} {
		assert.NotContains(t, s, pw)
	}
}

func sha6(v string) string {
	h := sha256.Sum256([]byte(v))
	return hex.EncodeToString(h[:6])
}

func specLabels(t *testing.T, key []byte) (hash string, fields map[string]string) {
	t.Helper()
	f := newFake()
	p := load(t, threeServices)
	p.HashKey = key
	apply(t, f, p)
	db, ok := f.Container("shop-db")
	require.True(t, ok)
	require.NoError(t, json.Unmarshal([]byte(db.Config.Labels[docker.LabelSpecFields]), &fields))
	return db.Config.Labels[docker.LabelSpecHash], fields
}

// TestSpecLabelsAreKeyed: the labels carry HMACs under the project's key,
// so a guessed secret cannot be tested against them without the key.
func TestSpecLabelsAreKeyed(t *testing.T) {
	hashA, fieldsA := specLabels(t, []byte("key-a"))
	hashB, fieldsB := specLabels(t, []byte("key-b"))
	require.Contains(t, fieldsA, "env.DB_PASSWORD")
	assert.NotEqual(t, sha6("hunter2-secret"), fieldsA["env.DB_PASSWORD"], "not the plain SHA-256 of the secret")
	assert.NotEqual(t, fieldsA["env.DB_PASSWORD"], fieldsB["env.DB_PASSWORD"], "the hash depends on the key")
	assert.NotEqual(t, hashA, hashB)
	for k, v := range fieldsA {
		assert.NotContains(t, []string{sha6("hunter2-secret"), sha6("primary"), sha6("app:1")}, v, k)
	}
	// A stable key gives stable labels: nothing is recreated on the next run.
	hashA2, _ := specLabels(t, []byte("key-a"))
	assert.Equal(t, hashA, hashA2)
}

// TestUnkeyedLabelsRecreatedOnce: a container labelled by an older version
// with unkeyed SHA-256 hashes is recreated once, then left alone.
func TestUnkeyedLabelsRecreatedOnce(t *testing.T) {
	f := newFake()
	p := load(t, threeServices)
	apply(t, f, p)
	// Relabel db as the old version did: sha256 prefixes, plain hash.
	f.Tamper("shop-db", func(c *dockertest.Container) {
		var fields map[string]string
		require.NoError(t, json.Unmarshal([]byte(c.Config.Labels[docker.LabelSpecFields]), &fields))
		fields["env.DB_PASSWORD"] = sha6("hunter2-secret")
		fields["env.MODE"] = sha6("primary")
		fields["image"] = sha6("app:1")
		b, _ := json.Marshal(fields)
		h := sha256.New()
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			fmt.Fprintf(h, "%s=%s\n", k, fields[k])
		}
		c.Config.Labels[docker.LabelSpecFields] = string(b)
		c.Config.Labels[docker.LabelSpecHash] = hex.EncodeToString(h.Sum(nil))
	})
	old, _ := f.Container("shop-db")
	plans := docker.Plans(dry(t, f, p))
	require.Contains(t, plans, docker.Plan{Container: "shop-db", Action: docker.ActionRecreate, Fields: []string{"spec"}})
	apply(t, f, p)
	db, _ := f.Container("shop-db")
	assert.NotEqual(t, old.ID, db.ID, "recreated")
	assert.NotContains(t, db.Config.Labels[docker.LabelSpecFields], sha6("hunter2-secret"))
	for _, pl := range docker.Plans(dry(t, f, p)) {
		assert.Equal(t, docker.ActionNone, pl.Action, pl.String())
	}
}
