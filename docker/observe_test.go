package docker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/system"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/docker"
)

// opCounts records the engine metrics, checking every call against the
// metric's declaration (convergetest.Metrics panics on misuse).
type opCounts struct{ convergetest.Metrics }

func newOpCounts() *opCounts { return &opCounts{} }

// byOperation returns the counts of metric m by operation.
func (r *opCounts) byOperation(m *converge.Metric) map[string]int {
	out := map[string]int{}
	for _, s := range r.Series() {
		if s.Metric == m {
			out[s.Labels[0]] = int(s.Value)
		}
	}
	return out
}

// calls returns the engine calls by operation.
func (r *opCounts) calls() map[string]int { return r.byOperation(docker.MetricEngineCalls) }

// errors returns the failed engine calls by operation.
func (r *opCounts) errors() map[string]int { return r.byOperation(docker.MetricEngineErrors) }

// total returns the number of engine calls.
func (r *opCounts) total() int {
	n := 0
	for _, c := range r.calls() {
		n += c
	}
	return n
}

func TestEngineMetricsNamedLikePrometheus(t *testing.T) {
	for _, m := range docker.AllMetrics() {
		assert.True(t, strings.HasPrefix(m.Name, "converge_docker_engine_"), m.Name)
		assert.True(t, strings.HasSuffix(m.Name, "_total"), m.Name)
		assert.Equal(t, converge.MetricCounter, m.Kind)
		assert.Equal(t, []string{"operation"}, m.Labels)
	}
}

func TestProjectMetricsCountEveryEngineCallByOperation(t *testing.T) {
	totals := map[int]int{}
	for _, n := range []int{1, 5, 20} {
		f := newFake()
		m := newOpCounts()
		p := load(t, nServices(n))
		p.Metrics = m
		apply(t, f, p)
		assert.Equal(t, f.Calls(), m.calls(), "every call counted under its endpoint")
		f.ResetCalls()
		m.Reset()
		require.True(t, apply(t, f, p).Converged())
		assert.Equal(t, f.TotalCalls(), m.total())
		totals[n] = m.total()
		assert.Empty(t, m.errors())
	}
	assert.Equal(t, totals[1], totals[20], "a converged project costs a constant number of calls: %v", totals)
}

func TestProjectMetricsCountFailedCalls(t *testing.T) {
	m := newOpCounts()
	p := load(t, urlSecrets)
	p.Metrics = m
	g, err := p.Graph(echoEngine{newFake()})
	require.NoError(t, err)
	_, err = converge.Apply(context.Background(), g)
	require.Error(t, err)
	assert.Equal(t, 1, m.errors()["ContainerCreate"])
	assert.Equal(t, 1, m.calls()["ContainerCreate"])
	assert.Zero(t, m.errors()["ContainerList"])
}

func TestInstrumentCountsAndKeepsTheEngineClock(t *testing.T) {
	f := newFake()
	assert.Same(t, f, docker.Instrument(f, nil), "nil metrics: the engine itself")
	m := newOpCounts()
	eng := docker.Instrument(clockEngine{f}, m)
	_, ok := eng.(interface {
		Info(context.Context) (system.Info, error)
	})
	assert.True(t, ok, "WatchEvents still asks the engine for its time")
	p := load(t, threeServices)
	apply(t, eng, p)
	want := maps.Clone(f.Calls())
	assert.Equal(t, want, m.calls())
}

// clockEngine is the fake with the engine's Info, as a *client.Client has.
type clockEngine struct{ docker.Engine }

func (clockEngine) Info(context.Context) (system.Info, error) { return system.Info{}, nil }

func TestProjectLoggerLogsActionsAndNoSecret(t *testing.T) {
	const yaml = urlSecrets + `      DB_PASSWORD: hunter2-secret
`
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	for _, eng := range []docker.Engine{newFake(), echoEngine{newFake()}} {
		p := load(t, yaml)
		p.Logger = logger
		g, err := p.Graph(eng)
		require.NoError(t, err)
		_, _ = converge.Apply(context.Background(), g)
		// Change the command: the container is recreated (create, stop,
		// remove, rename, start) and the old one's name is logged.
		p.Containers[0].Command = append(p.Containers[0].Command, "--again")
		g, err = p.Graph(eng)
		require.NoError(t, err)
		_, _ = converge.Apply(context.Background(), g)
	}
	type record struct {
		Level, Msg, Project, Action, Service, Container, Image, Error string
	}
	var got []record
	for line := range strings.Lines(buf.String()) {
		var r record
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		got = append(got, r)
	}
	assert.Contains(t, got, record{Level: "INFO", Msg: "docker: create", Project: "urls", Action: "create", Service: "app", Container: "urls-app", Image: "app:1"})
	assert.Contains(t, got, record{Level: "INFO", Msg: "docker: start", Project: "urls", Action: "start", Service: "app", Container: "urls-app"})
	assert.Contains(t, got, record{Level: "INFO", Msg: "docker: remove", Project: "urls", Action: "remove", Service: "app", Container: "urls-app"})
	var failed bool
	for _, r := range got {
		if r.Level == "WARN" && r.Action == "create" {
			failed = true
			assert.Contains(t, r.Error, "visible-value", "the engine's message is kept")
		}
	}
	assert.True(t, failed, "the failed create is logged")
	for _, secret := range []string{"pg-pw-123", "cmd-pw-456", "proxy-pw-789", "hunter2-secret"} {
		assert.NotContains(t, buf.String(), secret)
	}
}

func TestProjectJSONLeavesMetricsAndLoggerOut(t *testing.T) {
	p := load(t, threeServices)
	p.Metrics = newOpCounts()
	p.Logger = slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil))
	b, err := json.Marshal(p)
	require.NoError(t, err)
	assert.NotContains(t, string(b), `"Metrics"`)
	assert.NotContains(t, string(b), `"Logger"`)
	var back docker.Project
	require.NoError(t, json.Unmarshal(b, &back), "a stored target decodes")
	assert.Nil(t, back.Metrics)
	assert.Nil(t, back.Logger)
	apply(t, newFake(), &back) // and converges without them
}
