package autopilot_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
)

// decodeBoth decodes in on the slow path (with validation, as Decode did
// before the fast path) and checks that Decode gives the slow path's
// document or error, and, when the fast path takes in, that the fast path
// gives the same document and the same error. It reports whether the fast
// path took it.
func decodeBoth(t *testing.T, in []byte) bool {
	t.Helper()
	slow, serr := autopilot.DecodeSlow(in)
	if serr == nil {
		serr = autopilot.Validate(slow)
	}
	if doc, err := autopilot.Decode(in); serr != nil {
		require.Equal(t, serr, err, "Decode of %q", in)
	} else {
		require.NoError(t, err, "Decode of %q", in)
		require.Equal(t, slow, doc, "Decode of %q", in)
	}
	fast, ok := autopilot.DecodeFast(in)
	if !ok {
		return false
	}
	if serr != nil {
		var fe *converge.PlanFieldError
		require.ErrorAs(t, serr, &fe, "the fast path took %q, which the slow path refuses: %v", in, serr)
		require.Equal(t, serr, autopilot.Validate(fast), "validation of %q", in)
		return true
	}
	require.NoError(t, autopilot.Validate(fast))
	require.Equal(t, slow, fast, "document of %q", in)
	return true
}

// bigPlanYAML is a plan of n workers with its status, as autopilot.Encode
// writes it.
func bigPlanYAML(t testing.TB, n int) []byte {
	doc := planBig(n, 50)
	doc.Spec.Commands[0].Kind = "k0supdate"
	doc.Spec.Commands[0].Spec = map[string]json.RawMessage{
		"version":   json.RawMessage(`"v1.31.2+k0s.0"`),
		"platforms": json.RawMessage(`{"linux-amd64":{"url":"https://example.invalid/k0s?a=1&b=2"}}`),
	}
	doc.Spec.Commands[0].Timeout = 90 * time.Second
	st := &converge.PlanStatus{State: converge.PlanSchedulableWait}
	cs := converge.CommandStatus{ID: 0, Kind: "k0supdate", State: converge.PlanSchedulableWait, Started: time.Date(2026, 5, 11, 19, 14, 2, 500, time.UTC), Targets: map[string][]converge.PlanTargetStatus{}}
	for _, g := range doc.Spec.Commands[0].Targets {
		for i, name := range g.Discovery.Static {
			cs.Targets[g.Group] = append(cs.Targets[g.Group], converge.PlanTargetStatus{
				Name: name, State: converge.HostSent, Attempt: i % 3, Reason: "r<&>",
				LastUpdatedTimestamp: time.Date(2026, 5, 11, 19, 14, 2, i, time.UTC),
			})
		}
	}
	st.Commands = []converge.CommandStatus{cs}
	doc.Status = st
	out, err := autopilot.Encode(doc)
	require.NoError(t, err)
	return out
}

// TestDecodeFastPathTakesEncodedDocuments checks that what Encode writes,
// and the documents of testdata/plan, take the fast path and decode to what
// the slow path gives.
func TestDecodeFastPathTakesEncodedDocuments(t *testing.T) {
	files, err := filepath.Glob("testdata/plan/*.yaml")
	require.NoError(t, err)
	ins := map[string][]byte{"big": bigPlanYAML(t, 200)}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		ins[filepath.Base(f)] = b
		doc, err := autopilot.Decode(b)
		require.NoError(t, err)
		enc, err := autopilot.Encode(doc)
		require.NoError(t, err)
		ins["encoded "+filepath.Base(f)] = enc
	}
	for name, in := range ins {
		t.Run(name, func(t *testing.T) {
			assert.True(t, decodeBoth(t, in), "fast path")
		})
	}
}

// planYAML is a valid plan document to vary in the tests below.
const planYAML = `apiVersion: autopilot.k0sproject.io/v1beta2
kind: Plan
metadata:
  name: autopilot
spec:
  id: id123
  commands:
  - k0supdate:
      version: v1.30.4+k0s.0
      platforms:
        linux-amd64:
          url: https://example.invalid/k0s
      targets:
        workers:
          discovery:
            static:
              nodes:
              - w0
          limits:
            concurrent: 2
status:
  state: SchedulableWait
  commands:
  - id: 0
    state: SchedulableWait
    k0supdate:
      workers:
      - name: w0
        state: SignalPending
        lastUpdatedTimestamp: "2026-05-11T19:13:02Z"
`

