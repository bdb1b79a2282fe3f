package autopilot_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planStripComments drops the comment lines of a YAML file.
func planStripComments(b []byte) string {
	var out []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// TestPlanCodecRoundTrip decodes every document in testdata/plan and checks
// that YAML and JSON encodings give it back unchanged.
func TestPlanCodecRoundTrip(t *testing.T) {
	files, err := filepath.Glob("testdata/plan/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in := planLoad(t, f)
			doc, err := autopilot.Decode(in)
			require.NoError(t, err)

			y, err := yaml.Marshal(doc)
			require.NoError(t, err)
			if doc.Status != nil {
				// Documents with a status are written by us or by k0s,
				// keys sorted: they come back byte for byte.
				assert.Equal(t, planStripComments(in), string(y))
			}
			back, err := autopilot.Decode(y)
			require.NoError(t, err)
			assert.Equal(t, doc, back)

			j, err := json.Marshal(doc)
			require.NoError(t, err)
			back, err = autopilot.Decode(j)
			require.NoError(t, err)
			assert.Equal(t, doc, back)
		})
	}
}

// TestPlanCodecK0sShape checks what the k0s-shaped document decodes to.
func TestPlanCodecK0sShape(t *testing.T) {
	doc := planDoc(t, "testdata/plan/k0s-shape.yaml")
	assert.Equal(t, "autopilot.k0sproject.io/v1beta2", doc.APIVersion)
	assert.Equal(t, "Plan", doc.Kind)
	assert.Equal(t, &plan.Metadata{Name: "autopilot", Annotations: map[string]string{"note": "example"}}, doc.Metadata)
	assert.Equal(t, "id123", doc.Spec.ID)
	assert.Equal(t, "now", doc.Spec.Timestamp)
	require.Len(t, doc.Spec.Commands, 2)

	air := doc.Spec.Commands[0]
	assert.Equal(t, "airgapupdate", air.Kind)
	assert.True(t, air.InlineTargets)
	assert.Equal(t, []plan.CommandTargets{{Group: "workers", Discovery: plan.CommandDiscovery{Static: []string{"worker0"}}}}, air.Targets)
	assert.JSONEq(t, `"v1.30.4+k0s.0"`, string(air.Spec["version"]))
	assert.JSONEq(t, `{"linux-amd64":{"url":"https://example.invalid/bundle-amd64"}}`, string(air.Spec["platforms"]))

	k0s := doc.Spec.Commands[1]
	assert.Equal(t, "k0supdate", k0s.Kind)
	assert.False(t, k0s.InlineTargets)
	assert.Equal(t, []plan.CommandTargets{
		{Group: "controllers", Discovery: plan.CommandDiscovery{Static: []string{"controller0"}}},
		{Group: "workers", Concurrent: 2, Discovery: plan.CommandDiscovery{Static: []string{"worker0"}}},
	}, k0s.Targets)

	st := doc.Status
	require.NotNil(t, st)
	assert.Equal(t, plan.StateSchedulableWait, st.State)
	require.Len(t, st.Commands, 2)
	at := time.Date(2026, 5, 11, 19, 13, 2, 0, time.UTC)
	assert.Equal(t, plan.CommandStatus{ID: 0, Kind: "airgapupdate", State: plan.StateSchedulableWait,
		Targets: map[string][]plan.TargetStatus{"workers": {{Name: "worker0", State: plan.TargetSent, LastUpdatedTimestamp: at}}}}, st.Commands[0])
	assert.Equal(t, plan.TargetPending, st.Commands[1].Target("controllers", "controller0").State)
	assert.Nil(t, st.Commands[1].Target("controllers", "worker0"))
}

