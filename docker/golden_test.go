package docker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

const goldenV010 = "testdata/v0.1.0"

// goldenImage is the image of the golden project (compose.yaml).
const goldenImage = "converge-test/app:golden"

// readGolden returns the target v0.1.0 stored, the key it stored in it,
// and the project the current loader makes of the same Compose file.
func readGolden(t *testing.T) (stored, key []byte, want *docker.Project) {
	t.Helper()
	stored, err := os.ReadFile(filepath.Join(goldenV010, "target.json"))
	require.NoError(t, err)
	var raw struct{ HashKey []byte }
	require.NoError(t, json.Unmarshal(stored, &raw))
	require.NotEmpty(t, raw.HashKey, "v0.1.0 stored the key in clear")
	compose, err := os.ReadFile(filepath.Join(goldenV010, "compose.yaml"))
	require.NoError(t, err)
	want, err = docker.LoadCompose(t.Context(), compose, docker.LoadOptions{})
	require.NoError(t, err)
	for i := range want.Containers { // v0.1.0 stored no compose hash
		want.Containers[i].ComposeHash = ""
	}
	return stored, raw.HashKey, want
}

// goldenLabels applies p on a fake engine through TargetBuild with rt and
// returns the spec hash labels of its containers by name.
func goldenLabels(t *testing.T, p docker.Project, rt docker.Runtime) map[string]map[string]string {
	t.Helper()
	eng := dockertest.New()
	eng.AddImage(goldenImage)
	stages, err := docker.TargetBuild(eng, rt)(t.Context(), p)
	require.NoError(t, err)
	require.Len(t, stages, 1)
	w, err := converge.NewWalker(converge.WalkerConfig{})
	require.NoError(t, err)
	_, err = w.Apply(t.Context(), stages[0].Graph)
	require.NoError(t, err)
	out := map[string]map[string]string{}
	for _, c := range eng.Containers() {
		out[c.Name] = map[string]string{
			docker.LabelSpecHash:   c.Config.Labels[docker.LabelSpecHash],
			docker.LabelSpecFields: c.Config.Labels[docker.LabelSpecFields],
		}
	}
	return out
}

// TestGoldenV010Target: the target a device agent stored with v0.1.0
// decodes (through encoding/json, as the TargetReconciler reads it) to the
// project the current loader makes of its Compose file, without the hash
// key v0.1.0 stored in clear; it is written back in the current form; and
// with the same key given at run time the containers get the labels
// v0.1.0 gave them, so an upgraded agent recreates nothing.
func TestGoldenV010Target(t *testing.T) {
	stored, key, want := readGolden(t)

	var got docker.Project
	require.NoError(t, json.Unmarshal(stored, &got))
	assert.Equal(t, *want, got)
	assert.Empty(t, got.HashKey, "the key stored in clear is not read back")
	for _, c := range got.Containers {
		assert.Nil(t, c.Replicas, "%s: a form without scale runs one container", c.Service)
	}

	again, err := json.Marshal(got)
	require.NoError(t, err)
	wantForm, err := json.Marshal(want)
	require.NoError(t, err)
	assert.JSONEq(t, string(wantForm), string(again), "re-encoded in the current form")
	var doc map[string]any
	require.NoError(t, json.Unmarshal(again, &doc))
	assert.EqualValues(t, docker.ProjectFormat, doc["format"])
	assert.NotContains(t, string(again), "Containers", "no Go field names")
	var back docker.Project
	require.NoError(t, json.Unmarshal(again, &back))
	assert.Equal(t, got, back, "the current form decodes to the same project")

	b, err := os.ReadFile(filepath.Join(goldenV010, "labels.json"))
	require.NoError(t, err)
	var v010 map[string]map[string]string
	require.NoError(t, json.Unmarshal(b, &v010))
	require.Len(t, v010, len(want.Containers))
	assert.Equal(t, v010, goldenLabels(t, got, docker.Runtime{HashKey: key}),
		"the labels v0.1.0 computed with the same key")
	assert.NotEqual(t, v010, goldenLabels(t, got, docker.Runtime{}), "the key is what the labels depend on")
}