// TestDecodeFastPathEdges checks documents at the edges of the fast path:
// each either takes it and decodes as the slow path does (fast true), or
// falls back to the slow path (fast false), and Decode gives the slow
// path's result in both cases.
func TestDecodeFastPathEdges(t *testing.T) {
	r := strings.NewReplacer
	tests := []struct {
		name string
		in   string
		fast bool
	}{
		{"as is", planYAML, true},
		{"document start and comments", "# plan\n---\n" + r("kind: Plan\n", "kind: Plan # k\n  # c\n").Replace(planYAML), true},
		{"CRLF", strings.ReplaceAll(planYAML, "\n", "\r\n"), true},
		{"trailing spaces", strings.ReplaceAll(planYAML, "\n", "  \n"), true},
		{"quoted strings", r("id: id123", `id: "id\u00e9\x41"`, "name: autopilot", "name: 'auto''pilot'").Replace(planYAML), true},
		{"indented sequences", r("              nodes:\n              - w0", "              nodes:\n                - w0\n                - 'w1'").Replace(planYAML), true},
		{"keys with colons", r("name: autopilot", "name: autopilot\n  annotations:\n    a:b: c\n    'x: y': z").Replace(planYAML), true},
		{"spec with empty collections and ints", r("version: v1", "extra: {}\n      more: []\n      num: -3\n      version: v1").Replace(planYAML), true},
		{"unknown metadata key", r("name: autopilot", "name: autopilot\n  uid: u1").Replace(planYAML), true},
		{"metadata key in another case", r("name: autopilot", "Name: autopilot").Replace(planYAML), false},
		{"inline groups", r("      targets:\n        workers:", "      workers:", "          discovery:", "        discovery:", "            static:", "          static:", "              nodes:", "            nodes:", "              - w0", "            - w0", "          limits:", "        limits:", "            concurrent: 2", "          concurrent: 2").Replace(planYAML), true},
		{"timeouts", r("      version:", "      timeout: 5m0s\n      targetTimeout: 90s\n      version:").Replace(planYAML), true},
		{"target attempt and reason", r("        state: SignalPending", "        state: SignalFailed\n        reason: 'no: space'\n        attempt: 2").Replace(planYAML), true},
		{"started timestamp with offset", r("    state: SchedulableWait\n    k0s", "    state: SchedulableWait\n    startedTimestamp: \"2026-05-11T21:13:02.5+02:00\"\n    k0s").Replace(planYAML), true},
		{"two groups, ordered", r("        workers:\n", "        workers:\n          order: -1\n", "          limits:", "        controllers:\n          discovery:\n            static:\n              nodes:\n              - c0\n          limits:").Replace(planYAML), true},
		{"selector", r("            static:\n              nodes:\n              - w0", "            selector:\n              labels: a=b").Replace(planYAML), true},
		{"function", r("            static:\n              nodes:\n              - w0", "            function: edge").Replace(planYAML), true},
		{"validation error", r("id: id123", "id: ''").Replace(planYAML), true},
		{"k0s version error", r("version: v1.30.4+k0s.0", "version: v2").Replace(planYAML), true},
		// The slow path decides: errors, and what the subset leaves out.
		{"flow style", "spec: {id: p, commands: [{u: {targets: {w: {discovery: {static: {nodes: [a]}}}}}}]}\n", false},
		{"anchor", r("id: id123", "id: &a id123").Replace(planYAML), false},
		{"block scalar", r("id: id123", "id: |\n    id123").Replace(planYAML), false},
		{"unquoted timestamp", r(`"2026-05-11T19:13:02Z"`, "2026-05-11T19:13:02Z").Replace(planYAML), false},
		{"boolean", r("name: autopilot", "name: yes").Replace(planYAML), false},
		{"empty value", r("name: autopilot", "name:").Replace(planYAML), false},
		{"null", r("name: autopilot", "name: null").Replace(planYAML), false},
		{"second document", planYAML + "---\nkind: Other\n", false},
		{"integer string", r("id: id123", "id: 123").Replace(planYAML), false},
		{"unknown field", r("kind: Plan", "kind: Plan\nspek: x").Replace(planYAML), false},
		{"target field in another case", r("        state: SignalPending", "        State: SignalPending").Replace(planYAML), false},
		{"duplicate key", r("kind: Plan", "kind: Plan\nkind: Plan").Replace(planYAML), false},
		{"tab", r("name: autopilot", "name:\tautopilot").Replace(planYAML), false},
		{"negative concurrency", r("concurrent: 2", "concurrent: -2").Replace(planYAML), false},
		{"empty node name", r("- w0", "- ''").Replace(planYAML), false},
		{"bad timestamp", r("2026-05-11T19:13:02Z", "yesterday").Replace(planYAML), false},
		{"escaped timestamp", r("2026-05-11T19:13:02Z", `2026-05-11T19:13:02\x5a`).Replace(planYAML), true},
		{"timestamp with a character JSON escapes", r("2026-05-11T19:13:02Z", `2026-05-11T19:13:02Z<`).Replace(planYAML), false},
		{"bad indentation", r("      platforms:", "     platforms:").Replace(planYAML), false},
		{"two kinds", r("  - k0supdate:\n", "  - other: {}\n    k0supdate:\n").Replace(planYAML), false},
		{"JSON", `{"spec":{"id":"p","commands":[{"u":{"targets":{"w":{"discovery":{"static":{"nodes":["a"]}}}}}}]}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.fast, decodeBoth(t, []byte(tc.in)), "fast path")
		})
	}
}

// FuzzDecodeFastAgreesWithSlow checks that whatever the fast path takes, the
// slow path decodes to the same document (with the same validation error,
// if any), and that Decode always gives the slow path's result.
func FuzzDecodeFastAgreesWithSlow(f *testing.F) {
	files, _ := filepath.Glob("testdata/plan/*.yaml")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(planYAML))
	f.Add(bigPlanYAML(f, 3))
	for _, s := range []string{"yes", "no", "on", "off", "y", "n", "~", "null", "true", "1e3", "0x1F", ".inf", "017", "1_0", "+1", "-0", "2026-05-11", "'q''s'", `"\u00e9"`, "[]", "{}", "5m0s", "a: b"} {
		f.Add([]byte(strings.Replace(planYAML, "id: id123", "id: "+s, 1)))
		f.Add([]byte(strings.Replace(planYAML, "concurrent: 2", "concurrent: "+s, 1)))
		f.Add([]byte(fmt.Sprintf("spec:\n  id: p\n  commands:\n  - u:\n      x: %s\n      targets:\n        w:\n          discovery:\n            function: %s\n", s, s)))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		decodeBoth(t, in)
	})
}