// TestPlanCodecFields covers the fields beyond the k0s example: group order,
// selectors, timeouts, reasons and attempts.
func TestPlanCodecFields(t *testing.T) {
	in := `
spec:
  id: p
  commands:
  - update:
      timeout: 1h
      targetTimeout: 90s
      targets:
        workers:
          order: -1
          discovery: {selector: {labels: "role=edge", fields: "spec.unschedulable=false"}}
        controllers:
          order: 1
          discovery: {static: {nodes: [c0, c1]}}
status:
  state: Failed
  reason: boom
  commands:
  - id: 0
    state: Failed
    reason: boom
    startedTimestamp: "2026-01-02T03:04:05Z"
    update:
      controllers:
      - {name: c0, state: SignalApplyFailed, reason: disk full, attempt: 2, lastUpdatedTimestamp: "2026-01-02T03:04:06+02:00"}
`
	doc, err := autopilot.Decode([]byte(in))
	require.NoError(t, err)
	cmd := doc.Spec.Commands[0]
	assert.Equal(t, time.Hour, cmd.Timeout)
	assert.Equal(t, 90*time.Second, cmd.TargetTimeout)
	require.Len(t, cmd.Targets, 2)
	assert.Equal(t, "workers", cmd.Targets[0].Group, "order -1 runs first")
	assert.Equal(t, &plan.CommandSelector{Labels: "role=edge", Fields: "spec.unschedulable=false"}, cmd.Targets[0].Discovery.Selector)
	assert.Equal(t, "controllers", cmd.Targets[1].Group)
	cs := doc.Status.Commands[0]
	assert.Equal(t, "boom", doc.Status.Reason)
	assert.Equal(t, "boom", cs.Reason)
	assert.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), cs.Started)
	tg := cs.Target("controllers", "c0")
	assert.Equal(t, plan.TargetStatus{Name: "c0", State: plan.TargetApplyFailed, Reason: "disk full", Attempt: 2,
		LastUpdatedTimestamp: time.Date(2026, 1, 2, 1, 4, 6, 0, time.UTC)}, *tg, "read in UTC")
	assert.True(t, tg.LastUpdatedTimestamp.Equal(time.Date(2026, 1, 2, 1, 4, 6, 0, time.UTC)))

	j, err := json.Marshal(doc.Spec.Commands[0])
	require.NoError(t, err)
	assert.JSONEq(t, `{"update":{"timeout":"1h0m0s","targetTimeout":"1m30s","targets":{
		"workers":{"order":-1,"discovery":{"selector":{"labels":"role=edge","fields":"spec.unschedulable=false"}}},
		"controllers":{"order":1,"discovery":{"static":{"nodes":["c0","c1"]}}}}}}`, string(j))
}