// TestProjectJSONForm: the stored form names fields in Compose's words,
// enums by name and durations as text, leaves zero values and runtime
// fields out, and decodes back to the same project.
func TestProjectJSONForm(t *testing.T) {
	_, _, golden := readGolden(t)
	full := load(t, threeServices)
	full.Containers[0].Run = docker.Once
	full.Containers[0].Update = docker.KillThenDownload
	full.Containers[0].Pull = docker.PullAlways
	stop := 5 * time.Second
	full.Containers[0].StopTimeout = &stop
	full.Containers[1].Run = docker.Stopped
	full.Containers[1].Pull = docker.PullNever
	three, zero := 3, 0
	full.Containers[1].Replicas = &three
	full.Containers[1].Ports = nil // a fixed host port is one replica's only
	full.Containers[2].Replicas = &zero
	full.PollInterval = 3 * time.Second
	full.RemoveVolumes = true
	full.HashKey = []byte("runtime-only-key-0123456789abcdef")
	full.Logger = slog.New(slog.DiscardHandler)
	full.Metrics = &convergetest.Metrics{}
	tests := []struct {
		name      string
		p         *docker.Project
		contains  []string
		lacks     []string
		roundTrip func(*docker.Project) docker.Project
	}{
		{name: "golden", p: golden,
			contains: []string{`"format":2`, `"services":[`, `"environment":{`, `"depends_on":[`, `"condition":"service_healthy"`, `"timeout":"1m0s"`,
				`"interval":"1s"`, `"stop_grace_period":"15s"`, `"pull_policy":"never"`, `"restart":"on-failure:3"`, `"published":"18080"`},
			lacks: []string{`"run"`, `"update_strategy"`, `"privileged"`, `"cpus"`, `:null`, `"HashKey"`, `"scale"`}},
		{name: "every enum and runtime fields", p: full,
			contains: []string{`"run":"once"`, `"run":"stopped"`, `"update_strategy":"kill-then-download"`, `"pull_policy":"always"`,
				`"pull_policy":"never"`, `"stop_grace_period":"5s"`, `"poll_interval":"3s"`, `"remove_volumes":true`, `"scale":3`, `"scale":0`},
			lacks: []string{"runtime-only-key", "HashKey", "hash_key", "Logger", "Metrics"},
			roundTrip: func(p *docker.Project) docker.Project {
				cp := *p
				cp.HashKey, cp.Logger, cp.Metrics = nil, nil, nil
				return cp
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.p)
			require.NoError(t, err)
			for _, s := range tt.contains {
				assert.Contains(t, string(b), s)
			}
			for _, s := range tt.lacks {
				assert.NotContains(t, string(b), s)
			}
			var got docker.Project
			require.NoError(t, json.Unmarshal(b, &got))
			want := *tt.p
			if tt.roundTrip != nil {
				want = tt.roundTrip(tt.p)
			}
			assert.Equal(t, want, got)
		})
	}
}

// TestProjectJSONRefusesBadInput: a stored project that is not one is
// refused with a *DecodeError naming the culprit, and the project is left
// as it was.
func TestProjectJSONRefusesBadInput(t *testing.T) {
	stored, _, _ := readGolden(t)
	tests := []struct {
		name   string
		doc    string
		path   string
		format int
		is     error
		// anyPath: the path depends on where the document is cut.
		anyPath bool
	}{
		{name: "unknown field", doc: `{"format":2,"name":"a","services":[{"service":"web","image":"x","cap_ad":["X"]}]}`, path: "services[0].cap_ad", format: 2},
		{name: "unknown enum name", doc: `{"format":2,"name":"a","services":[{"service":"web","image":"x","run":"walking"}]}`,
			path: "services[0].run", format: 2, is: docker.ErrInvalidSpec},
		{name: "enum as a number", doc: `{"format":2,"name":"a","services":[{"service":"web","image":"x","pull_policy":1}]}`,
			path: "services[0].pull_policy", format: 2},
		{name: "duration in nanoseconds", doc: `{"format":2,"name":"a","poll_interval":5000}`, path: "poll_interval", format: 2},
		{name: "repeated field", doc: `{"format":2,"name":"a","name":"b"}`, path: "name", format: 2},
		{name: "trailing data", doc: `{"format":2,"name":"a"} {}`, format: 2},
		{name: "unknown format", doc: `{"format":3,"name":"a"}`, path: "format", format: 3, is: docker.ErrUnknownFormat},
		{name: "format not a number", doc: `{"format":"2","name":"a"}`, path: "format", is: docker.ErrUnknownFormat},
		{name: "hash key is never read", doc: `{"format":2,"name":"a","HashKey":"c2VjcmV0"}`, path: "HashKey", format: 2},
		{name: "v0.1.0 unknown field", doc: `{"Name":"a","Containers":[{"Service":"web","Image":"x","Colour":"red"}]}`, path: "Containers[0].Colour"},
		{name: "v0.1.0 enum out of range", doc: `{"Name":"a","Containers":[{"Service":"web","Image":"x","Run":9}]}`,
			path: "Containers[0].Run", is: docker.ErrInvalidSpec},
		{name: "v0.1.0 fractional duration", doc: `{"Name":"a","PollInterval":1.5}`, path: "PollInterval"},
		{name: "v0.1.0 cut short", doc: string(stored[:len(stored)/2]), anyPath: true},
		{name: "not an object", doc: `[]`},
		{name: "invalid UTF-8", doc: "{\"format\":2,\"name\":\"a\xff\"}", path: "name", format: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := *load(t, threeServices)
			before := p
			err := p.UnmarshalJSON([]byte(tt.doc))
			var de *docker.DecodeError
			require.ErrorAs(t, err, &de)
			t.Log(err)
			if !tt.anyPath {
				assert.Equal(t, tt.path, de.Path)
			}
			assert.Equal(t, tt.format, de.Format)
			if tt.is != nil {
				assert.ErrorIs(t, err, tt.is)
			}
			assert.Equal(t, before, p, "nothing decoded")
		})
	}
}