// TestPlanDecodeErrors checks that decode errors name the command and the
// field at fault.
func TestPlanDecodeErrors(t *testing.T) {
	const head = "spec:\n  id: p\n  commands:\n  - update:\n      targets: {workers: {discovery: {static: {nodes: [w0]}}}}\n"
	tests := []struct {
		name    string
		in      string
		is      error
		command int
		field   string
	}{
		{name: "not YAML", in: "spec: [", is: plan.ErrDecode, command: -1},
		{name: "not an object", in: "42", is: plan.ErrDecode, command: -1},
		{name: "unknown top-level field", in: "spek: {}", is: plan.ErrDecode, command: -1, field: "spek"},
		{name: "id of the wrong type", in: "spec: {id: [1]}", is: plan.ErrDecode, command: -1, field: "spec.id"},
		{name: "no id", in: "spec: {commands: [{update: {}}]}", is: plan.ErrInvalid, command: -1, field: "spec.id"},
		{name: "two kinds in one command", in: head + "  - {a: {}, b: {}}\n", is: plan.ErrDecode, command: 1, field: "spec.commands[1]"},
		{name: "command body not an object", in: head + "  - update: 3\n", is: plan.ErrDecode, command: 1, field: "spec.commands[1].update"},
		{name: "concurrency of the wrong type", in: head + "  - k0supdate: {targets: {workers: {discovery: {static: {nodes: [w0]}}, limits: {concurrent: two}}}}\n",
			is: plan.ErrDecode, command: 1, field: "spec.commands[1].k0supdate.targets.workers.limits.concurrent"},
		{name: "unknown limit", in: head + "  - k0supdate: {targets: {workers: {discovery: {static: {nodes: [w0]}}, limits: {parallel: 2}}}}\n",
			is: plan.ErrDecode, command: 1, field: "spec.commands[1].k0supdate.targets.workers.limits.parallel"},
		{name: "empty discovery function", in: head + "  - k0supdate: {targets: {workers: {discovery: {function: ''}}}}\n",
			is: plan.ErrDecode, command: 1, field: "spec.commands[1].k0supdate.targets.workers.discovery.function"},
		{name: "inline group of the wrong type", in: head + "  - airgapupdate: {workers: [w0]}\n",
			is: plan.ErrDecode, command: 1, field: "spec.commands[1].airgapupdate.workers"},
		{name: "inline and nested groups", in: head + "  - airgapupdate: {workers: {discovery: {static: {nodes: [a]}}}, targets: {controllers: {discovery: {static: {nodes: [b]}}}}}\n",
			is: plan.ErrDecode, command: 1, field: "spec.commands[1].airgapupdate.workers"},
		{name: "bad timeout", in: head + "  - update: {timeout: soon}\n", is: plan.ErrDecode, command: 1, field: "spec.commands[1].update.timeout"},
		{name: "negative target timeout", in: head + "  - update: {targetTimeout: -1s}\n", is: plan.ErrDecode, command: 1, field: "spec.commands[1].update.targetTimeout"},
		{name: "status command of the wrong type", in: head + "status: {commands: [3]}\n", is: plan.ErrDecode, command: 0, field: "status.commands[0]"},
		{name: "status with two kinds", in: head + "status: {commands: [{id: 0, a: {}, b: {}}]}\n", is: plan.ErrDecode, command: 0, field: "status.commands[0].b"},
		{name: "status target without name", in: head + "status: {commands: [{id: 0, update: {workers: [{state: SignalSent}]}}]}\n",
			is: plan.ErrDecode, command: 0, field: "status.commands[0].update.workers[0].name"},
		{name: "status bad timestamp", in: head + "status: {commands: [{id: 0, update: {workers: [{name: w0, lastUpdatedTimestamp: yesterday}]}}]}\n",
			is: plan.ErrDecode, command: 0, field: "status.commands[0].update.workers[0].lastUpdatedTimestamp"},
		{name: "status unknown target field", in: head + "status: {commands: [{id: 0, update: {workers: [{name: w0, colour: red}]}}]}\n",
			is: plan.ErrDecode, command: 0, field: "status.commands[0].update.workers[0].colour"},
		{name: "status id of the wrong type", in: head + "status: {commands: [{id: zero}]}\n", is: plan.ErrDecode, command: 0, field: "status.commands[0].id"},
		// What k0s's Plan CRD refuses, by its schema: unknown fields and
		// values of the wrong type in the k0s commands.
		{name: "k0supdate: unknown field", in: head + "  - k0supdate: {verison: v1.30.4+k0s.0, targets: {workers: {discovery: {static: {nodes: [w0]}}}}}\n",
			is: plan.ErrInvalid, command: 1, field: "spec.commands[1].k0supdate.verison"},
		{name: "k0supdate: no version", in: head + "  - k0supdate: {targets: {workers: {discovery: {static: {nodes: [w0]}}}}}\n",
			is: plan.ErrInvalid, command: 1, field: "spec.commands[1].k0supdate.version"},
		{name: "k0supdate: version of the wrong type", in: head + "  - k0supdate: {version: 42, targets: {workers: {discovery: {static: {nodes: [w0]}}}}}\n",
			is: plan.ErrInvalid, command: 1, field: "spec.commands[1].k0supdate.version"},
		{name: "k0supdate: forceupdate of the wrong type", in: head + "  - k0supdate: {version: v0.0.0, forceupdate: yes please, targets: {workers: {discovery: {static: {nodes: [w0]}}}}}\n",
			is: plan.ErrInvalid, command: 1, field: "spec.commands[1].k0supdate.forceupdate"},
		{name: "k0supdate: platform without url", in: head + "  - k0supdate: {version: v0.0.0, platforms: {linux-amd64: {sha256: abc}}}\n",
			is: plan.ErrInvalid, command: 1, field: "spec.commands[1].k0supdate.platforms.linux-amd64.url"},
		{name: "k0supdate: unknown field of a platform", in: head + "  - k0supdate: {version: v0.0.0, platforms: {linux-amd64: {url: u, md5: abc}}}\n",
			is: plan.ErrInvalid, command: 1, field: "spec.commands[1].k0supdate.platforms.linux-amd64.md5"},
		{name: "airgapupdate: forceupdate is k0supdate's", in: head + "  - airgapupdate: {version: v0.0.0, forceupdate: true, workers: {discovery: {static: {nodes: [w0]}}}}\n",
			is: plan.ErrInvalid, command: 1, field: "spec.commands[1].airgapupdate.forceupdate"},
		{name: "invalid UTF-8 in JSON", in: "{\"spec\":{\"id\":\"id\xff\",\"commands\":[]}}", is: plan.ErrDecode, command: -1, field: "spec.id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := autopilot.Decode([]byte(tc.in))
			require.Error(t, err)
			assert.Nil(t, doc)
			require.ErrorIs(t, err, tc.is)
			var de *plan.DecodeError
			var se *plan.FieldError
			switch {
			case errors.As(err, &de):
				assert.Equal(t, tc.command, de.Command, "command of %v", err)
				assert.Equal(t, tc.field, de.Field, "field of %v", err)
			case errors.As(err, &se):
				assert.Equal(t, tc.command, se.Command, "command of %v", err)
				assert.Equal(t, tc.field, se.Field, "field of %v", err)
			default:
				t.Fatalf("untyped error %v", err)
			}
			if tc.field != "" {
				assert.Contains(t, err.Error(), tc.field)
			}
		})
	}
}