// TestProjectJSONRefusesUnknownEnumValues: an enum value out of range is
// not stored.
func TestProjectJSONRefusesUnknownEnumValues(t *testing.T) {
	for _, set := range []func(*docker.ContainerSpec){
		func(s *docker.ContainerSpec) { s.Run = 7 },
		func(s *docker.ContainerSpec) { s.Update = 7 },
		func(s *docker.ContainerSpec) { s.Pull = 7 },
		func(s *docker.ContainerSpec) { s.DependsOn = []docker.Dependency{{Service: "db", Condition: 7}} },
	} {
		p := load(t, threeServices)
		set(&p.Containers[1])
		_, err := p.MarshalJSON()
		require.ErrorIs(t, err, docker.ErrInvalidSpec)
		_, err = json.Marshal(p)
		require.ErrorIs(t, err, docker.ErrInvalidSpec, "through encoding/json too")
	}
}

// TestTargetBuildGivesRuntimeOnce: the runtime dependencies given to
// TargetBuild reach a project resumed from the store, which carries none:
// its engine calls are counted, its changes logged, its labels keyed.
func TestTargetBuildGivesRuntimeOnce(t *testing.T) {
	ctx := context.Background()
	key := []byte("a-key-given-at-run-time-only-0123")
	p := load(t, threeServices)
	p.HashKey = key
	keyed := newFake()
	apply(t, keyed, p) // the labels the key gives

	store := converge.NewMemStore()
	first, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[docker.Project]{Build: docker.TargetBuild(newFake()), Store: store})
	require.NoError(t, err)
	require.NoError(t, first.SetTarget(ctx, *p))
	b, _, err := store.Target(ctx, converge.TargetDefaultName)
	require.NoError(t, err)
	assert.NotContains(t, string(b), string(key))

	eng := newFake()
	var m convergetest.Metrics
	var log bytes.Buffer
	build := docker.TargetBuild(eng, docker.Runtime{Metrics: &m, Logger: slog.New(slog.NewTextHandler(&log, nil)), HashKey: key})
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[docker.Project]{Build: build, Store: store})
	require.NoError(t, err)
	found, err := r.Load(ctx)
	require.NoError(t, err)
	require.True(t, found)
	resumed, _ := r.Target()
	require.Empty(t, resumed.HashKey, "the stored target has no key")
	stages, err := build(ctx, resumed)
	require.NoError(t, err)
	w, err := converge.NewWalker(converge.WalkerConfig{})
	require.NoError(t, err)
	_, err = w.Apply(ctx, stages[0].Graph)
	require.NoError(t, err)

	for _, c := range keyed.Containers() {
		got, ok := eng.Container(c.Name)
		require.True(t, ok, c.Name)
		assert.Equal(t, c.Config.Labels[docker.LabelSpecHash], got.Config.Labels[docker.LabelSpecHash], "%s hashed with the runtime key", c.Name)
	}
	assert.Positive(t, m.Value(docker.MetricEngineCalls.Name, "ContainerCreate"), "engine calls counted")
	assert.Contains(t, log.String(), "action=create")
}

// FuzzProjectUnmarshal: any input either decodes to a project whose
// stored form is stable (decoded and written again, it is the same), or is
// refused with a *DecodeError; never a panic.
func FuzzProjectUnmarshal(f *testing.F) {
	stored, err := os.ReadFile(filepath.Join(goldenV010, "target.json"))
	require.NoError(f, err)
	f.Add(stored)
	current, err := json.Marshal(load(f, threeServices))
	require.NoError(f, err)
	f.Add(current)
	f.Add([]byte(`{"format":2,"name":"a","services":[{"service":"w","image":"x","run":"once","stop_grace_period":"1s"}]}`))
	f.Add([]byte(`{"Name":"a","Containers":[{"Service":"w","Image":"x","Run":2,"StopTimeout":1000}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p docker.Project
		err := p.UnmarshalJSON(b)
		if err != nil {
			var de *docker.DecodeError
			require.ErrorAs(t, err, &de)
			return
		}
		again, err := p.MarshalJSON()
		require.NoError(t, err)
		var back docker.Project
		require.NoError(t, back.UnmarshalJSON(again))
		third, err := back.MarshalJSON()
		require.NoError(t, err)
		assert.Equal(t, string(again), string(third))
	})
}