// TestPlanValidate covers the spec checks of plans built in Go.
func TestPlanValidate(t *testing.T) {
	fn := func(context.Context) ([]string, error) { return nil, nil }
	tests := []struct {
		name  string
		cmd   plan.Command
		field string
	}{
		{name: "empty kind", cmd: plan.Command{}, field: "spec.commands[1]"},
		{name: "negative timeout", cmd: plan.Command{Kind: "u", Timeout: -1}, field: "spec.commands[1].u.timeout"},
		{name: "negative target timeout", cmd: plan.Command{Kind: "u", TargetTimeout: -1}, field: "spec.commands[1].u.targetTimeout"},
		{name: "reserved spec key", cmd: plan.Command{Kind: "u", Spec: map[string]json.RawMessage{"targets": []byte("{}")}}, field: "spec.commands[1].u.targets"},
		{name: "group without name", cmd: plan.Command{Kind: "u", Targets: []plan.CommandTargets{{Discovery: plan.CommandDiscovery{Func: fn}}}}, field: "spec.commands[1].u.targets"},
		{name: "group twice", cmd: plan.Command{Kind: "u", Targets: []plan.CommandTargets{planGroup("w", 1, "a"), planGroup("w", 1, "b")}}, field: "spec.commands[1].u.targets.w"},
		{name: "two discoveries", cmd: plan.Command{Kind: "u", Targets: []plan.CommandTargets{{Group: "w", Discovery: plan.CommandDiscovery{Static: []string{"a"}, Func: fn}}}}, field: "spec.commands[1].u.targets.w.discovery"},
		{name: "inline group of another name", cmd: plan.Command{Kind: "u", InlineTargets: true, Targets: []plan.CommandTargets{planGroup("edge", 1, "a")}}, field: "spec.commands[1].u.edge"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := plan.Plan{ID: "p", Commands: []plan.Command{planCmd("ok", planGroup("w", 1, "a")), tc.cmd}}.Validate()
			var se *plan.FieldError
			require.ErrorAs(t, err, &se)
			require.ErrorIs(t, err, plan.ErrInvalid)
			assert.Equal(t, 1, se.Command)
			assert.Equal(t, tc.field, se.Field)
		})
	}
	ok := plan.Plan{ID: "p", Commands: []plan.Command{{Kind: "u", Targets: []plan.CommandTargets{{Group: "w", Discovery: plan.CommandDiscovery{Func: fn}}}}}}
	require.NoError(t, ok.Validate())
}

// FuzzPlanDecode checks that decoding never panics and that whatever decodes
// encodes to JSON and YAML that decode to the same document.
func FuzzPlanDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/plan/*.yaml")
	k0s, _ := filepath.Glob("testdata/k0s/*.yaml")
	for _, file := range append(files, k0s...) {
		if file == k0sCRDFile {
			continue // the CRD, not a plan
		}
		b, err := os.ReadFile(file)
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"spec":{"id":"p","commands":[{"u":{"workers":{"discovery":{"static":{"nodes":["a"]}}}}}]},"status":{"commands":[{"id":0,"u":{}}]}}`))
	f.Add([]byte("spec: {id: p, commands: [{u: {x: 1e3, targets: {g: {order: 2, discovery: {selector: {}}}}}}]}"))
	f.Add([]byte("spec: {id: p, commands: [{u: {timeout: 1m, targets: {g: {discovery: {function: edge}, limits: {concurrent: 3}}}}}]}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		doc, err := autopilot.Decode(in)
		if err != nil {
			var de *plan.DecodeError
			var se *plan.FieldError
			if !errors.As(err, &de) && !errors.As(err, &se) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		j, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("encode JSON: %v", err)
		}
		back, err := autopilot.Decode(j)
		if err != nil {
			t.Fatalf("decode own JSON %s: %v", j, err)
		}
		j2, err := json.Marshal(back)
		if err != nil {
			t.Fatalf("encode JSON again: %v", err)
		}
		if string(j) != string(j2) {
			t.Fatalf("JSON round trip differs:\n%s\n%s", j, j2)
		}
		y, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatalf("encode YAML: %v", err)
		}
		back, err = autopilot.Decode(y)
		if err != nil {
			t.Fatalf("decode own YAML %s: %v", y, err)
		}
		j3, err := json.Marshal(back)
		if err != nil {
			t.Fatalf("encode JSON from YAML: %v", err)
		}
		if string(j) != string(j3) {
			t.Fatalf("YAML round trip differs:\n%s\n%s", j, j3)
		}
	})
}

// TestEncodeRoundTrip checks that Encode writes YAML that Decode reads back
// to the same document.
func TestEncodeRoundTrip(t *testing.T) {
	for _, path := range []string{"testdata/plan/autopilot-plan.yaml", "testdata/plan/autopilot-status.yaml", "testdata/plan/k0s-shape.yaml"} {
		t.Run(path, func(t *testing.T) {
			doc := planDoc(t, path)
			out, err := autopilot.Encode(doc)
			require.NoError(t, err)
			back, err := autopilot.Decode(out)
			require.NoError(t, err)
			assert.Equal(t, doc, back)
		})
	}
}

// TestDecodeRejectsDuplicateKeys checks that a key repeated anywhere in a
// plan document is an error naming the key (encoding/json alone would keep
// the last one).
func TestDecodeRejectsDuplicateKeys(t *testing.T) {
	const cmd = `{"k0supdate":{"version":"v1","targets":{"workers":{"discovery":{"static":{"nodes":["w0"]}}}}}}`
	tests := []struct {
		name, in, field string
		command         int
	}{
		{"top", `{"spec":{"id":"p1","commands":[` + cmd + `]},"spec":{}}`, "spec", -1},
		{"spec", `{"spec":{"id":"p1","id":"p2","commands":[` + cmd + `]}}`, "spec.id", -1},
		{"command body", `{"spec":{"id":"p1","commands":[{"k0supdate":{"version":"v1","version":"v2"}}]}}`, "spec.commands[0].k0supdate.version", 0},
		{"status command", `{"spec":{"id":"p1","commands":[` + cmd + `]},"status":{"state":"NewPlan","commands":[{"id":0,"state":"NewPlan","state":"Completed"}]}}`, "status.commands[0].state", 0},
		{"target status", `{"spec":{"id":"p1","commands":[` + cmd + `]},"status":{"state":"NewPlan","commands":[{"id":0,"state":"NewPlan","k0supdate":{"workers":[{"name":"w0","name":"w1"}]}}]}}`, "status.commands[0].k0supdate.workers[0].name", 0},
		// A repeated key in YAML is the same *plan.DecodeError as in JSON:
		// the key's path and its command.
		{"yaml top", "spec: {id: p1, commands: [" + cmd + "]}\nspec: {}\n", "spec", -1},
		{"yaml spec", "spec:\n  id: p1\n  id: p2\n  commands: [" + cmd + "]\n", "spec.id", -1},
		{"yaml command body", "spec:\n  id: p1\n  commands:\n  - " + cmd + "\n  - k0supdate:\n      version: v1\n      version: v2\n", "spec.commands[1].k0supdate.version", 1},
		{"yaml target status", "spec: {id: p1, commands: [" + cmd + "]}\nstatus:\n  commands:\n  - id: 0\n    k0supdate:\n      workers:\n      - {name: w0, name: w1}\n", "status.commands[0].k0supdate.workers[0].name", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := autopilot.Decode([]byte(tt.in))
			require.ErrorIs(t, err, plan.ErrDecode)
			var de *plan.DecodeError
			require.ErrorAs(t, err, &de)
			assert.Equal(t, tt.field, de.Field)
			assert.Equal(t, tt.command, de.Command)
			assert.Contains(t, err.Error(), tt.field)
			assert.Contains(t, err.Error(), "duplicate key")
		})
	}
	t.Run("yaml", func(t *testing.T) {
		// The strict YAML reader refuses a repeated mapping key itself, naming it.
		_, err := autopilot.Decode([]byte("spec:\n  id: p1\n  id: p2\n  commands: [{update: {version: v1}}]\n"))
		require.ErrorIs(t, err, plan.ErrDecode)
		assert.Contains(t, err.Error(), `"id"`)
	})
}
